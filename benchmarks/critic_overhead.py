"""Extra memory and step time of a critic (PPO with GAE) over GRPO, side by side in one process.

Three trainers on the same model, LoRA adapter, prompts and reward: `grpo` (TRL's advantages), `gae` with the
critic as its own LoRA adapter plus a scalar head (`critic_model="adapter"`), and `gae` with an MLP head on the
policy's detached hidden states (`critic_model="head"`). Configurations are interleaved in every repeat, so a busy
machine slows them alike; medians are reported. Every completion runs to the length cap (EOS suppressed), so the
variants generate the same number of tokens whatever their policies sample.

- train step: one optimizer step of `trainer.train()` (generation, scoring, the critic's value pass, loss, backward,
  optimizer), median over the steps after the first of each run and over repeats;
- generation: `_generate_and_score_completions` on one prompt batch (generation, rewards, value pass, GAE);
- loss step: `compute_loss` + `backward` on one fixed generated batch;
- memory: trainable parameters with their gradients and AdamW's two moments (fp32: 16 bytes per parameter), and
  the activations autograd keeps for the backward of one loss step (every tensor saved for backward, each storage
  counted once, parameters excluded).

    python benchmarks/critic_overhead.py                          # CPU, the tiny model (hidden 64, 2 layers)
    python benchmarks/critic_overhead.py --hidden 256 --layers 4 --completion-length 64
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
from peft import LoraConfig
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trl_zoo  # noqa: E402
from trl_zoo.tasks.tiny import build_char_tokenizer, build_tiny_causal_lm  # noqa: E402

VARIANTS = {
    "grpo": dict(),
    "gae, adapter critic": dict(advantage_estimator="gae", critic_model="adapter"),
    "gae, head critic": dict(advantage_estimator="gae", critic_model="head"),
}


def digit_reward(completions, **kwargs):
    return [sum(c.isdigit() for c in completion) / max(len(completion), 1) for completion in completions]


class StepTimer(TrainerCallback):
    def __init__(self):
        self.times, self._start = [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


def build_trainer(args, tokenizer, variant: str, max_steps: int):
    model = build_tiny_causal_lm(
        tokenizer, hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
        max_positions=16 + args.completion_length, seed=0,
    )
    config = trl_zoo.GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="critic_overhead_"),
        loss_type="dapo",
        per_device_train_batch_size=args.rows,
        num_generations=args.group_size,
        max_completion_length=args.completion_length,
        max_steps=max_steps,
        learning_rate=1e-3,
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1_000_000,
        seed=0,
        generation_kwargs={"min_new_tokens": args.completion_length},  # equal lengths: equal generation work
        **VARIANTS[variant],
    )
    prompts = [f"{a}+{b}=" for a, b in zip(range(10, 74), range(30, 94))]
    lora = LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, target_modules="all-linear", lora_dropout=0.0)
    trainer = trl_zoo.GRPOTrainer(
        model, digit_reward, config, train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer,
        peft_config=lora,
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def generated_batch(trainer):
    torch.manual_seed(0)
    trainer.model.train()
    prompts = next(iter(trainer.get_train_dataloader()))
    return prompts, trainer._generate_and_score_completions(prompts)


def loss_step(trainer, batch):
    trainer.model.zero_grad(set_to_none=True)
    trainer.compute_loss(trainer.model, batch).backward()


def saved_activation_bytes(trainer, batch) -> int:
    parameters = {p.untyped_storage().data_ptr() for p in trainer.model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    trainer.model.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    return sum(saved.values())


def trainable_parameters(trainer) -> int:
    return sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)


def timed(fn, repeats_store, name):
    start = time.perf_counter()
    fn()
    repeats_store[name].append(time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8, help="completions per step")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--completion-length", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per training run")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tokenizer = build_char_tokenizer()

    train_step = {name: [] for name in VARIANTS}
    for _ in range(args.repeats):
        for name in VARIANTS:
            trainer = build_trainer(args, tokenizer, name, args.steps)
            timer = StepTimer()
            trainer.add_callback(timer)
            trainer.train()
            train_step[name] += timer.times[1:]

    trainers = {name: build_trainer(args, tokenizer, name, args.steps) for name in VARIANTS}
    for trainer in trainers.values():
        trainer.create_optimizer()
        trainer.current_gradient_accumulation_steps = 1
    batches = {name: generated_batch(trainer) for name, trainer in trainers.items()}
    generation = {name: [] for name in VARIANTS}
    loss = {name: [] for name in VARIANTS}
    for _ in range(2):  # warm-up
        for name, trainer in trainers.items():
            loss_step(trainer, batches[name][1])
    for _ in range(args.repeats * 4):
        for name, trainer in trainers.items():
            prompts, batch = batches[name]
            timed(lambda: trainer._generate_and_score_completions(prompts), generation, name)
            timed(lambda: loss_step(trainer, batch), loss, name)

    print(f"CPU ({torch.get_num_threads()} thread), tiny Qwen2: hidden {args.hidden}, {args.layers} layers; LoRA r "
          f"{args.lora_rank} on all linear layers; {args.rows} completions (G = {args.group_size}) of ≤ "
          f"{args.completion_length} tokens; medians over {args.repeats} interleaved repeats")
    header = f"{'':22}{'train step ms':>14}{'generation ms':>15}{'loss step ms':>14}{'trainable':>11}" \
             f"{'param+grad+Adam KiB':>21}{'activations KiB':>17}"
    print(header)
    base = None
    for name, trainer in trainers.items():
        row = (
            statistics.median(train_step[name]) * 1e3,
            statistics.median(generation[name]) * 1e3,
            statistics.median(loss[name]) * 1e3,
            trainable_parameters(trainer),
            trainable_parameters(trainer) * 16 / 1024,
            saved_activation_bytes(trainer, batches[name][1]) / 1024,
        )
        base = base or row
        print(f"{name:22}{row[0]:>14.1f}{row[1]:>15.1f}{row[2]:>14.1f}{row[3]:>11,}{row[4]:>21.1f}{row[5]:>17.1f}")
        if row is not base:
            ratios = [f"{value / reference:.2f}x" for value, reference in zip(row, base)]
            print(f"{'  vs grpo':22}{ratios[0]:>14}{ratios[1]:>15}{ratios[2]:>14}{ratios[3]:>11}{ratios[4]:>21}"
                  f"{ratios[5]:>17}")


if __name__ == "__main__":
    main()
