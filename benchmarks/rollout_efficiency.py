"""Compute spent on what teaches: no sampler vs `resample` vs `greso`, with and without `length_bucketing`.

The built-in addition task's bootstrapped policy trains on a small fixed prompt set for many epochs, the regime
where most groups end with no reward spread (every completion right): the one GRESO (arXiv:2506.02177) targets. One
configuration and seed per process (`--config NAME --seed S`, or `--all` to run every pair, each in its own
subprocess, interleaved by seed). Everything measured is a count, so it does not depend on the machine:

- completions generated per trained informative completion (a completion of a group with reward spread that the
  optimizer step trained on);
- token slots the training forward computed per informative real completion token (a completion token of a row
  with Â ≠ 0 that is not padding): completion slots (rows × completion width) and whole-sequence slots;
- the share of generated groups with no spread, and the held-out greedy accuracy before and after.

    python benchmarks/rollout_efficiency.py --all --seeds 0,1,2 --out benchmarks/results/rollout.jsonl
    python benchmarks/rollout_efficiency.py --config greso --seed 0      # one process, prints one JSON line

Goals (the issue that introduced `greso`): greso generates ≤ 0.6× the completions resample generates per trained
informative completion at equal accuracy (within the seed spread); with skip_zero_advantage and length_bucketing,
≤ 1.15 completion slots per informative real token.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# name -> trl_zoo fields on top of the shared recipe
CONFIGS = {
    "none": {},
    "none+skip+bucket": {"skip_zero_advantage": True, "length_bucketing": True},
    "resample": {"dynamic_sampling": "resample"},
    "greso": {"dynamic_sampling": "greso"},
    "greso-floor0.05": {"dynamic_sampling": "greso", "greso_min_explore": 0.05},  # the GRESO authors' lower bound
    "greso-floor0.05+skip+bucket": {"dynamic_sampling": "greso", "greso_min_explore": 0.05,
                                    "skip_zero_advantage": True, "length_bucketing": True},
}


class Counts:
    """Counters filled by wrapping the trainer's generation and loss seams (see `instrument`)."""

    def __init__(self):
        self.generated = 0  # completions generated (every round, every group)
        self.trained_informative = 0  # completions of the trained batches whose Â is not all zero
        self.completion_slots = 0  # rows × completion width of every training forward
        self.sequence_slots = 0  # rows × (prompt + completion width) of every training forward
        self.informative_tokens = 0  # real completion tokens of rows with Â ≠ 0 in the trained batches
        self.groups = 0
        self.zero_spread_groups = 0
        self.generation_seconds = 0.0  # wall time inside TRL's generation and scoring (training rounds only)


def instrument(trainer, counts: Counts, group_size: int):
    """Count at TRL's generation (innermost `_generate_and_score_completions`), at each scored round (the generation
    seam's `_scored_round`), at the loss step's inputs (`compute_loss`) and at the forward the loss step really runs
    (`PolicyLossStep._policy_forward`)."""
    import torch
    from trl import GRPOTrainer as TRLGRPOTrainer

    from trl_zoo.hooks.generation import GenerationSeam
    from trl_zoo.hooks.loss_step import PolicyLossStep

    generate = TRLGRPOTrainer._generate_and_score_completions

    @functools.wraps(generate)  # the door's drift check reads the signature through __wrapped__
    def counted_generate(self, inputs):
        started = time.perf_counter()
        batch = generate(self, inputs)
        if self.model.training:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            counts.generation_seconds += time.perf_counter() - started
            counts.generated += len(inputs)
        return batch

    scored_round = GenerationSeam._scored_round

    def counted_round(self, inputs):
        scored = scored_round(self, inputs)
        if self.model.training:
            rewards = scored.task_rewards().view(-1, group_size)
            counts.groups += rewards.size(0)
            counts.zero_spread_groups += int((rewards.amax(1) == rewards.amin(1)).sum())
        return scored

    forward = PolicyLossStep._policy_forward

    def counted_forward(self, model, inputs, compute_entropy=True):
        if model.training:
            rows = inputs["completion_ids"].size(0)
            counts.completion_slots += rows * inputs["completion_ids"].size(1)
            counts.sequence_slots += rows * (inputs["completion_ids"].size(1) + inputs["prompt_ids"].size(1))
        return forward(self, model, inputs, compute_entropy)

    compute_loss = trainer.compute_loss

    def counted_compute_loss(model, inputs, *args, **kwargs):
        advantages = inputs["advantages"]
        informative = (advantages.reshape(advantages.size(0), -1) != 0).any(dim=1)
        counts.trained_informative += int(informative.sum())
        counts.informative_tokens += int((inputs["completion_mask"] * informative.unsqueeze(1)).sum())
        return compute_loss(model, inputs, *args, **kwargs)

    TRLGRPOTrainer._generate_and_score_completions = counted_generate
    GenerationSeam._scored_round = counted_round
    PolicyLossStep._policy_forward = counted_forward
    trainer.compute_loss = counted_compute_loss


