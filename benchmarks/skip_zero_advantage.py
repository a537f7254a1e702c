"""Training time saved by `skip_zero_advantage` on a batch where a fraction of the groups has zero spread (Â = 0).

One trainer, one micro-batch, the same model: the loss forward + backward (`compute_loss` then `backward`) is
timed with skipping off and on, alternating, and the median of the repeats is reported side by side. The batch
is synthetic (random tokens, random completion lengths, old log-probs from the model, so ratios are 1) and the
loss and gradients of both modes are checked to agree before timing.

    python benchmarks/skip_zero_advantage.py                   # CPU, a small Qwen2-shaped model
    python benchmarks/skip_zero_advantage.py --device cuda --hidden 1024 --layers 8 --rows 64 --completion-length 512
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from datasets import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trl_zoo  # noqa: E402
from trl_zoo.hooks.model_inputs import forward_inputs  # noqa: E402
from trl_zoo.tasks.tiny import build_char_tokenizer, build_tiny_causal_lm  # noqa: E402


def build_trainer(args, tokenizer):
    model = build_tiny_causal_lm(
        tokenizer, hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
        max_positions=args.prompt_length + args.completion_length, seed=0,
    )
    config = trl_zoo.GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="skip_zero_advantage_"),
        loss_type=args.loss,
        per_device_train_batch_size=args.rows,
        num_generations=args.group_size,
        max_completion_length=args.completion_length,
        skip_zero_advantage=True,
        bf16=False,
        use_cpu=args.device == "cpu",
        report_to="none",
        disable_tqdm=True,
    )
    dataset = Dataset.from_dict({"prompt": ["1+1="] * args.group_size})
    return trl_zoo.GRPOTrainer(model, lambda completions, **kw: [0.0] * len(completions), config,
                               train_dataset=dataset, processing_class=tokenizer)


def synthetic_batch(trainer, args, tokenizer) -> dict:
    generator = torch.Generator().manual_seed(0)
    device = trainer.accelerator.device
    first_char = len(tokenizer.all_special_tokens)
    shape = (args.rows, args.prompt_length + args.completion_length)
    ids = torch.randint(first_char, len(tokenizer), shape, generator=generator)
    lengths = torch.randint(args.completion_length // 2, args.completion_length + 1, (args.rows,), generator=generator)
    completion_mask = (torch.arange(args.completion_length) < lengths.unsqueeze(1)).long()
    groups = args.rows // args.group_size
    zero_groups = torch.randperm(groups, generator=generator)[: round(args.zero_fraction * groups)]
    advantages = torch.randn(args.rows, generator=generator)
    advantages.view(groups, args.group_size)[zero_groups] = 0.0
    batch = {
        "prompt_ids": ids[:, : args.prompt_length],
        "prompt_mask": torch.ones(args.rows, args.prompt_length, dtype=torch.long),
        "completion_ids": ids[:, args.prompt_length :].masked_fill(completion_mask == 0, tokenizer.pad_token_id),
        "completion_mask": completion_mask,
        "advantages": advantages,
        "num_items_in_batch": completion_mask.sum(),
    }
    batch = {key: value.to(device) for key, value in batch.items()}
    with torch.no_grad():
        input_ids, attention_mask, logits_to_keep, _ = forward_inputs(batch)
        batch["old_per_token_logps"] = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention_mask, logits_to_keep
        )[0]
    return batch


def loss_and_backward(trainer, batch, skip: bool):
    trainer.skip_zero_advantage = skip
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    if batch["advantages"].is_cuda:
        torch.cuda.synchronize()
    return loss.detach()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--loss", default="dapo")
    parser.add_argument("--rows", type=int, default=32, help="completions in the micro-batch")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--zero-fraction", type=float, default=0.5, help="share of groups with Â = 0")
    parser.add_argument("--prompt-length", type=int, default=32)
    parser.add_argument("--completion-length", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()

    tokenizer = build_char_tokenizer()
    trainer = build_trainer(args, tokenizer)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop otherwise
    batch = synthetic_batch(trainer, args, tokenizer)

    full = loss_and_backward(trainer, batch, skip=False)
    full_gradients = [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]
    skipped = loss_and_backward(trainer, batch, skip=True)
    gradient_error = max(
        ((p.grad - g).abs().max() / g.abs().max().clamp(min=1e-12)).item()
        for p, g in zip([p for p in trainer.model.parameters() if p.grad is not None], full_gradients)
    )
    loss_error = ((skipped - full).abs() / full.abs().clamp(min=1e-12)).item()

    times = {False: [], True: []}
    for _ in range(2):  # warm-up
        for skip in (False, True):
            loss_and_backward(trainer, batch, skip)
    for _ in range(args.repeats):
        for skip in (False, True):
            start = time.perf_counter()
            loss_and_backward(trainer, batch, skip)
            times[skip].append(time.perf_counter() - start)

    active = int((batch["advantages"] != 0).sum())
    off, on = statistics.median(times[False]) * 1e3, statistics.median(times[True]) * 1e3
    device = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    print(f"device {device}; model hidden {args.hidden}, {args.layers} layers; loss {args.loss}")
    print(f"micro-batch {args.rows} completions (G = {args.group_size}), prompt {args.prompt_length} + completion "
          f"≤ {args.completion_length} tokens; {args.rows - active} rows with Â = 0 "
          f"({args.zero_fraction:.0%} of groups)")
    print(f"agreement: loss rel. error {loss_error:.1e}, max gradient rel. error {gradient_error:.1e}")
    print(f"{'':22}{'median ms':>12}{'min ms':>10}")
    print(f"{'skip_zero_advantage=False':22}{off:>12.1f}{min(times[False]) * 1e3:>10.1f}")
    print(f"{'skip_zero_advantage=True':22}{on:>12.1f}{min(times[True]) * 1e3:>10.1f}")
    print(f"saving {1 - on / off:.0%} of the loss forward + backward ({args.repeats} repeats, median)")


if __name__ == "__main__":
    main()
