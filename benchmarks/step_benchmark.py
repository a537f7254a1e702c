"""One benchmark configuration, in this process: time the training step of TRL's or trl_zoo's trainer.

Two measurements on the same generated batch:
- `loss_ms`: median over repeats of compute_loss + backward on one micro-batch (the part trl_zoo changes), after
  warm-up, with CUDA synchronised around each repeat; `peak_gib`: peak GPU memory allocated during those repeats
  (model, optimizer-free);
- `step_s` (with --train_steps N): median of TRL's own logged `step_time` over N full optimizer steps of
  `trainer.train()` (generation included), skipping the first.

Prints one JSON line. `run_benchmarks.py` runs each configuration in its own process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CUDA = torch.cuda.is_available()


def synchronize():
    if CUDA:
        torch.cuda.synchronize()


def peak_gib() -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if CUDA else float("nan")


def reset_peak():
    if CUDA:
        torch.cuda.reset_peak_memory_stats()


from benchmarks.lib.harness import (  # noqa: E402
    SHAPES,
    all_linear_lora,
    length_parity_reward,
    load_4bit,
    numbered_tokenizer,
    prompt_dataset,
    random_model,
    short_run_args,
    trainer_classes,
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--implementation", choices=["trl", "zoo"], required=True)
    parser.add_argument("--loss_type", default="grpo")
    parser.add_argument("--shape", default="qwen2.5-1.5b", choices=sorted(SHAPES))
    parser.add_argument("--num_generations", type=int, default=8)
    parser.add_argument("--prompts_per_step", type=int, default=2)
    parser.add_argument("--prompt_length", type=int, default=128)
    parser.add_argument("--completion_length", type=int, default=256)
    parser.add_argument("--lora_r", type=int, default=16)
    parser.add_argument("--load_in_4bit", action="store_true")
    parser.add_argument("--gradient_checkpointing", action="store_true")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--train_steps", type=int, default=0)
    parser.add_argument("--extra", default="{}", help="JSON dict of extra config fields")
    return parser.parse_args(argv)


def prepare(options):
    """The trainer of `options.implementation` on a random model, and one scored micro-batch of its own generation."""
    from trl.trainer.utils import split_tensor_dict

    trainer_cls, config_cls = trainer_classes(options.implementation)
    vocab_size = SHAPES[options.shape]["vocab_size"]
    tokenizer = numbered_tokenizer(vocab_size)
    model = (
        load_4bit(options.shape, Path(tempfile.gettempdir())) if options.load_in_4bit else random_model(options.shape)
    )
    batch_size = options.num_generations * options.prompts_per_step
    args = config_cls(
        output_dir=str(Path(tempfile.gettempdir()) / "trl_zoo_benchmark"),
        loss_type=options.loss_type,
        per_device_train_batch_size=batch_size,
        num_generations=options.num_generations,
        max_completion_length=options.completion_length,
        max_steps=max(options.train_steps, 1),
        **short_run_args(),
        gradient_checkpointing=options.gradient_checkpointing,
        **json.loads(options.extra),
    )
    peft_config = all_linear_lora(options.lora_r)
    trainer = trainer_cls(
        model=model,
        reward_funcs=length_parity_reward,
        args=args,
        train_dataset=prompt_dataset(64, options.prompt_length, vocab_size),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    trainer.model.train()
    generation_batch = next(iter(trainer.get_train_dataloader()))
    batch = trainer._generate_and_score_completions(generation_batch)
    micro_batch = split_tensor_dict(batch, args.steps_per_generation)[0]
    trainer.current_gradient_accumulation_steps = 1
    return trainer, micro_batch


def main(argv=None):
    options = parse_args(argv)
    trainer, micro_batch = prepare(options)
    batch_size = options.num_generations * options.prompts_per_step

    synchronize()
    reset_peak()
    times = []
    for repeat in range(options.warmup + options.repeats):
        synchronize()
        start = time.perf_counter()
        loss = trainer.compute_loss(trainer.model, micro_batch)
        loss.backward()
        synchronize()
        if repeat >= options.warmup:
            times.append(time.perf_counter() - start)
        trainer.model.zero_grad(set_to_none=True)
    result = {
        "implementation": options.implementation,
        "loss_type": options.loss_type,
        "shape": options.shape,
        "load_in_4bit": options.load_in_4bit,
        "sequences": batch_size,
        "completion_tokens": int(micro_batch["completion_mask"].sum()),
        "loss_ms": 1000 * statistics.median(times),
        "peak_gib": peak_gib(),
        "loss": float(loss.detach()),
        "device": torch.cuda.get_device_name() if CUDA else "cpu",
    }
    if options.train_steps:
        reset_peak()
        trainer.train()
        step_times = [log["step_time"] for log in trainer.state.log_history if "step_time" in log]
        result["step_s"] = statistics.median(step_times[1:] or step_times)
        result["train_peak_gib"] = peak_gib()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
