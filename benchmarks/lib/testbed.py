"""The mechanism testbed: one (loss preset, seed, scale) configuration per process, off-policy updates, JSONL per step.

    python benchmarks/lib/testbed.py --preset dapo --seed 0 --scale cpu --steps 32 --out DIR

The task is column addition with a worked scratchpad (trl_zoo/tasks/scratchpad.py: completions of 11-72 tokens at
scale "gpu", 11-32 at "cpu"); the base policy is bootstrapped from scratch with a carry-slip habit
(trl_zoo/tasks/scratchpad_bootstrap.py), once per `--bootstrap_seed` and cached, so every preset and RL seed starts
from the same policy. Each generation batch is split into `steps_per_generation` (default 4) optimizer steps, so
steps 2-4 of a batch are off-policy and the clip acts; `--num_iterations 2` reuses each batch twice more.

`DIR/<preset>-seed<S>.jsonl` gets one line per optimizer step: TRL's and trl_zoo's logged metrics (reward, entropy,
clip_ratio/*, cispo_clip_ratio, grad_norm, completions/mean_length, frac_reward_zero_std, dynamic_sampling/*) and
what this file adds from the reward calls of the generation rounds that fed the step (null on steps without one):

    length_correct / length_incorrect   mean completion tokens (eos included) of the rewarded and the other completions
    informative_share                   share of generated groups whose rewards are not all equal
    completions_generated               running count of completions generated (resampling rounds included)
    heldout_accuracy                    greedy exact-match accuracy on the held-out prompts, every --eval_every steps

plus a first line (step 0) with the held-out accuracy of the base policy and a last line {"done": ...} with timings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers import AutoTokenizer, TrainerCallback  # noqa: E402

from trl_zoo import GRPOConfig, GRPOTrainer  # noqa: E402
from trl_zoo.tasks.evaluation import greedy_accuracy  # noqa: E402
from trl_zoo.tasks.scratchpad_bootstrap import bootstrap_scratchpad_policy, scale_setup  # noqa: E402

# Loss presets: trl_zoo.GRPOConfig fields on top of the common settings below. Clip ranges are the papers'.
PRESETS: dict[str, dict] = {
    "grpo": dict(loss_type="grpo", epsilon=0.2),
    "dr_grpo": dict(loss_type="dr_grpo", epsilon=0.2, scale_rewards="none"),  # arXiv:2503.20783
    "dapo": dict(loss_type="dapo", epsilon=0.2, epsilon_high=0.28),  # clip-higher, arXiv:2503.14476
    "dapo_symmetric": dict(loss_type="dapo", epsilon=0.2, epsilon_high=0.2),  # clip-higher off
    "gspo": dict(loss_type="gspo", epsilon=3e-4, epsilon_high=4e-4),  # arXiv:2507.18071
    "gmpo": dict(loss_type="gmpo", gmpo_epsilon=0.4),  # arXiv:2507.20673
    "cispo": dict(loss_type="cispo", epsilon_high=5.0),  # arXiv:2506.13585, TRL's recommended cap
}

# Per scale: batch shape and optimiser. A generation batch is per_device_train_batch_size × steps_per_generation.
SCALE_SETTINGS = {
    "cpu": dict(per_device_train_batch_size=32, num_generations=8, learning_rate=5e-4, eval_every=8, heldout=128),
    "gpu": dict(per_device_train_batch_size=128, num_generations=8, learning_rate=1e-4, eval_every=16, heldout=512),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", required=True, choices=sorted(PRESETS))
    parser.add_argument("--seed", type=int, default=0, help="RL seed (sampling, data order).")
    parser.add_argument("--scale", default="cpu", choices=sorted(SCALE_SETTINGS))
    parser.add_argument("--steps", type=int, default=32, help="Optimizer steps.")
    parser.add_argument("--out", required=True, help="Folder for <preset>[-<sampler>]-seed<S>.jsonl.")
    parser.add_argument("--sampler", default="none", help="Dynamic sampler: none, resample, reweight, or a plugin's.")
    parser.add_argument("--steps_per_generation", type=int, default=4)
    parser.add_argument("--num_iterations", type=int, default=1)
    parser.add_argument("--bootstrap_seed", type=int, default=0, help="Seed of the shared base policy.")
    parser.add_argument("--eval_every", type=int, default=None, help="Held-out accuracy every N steps.")
    parser.add_argument("--heldout", type=int, default=None, help="Held-out prompts evaluated (first N).")
    parser.add_argument("--learning_rate", type=float, default=None)
    return parser.parse_args(argv)


def run_name(args) -> str:
    sampler = "" if args.sampler == "none" else f"-{args.sampler}"
    iterations = "" if args.num_iterations == 1 else f"-mu{args.num_iterations}"
    return f"{args.preset}{sampler}{iterations}-seed{args.seed}"


class RolloutStats:
    """A reward function wrapper that also records, per generation round, what the testbed plots."""

    def __init__(self, reward, group_size: int):
        self.reward = reward
        self.group_size = group_size
        self.__name__ = getattr(reward, "__name__", "reward")
        self.generated = 0
        self.pending: list[tuple[list[int], list[float]]] = []

    def __call__(self, completions, completion_ids, **kwargs):
        rewards = self.reward(completions, **kwargs)
        self.generated += len(rewards)
        self.pending.append(([len(ids) for ids in completion_ids], rewards))
        return rewards

    def take(self) -> dict:
        """Means over the rounds since the last call (empty when no round ran)."""
        if not self.pending:
            return {}
        lengths = [length for round_lengths, _ in self.pending for length in round_lengths]
        rewards = [reward for _, round_rewards in self.pending for reward in round_rewards]
        groups = [rewards[i : i + self.group_size] for i in range(0, len(rewards), self.group_size)]
        correct = [length for length, reward in zip(lengths, rewards) if reward == 1.0]
        incorrect = [length for length, reward in zip(lengths, rewards) if reward != 1.0]
        self.pending.clear()
        return {
            "length_correct": sum(correct) / len(correct) if correct else None,
            "length_incorrect": sum(incorrect) / len(incorrect) if incorrect else None,
            "informative_share": sum(max(group) > min(group) for group in groups) / len(groups),
            "rollout_accuracy": sum(reward == 1.0 for reward in rewards) / len(rewards),
        }


class JsonlLogger(TrainerCallback):
    """One JSON line per logged step: the trainer's logs, the rollout statistics and the held-out accuracy."""

    def __init__(self, path: Path, stats: RolloutStats, evaluate, eval_every: int):
        self.handle = path.open("w")
        self.stats = stats
        self.evaluate = evaluate
        self.eval_every = eval_every
        self.started = time.perf_counter()

    def write(self, record: dict):
        self.handle.write(json.dumps(record) + "\n")
        self.handle.flush()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.write({"step": 0, "heldout_accuracy": self.evaluate(model)})

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        if "loss" not in (logs or {}) and "reward" not in (logs or {}):
            return
        step = state.global_step
        record = {"step": step, "seconds": time.perf_counter() - self.started, **logs, **self.stats.take(),
                  "completions_generated": self.stats.generated}
        if step % self.eval_every == 0 or step >= state.max_steps:
            record["heldout_accuracy"] = self.evaluate(model)
        self.write(record)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    settings = SCALE_SETTINGS[args.scale]
    task, recipe = scale_setup(args.scale, args.bootstrap_seed)
    started = time.perf_counter()
    model_path = bootstrap_scratchpad_policy(task, recipe, log=lambda line: print(line, flush=True))
    bootstrap_seconds = time.perf_counter() - started
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    heldout = task.heldout_dataset().select(range(min(args.heldout or settings["heldout"], task.num_heldout)))
    stats = RolloutStats(task.reward, settings["num_generations"])

    def evaluate(model) -> float:
        return greedy_accuracy(model, tokenizer, heldout["prompt"], task.max_completion_length, reward=task.reward,
                               reward_kwargs={"answer": heldout["answer"]})

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = run_name(args)
    cuda = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=str(out / f"{name}-trainer"),
        max_steps=args.steps,
        per_device_train_batch_size=settings["per_device_train_batch_size"],
        gradient_accumulation_steps=1,
        steps_per_generation=args.steps_per_generation,
        num_iterations=args.num_iterations,
        num_generations=settings["num_generations"],
        max_completion_length=task.max_completion_length,
        learning_rate=args.learning_rate or settings["learning_rate"],
        lr_scheduler_type="constant",
        temperature=1.0,
        beta=0.0,
        seed=args.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=cuda,
        use_cpu=not cuda,
        gradient_checkpointing=False,
        dynamic_sampling=None if args.sampler == "none" else args.sampler,
        **PRESETS[args.preset],
    )
    logger = JsonlLogger(out / f"{name}.jsonl", stats, evaluate, args.eval_every or settings["eval_every"])
    trainer = GRPOTrainer(model=str(model_path), reward_funcs=[stats], args=config, train_dataset=task.train_dataset(),
                          processing_class=tokenizer, callbacks=[logger])
    train_started = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - train_started
    logger.write({"done": True, "preset": args.preset, "sampler": args.sampler, "seed": args.seed, "scale": args.scale,
                  "steps": args.steps, "num_iterations": args.num_iterations, "train_seconds": train_seconds,
                  "bootstrap_seconds": bootstrap_seconds,
                  "parameters": sum(p.numel() for p in trainer.model.parameters())})
    print(f"{name}: {args.steps} steps in {train_seconds:.0f} s (bootstrap {bootstrap_seconds:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
