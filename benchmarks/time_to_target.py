"""Time to a target held-out accuracy against TRL's `GRPOTrainer` on one GPU (the real-model task: the packaged
SmolLM2-135M-Instruct with LoRA on chat_arithmetic, the task's preset batch shape, TRL 1.16's defaults otherwise).

    python benchmarks/time_to_target.py --out DIR [--seeds 0,1,2] [--steps 40] [--eval_every 5]
        [--contenders trl_zoo,greso_skip_bucket,merged] [--fraction 0.9] [--budget_factor 2] [--list]
    python benchmarks/time_to_target.py --out DIR --cpu_smoke        # the whole pipeline, tiny, on the CPU

Per seed s, one process per run (`time_to_target_run.py`), one run at a time:

1. TRL's trainer (`--trainer trl`) runs `--steps` N optimizer steps, held-out greedy accuracy every k steps
   (`--eval_every`) and at the last; its training clock T_TRL excludes the evaluation (counted apart).
2. The target, from TRL's held-out accuracy before (a₀) and after (a_N) (`target_accuracy`):

       a* = a₀ + f · (a_N − a₀)          f = --fraction (0.9: 90 % of TRL's gain)

   No target (and no contender runs for that seed) when TRL gained nothing (a_N ≤ a₀). `--fixed_target` replaces
   the rule, for tests of the pipeline only.
3. Each contender (a named set of `trl-zoo train` flags, `CONTENDERS`), in an order rotated by the seed's index,
   runs until an evaluation reaches a* or its clock reaches the budget B = b · T_TRL (`--budget_factor` b = 2), or
   N · `--max_steps_factor` steps (default 1: the same max_steps, hence the same linear learning-rate schedule
   as TRL's run). Its time to target is its clock at the first evaluation with a ≥ a*; TRL's own is read from
   its curve the same way.

`--resume` reuses the runs an earlier invocation with the same DIR finished, so the study can go in pieces shorter
than one seed. Every run's JSON line goes to DIR/records.jsonl (and DIR/seed<s>/<name>/record.jsonl); the summary
(`summary_table`) to DIR/summary.md: per contender over seeds the median and range of time to target (a run that did
not reach it counts as +∞ in the median), the median and range of its ratio to TRL's time on the same seed, how many
seeds reached the target, accuracy at the stop, completions, token slots and peak memory. Goal of the issue: ratio ≤
0.5 at the median with peak memory ≤ TRL's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

REFERENCE = "trl"
# name -> `trl-zoo train` flags (trl_zoo's trainer)
CONTENDERS: dict[str, list[str]] = {
    "trl_zoo": [],
    "greso_skip_bucket": [
        "--dynamic_sampling", "greso", "--skip_zero_advantage", "true", "--length_bucketing", "true",
    ],
    "merged": ["--merge_adapter_for_generation", "true"],
    "merged_greso_skip_bucket": [
        "--merge_adapter_for_generation", "true", "--dynamic_sampling", "greso", "--skip_zero_advantage", "true",
        "--length_bucketing", "true",
    ],
}
DEFAULT_CONTENDERS = "trl_zoo,greso_skip_bucket,merged"
# tiny settings for --cpu_smoke: the whole pipeline in a few minutes of CPU, not a measurement
CPU_SMOKE_FLAGS = [
    "--use_cpu", "true", "--bf16", "false", "--num_heldout", "2", "--eval_batch_size", "2",
    "--max_completion_length", "4", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
    "--num_generations", "2",
]


def target_accuracy(before: float, after: float, fraction: float) -> float | None:
    """a* = a₀ + f · (a_N − a₀); None when TRL gained nothing (a_N ≤ a₀), so there is no target to reach."""
    if not 0 < fraction <= 1:
        raise ValueError(f"--fraction: in (0, 1], got {fraction}.")
    if after <= before:
        return None
    return before + fraction * (after - before)


def run_order(seed_index: int, contenders: list[str]) -> list[str]:
    """TRL first (it sets the target and budget), then the contenders rotated by the seed's index."""
    shift = seed_index % len(contenders) if contenders else 0
    return [REFERENCE, *contenders[shift:], *contenders[:shift]]


def first_reaching(curve, target: float | None) -> float | None:
    """The clock T at the first point (step, a, T) of the curve with a ≥ target, or None."""
    if target is None:
        return None
    return next((clock for _, accuracy, clock in curve if accuracy >= target), None)


def median_range(values: list[float]) -> tuple[float, float, float]:
    """(median, min, max); +∞ entries (not reached) count in the median and the max."""
    return statistics.median(values), min(values), max(values)