def run_one(config_name: str, seed: int, args) -> dict:
    from peft import LoraConfig

    import benchmarks.lib.harness  # noqa: F401  (datasets' fingerprinting patch)
    import trl_zoo
    from trl_zoo.cli.arguments.train_arguments import quickstart_preset
    from trl_zoo.tasks import get_task
    from trl_zoo.tasks.bootstrap import BootstrapRecipe, bootstrap_policy
    from trl_zoo.tasks.evaluation import greedy_accuracy
    from trl_zoo.tasks.rewards import exact_match_reward

    task = get_task("addition")
    model_path = bootstrap_policy(task, BootstrapRecipe(seed=seed), log=lambda *_: None)
    preset = quickstart_preset(task)
    rows_per_step = preset["per_device_train_batch_size"]
    config = trl_zoo.GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="rollout_efficiency_"),
        loss_type=args.loss_type,
        learning_rate=preset["learning_rate"],
        max_steps=args.steps,
        per_device_train_batch_size=rows_per_step // args.micro_batches,
        gradient_accumulation_steps=args.micro_batches,
        num_generations=preset["num_generations"],
        max_completion_length=preset["max_completion_length"],
        temperature=preset["temperature"],
        beta=0.0,
        seed=seed,
        bf16=False,
        use_cpu=not args.gpu,
        gradient_checkpointing=False,
        save_strategy="no",
        logging_steps=10**6,
        report_to="none",
        disable_tqdm=True,
        **CONFIGS[config_name],
    )
    train = task.train_dataset().shuffle(seed=seed).select(range(args.prompts))
    heldout = task.heldout_dataset()
    peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = trl_zoo.GRPOTrainer(str(model_path), exact_match_reward, config, train_dataset=train,
                                  peft_config=peft_config)
    counts = Counts()
    instrument(trainer, counts, config.num_generations)

    def accuracy() -> float:
        return greedy_accuracy(trainer.model, trainer.processing_class, heldout["prompt"],
                               max_new_tokens=config.max_completion_length, reward=exact_match_reward,
                               reward_kwargs={"answer": heldout["answer"]})

    before = accuracy()
    started = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - started
    after = accuracy()
    trained = max(counts.trained_informative, 1)
    return {
        "config": config_name,
        "seed": seed,
        "steps": trainer.state.global_step,
        "accuracy_before": before,
        "accuracy_after": after,
        "generated": counts.generated,
        "trained_informative": counts.trained_informative,
        "generated_per_trained_informative": counts.generated / trained,
        "zero_spread_share": counts.zero_spread_groups / max(counts.groups, 1),
        "completion_slots_per_informative_token": counts.completion_slots / max(counts.informative_tokens, 1),
        "sequence_slots_per_informative_token": counts.sequence_slots / max(counts.informative_tokens, 1),
        "device": "cuda" if args.gpu else "cpu",
        "train_seconds": train_seconds,
        "generation_seconds": counts.generation_seconds,
    }


def summarise(records: list[dict]) -> str:
    """Markdown table: per configuration, median and (min, max) over seeds."""
    columns = [
        ("generated_per_trained_informative", "generated / trained informative", "{:.2f}"),
        ("zero_spread_share", "zero-spread share", "{:.0%}"),
        ("completion_slots_per_informative_token", "completion slots / informative token", "{:.2f}"),
        ("sequence_slots_per_informative_token", "sequence slots / informative token", "{:.2f}"),
        ("accuracy_after", "held-out accuracy after", "{:.1%}"),
    ]
    lines = ["| configuration | seeds | " + " | ".join(title for _, title, _ in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for name in CONFIGS:
        rows = [record for record in records if record["config"] == name]
        if not rows:
            continue
        cells = []
        for key, _, form in columns:
            values = [row[key] for row in rows]
            cells.append(
                f"{form.format(statistics.median(values))} ({form.format(min(values))}–{form.format(max(values))})"
            )
        lines.append(f"| {name} | {len(rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", choices=list(CONFIGS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--all", action="store_true", help="every configuration × --seeds, one process each")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="with --all: which configurations")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--prompts", type=int, default=64, help="size of the fixed training prompt set")
    parser.add_argument("--micro-batches", type=int, default=4, help="gradient accumulation steps per update")
    parser.add_argument("--loss-type", default="grpo")
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--bootstrap", action="store_true", help="only build (or find) the seed's cached base policy")
    parser.add_argument("--out", help="with --all: JSONL file of the records (appended)")
    parser.add_argument("--parallel", type=int, default=1,
                        help="with --all: processes at a time "
                        "(counts do not depend on it; timings do: keep 1 to time)")
    args = parser.parse_args(argv)
    if args.bootstrap:
        import benchmarks.lib.harness  # noqa: F401  (datasets' fingerprinting patch)
        from trl_zoo.tasks import get_task
        from trl_zoo.tasks.bootstrap import BootstrapRecipe, bootstrap_policy

        print(bootstrap_policy(get_task("addition"), BootstrapRecipe(seed=args.seed)), flush=True)
        return
    if not args.all:
        print(json.dumps(run_one(args.config, args.seed, args)), flush=True)
        return
    passthrough = ["--steps", str(args.steps), "--prompts", str(args.prompts), "--micro-batches",
                   str(args.micro_batches), "--loss-type", args.loss_type] + (["--gpu"] if args.gpu else [])
    jobs = [(name, int(seed)) for seed in args.seeds.split(",") for name in args.configs.split(",")]

    def run(job):
        name, seed = job
        command = [sys.executable, __file__, "--config", name, "--seed", str(seed), *passthrough]
        environment = {
            **os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        }
        if args.parallel > 1:
            environment["OMP_NUM_THREADS"] = "1"
        result = subprocess.run(command, capture_output=True, text=True, env=environment)
        if result.returncode != 0:
            print(f"{name} seed {seed} failed:\n{result.stderr[-3000:]}", file=sys.stderr, flush=True)
            return None
        record = json.loads(result.stdout.strip().splitlines()[-1])
        print(json.dumps(record), flush=True)
        return record

    with ThreadPoolExecutor(max_workers=args.parallel) as pool:  # each seed's base policy once, before the runs
        seeds = sorted({seed for _, seed in jobs})
        list(pool.map(lambda seed: subprocess.run([sys.executable, __file__, "--bootstrap", "--seed", str(seed)],
                                                  check=True, capture_output=True), seeds))
        records = [record for record in pool.map(run, jobs) if record is not None]
    if args.out:
        with open(args.out, "a") as handle:
            handle.writelines(json.dumps(record) + "\n" for record in records)
    print(summarise(records))


if __name__ == "__main__":
    main()