def summary_table(records: list[dict]) -> str:
    """Markdown: one row per run name (TRL first), over the seeds that have a TRL reference with a target."""
    reference = {r["seed"]: r for r in records if r["name"] == REFERENCE and r.get("target") is not None}
    names = [REFERENCE] + sorted({r["name"] for r in records} - {REFERENCE})
    lines = [
        "| run | seeds reached | time to target, median (range) s | × TRL, median (range) | accuracy at stop, median "
        "| completions, median | completion slots, median | peak memory GiB, max |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def fmt(value: float, spec: str = "{:.1f}") -> str:
        return "not reached" if math.isinf(value) else spec.format(value)

    for name in names:
        runs = [r for r in records if r["name"] == name and r["seed"] in reference]
        if not runs:
            continue
        times, ratios = [], []
        for r in runs:
            trl_time = reference[r["seed"]]["time_to_target"]
            own = r["time_to_target"] if r["time_to_target"] is not None else math.inf
            times.append(own)
            ratios.append(own / trl_time if trl_time else math.inf)
        t_med, t_lo, t_hi = median_range(times)
        q_med, q_lo, q_hi = median_range(ratios)
        memory = [r["peak_memory_gib"] for r in runs if r.get("peak_memory_gib") is not None]
        lines.append(
            f"| {name} | {sum(not math.isinf(t) for t in times)}/{len(runs)} "
            f"| {fmt(t_med)} ({fmt(t_lo)}–{fmt(t_hi)}) "
            f"| {fmt(q_med, '{:.2f}')} ({fmt(q_lo, '{:.2f}')}–{fmt(q_hi, '{:.2f}')}) "
            f"| {statistics.median(r['accuracy_at_stop'] for r in runs):.1%} "
            f"| {statistics.median(r['completions'] for r in runs):.0f} "
            f"| {statistics.median(r['completion_slots'] for r in runs):.0f} "
            f"| {f'{max(memory):.2f}' if memory else 'n/a'} |"
        )
    return "\n".join(lines)


def run_command(name: str, seed: int, out: Path, args, target: float | None, budget: float | None) -> list[str]:
    flags = ["--trainer", "trl"] if name == REFERENCE else ["--trainer", "trl_zoo", *CONTENDERS[name]]
    steps = args.steps if name == REFERENCE else math.ceil(args.steps * args.max_steps_factor)
    command = [
        sys.executable, str(ROOT / "benchmarks" / "time_to_target_run.py"), "--record", str(out / "record.jsonl"),
        *flags[:2],
    ]
    if target is not None:
        command += ["--target", repr(target)]
    if budget is not None:
        command += ["--budget_seconds", repr(budget)]
    command += [
        "--task", args.task, "--seed", str(seed), "--output_dir", str(out), "--overwrite_output_dir", "true",
        "--write_report", "false", "--save_strategy", "no", "--max_steps", str(steps),
        "--eval_every_steps", str(args.eval_every), *flags[2:], *args.extra,
    ]
    return command


def run_one(name: str, seed: int, out: Path, args, target, budget) -> dict:
    command = run_command(name, seed, out, args, target, budget)
    if args.resume and (out / "record.jsonl").exists():  # a finished run of an earlier, cut-short invocation
        lines = (out / "record.jsonl").read_text().splitlines()
        if lines and json.loads(lines[-1])["exit_code"] == 0:
            return {"name": name, "seed": seed, "flags": command[command.index("--task"):], **json.loads(lines[-1])}
    out.mkdir(parents=True, exist_ok=True)
    (out / "record.jsonl").unlink(missing_ok=True)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
    with open(out / "log.txt", "w") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT).returncode
    lines = (out / "record.jsonl").read_text().splitlines() if (out / "record.jsonl").exists() else []
    if code != 0 or not lines:
        raise SystemExit(f"{name} seed {seed}: exit {code}; see {out / 'log.txt'}")
    return {"name": name, "seed": seed, "flags": command[command.index("--task"):], **json.loads(lines[-1])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--task", default="chat_arithmetic")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=40, help="TRL's run: N optimizer steps (the task preset's 40).")
    parser.add_argument("--eval_every", type=int, default=5)
    parser.add_argument("--fraction", type=float, default=0.9)
    parser.add_argument("--budget_factor", type=float, default=2.0)
    parser.add_argument("--max_steps_factor", type=float, default=1.0)
    parser.add_argument("--contenders", default=DEFAULT_CONTENDERS)
    parser.add_argument("--cpu_smoke", action="store_true", help="Tiny settings on the CPU: tests the pipeline only.")
    parser.add_argument("--fixed_target", type=float, default=None,
                        help="Pipeline tests only: this target instead of the rule (e.g. 1.01: never reached).")
    parser.add_argument("--resume", action="store_true",
                        help="Reuse the runs a cut-short invocation finished (DIR/seed<s>/<name>/record.jsonl).")
    parser.add_argument("--list", action="store_true", help="Print TRL's commands (contenders need its target).")
    args, args.extra = parser.parse_known_args(argv)
    contenders = [c for c in args.contenders.split(",") if c]
    unknown = [c for c in contenders if c not in CONTENDERS]
    if unknown:
        raise SystemExit(f"--contenders: unknown {unknown}; known: {', '.join(CONTENDERS)}")
    if args.cpu_smoke:
        args.extra = [*CPU_SMOKE_FLAGS, *args.extra]
    out = Path(args.out)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.list:
        for seed in seeds:
            print(" ".join(run_command(REFERENCE, seed, out / f"seed{seed}" / REFERENCE, args, None, None)))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for index, seed in enumerate(seeds):  # seed-major: a cut-short study loses whole seeds, not contenders
        target = budget = None
        for name in run_order(index, contenders):
            record = run_one(name, seed, out / f"seed{seed}" / name, args, target, budget)
            if name == REFERENCE:
                before, after = record["curve"][0][1], record["curve"][-1][1]
                target = target_accuracy(before, after, args.fraction)
                if args.fixed_target is not None:
                    target = args.fixed_target
                budget = args.budget_factor * record["training_seconds"]
                record.update(target=target, budget_seconds=budget, reached=None,
                              time_to_target=first_reaching(record["curve"], target))
                record["reached"] = record["time_to_target"] is not None
            records.append(record)
            (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            if target is None:
                print(f"seed {seed}: TRL gained nothing ({before:.1%} → {after:.1%}); no target, contenders skipped")
                break
            print(f"seed {seed} {name}: stop {record['stop_reason']}, time to target {record['time_to_target']}, "
                  f"accuracy {record['accuracy_at_stop']:.1%}, clock {record['training_seconds']:.1f} s", flush=True)
    table = summary_table(records)
    (out / "summary.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
