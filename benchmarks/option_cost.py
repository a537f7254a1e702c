"""What a set of `trl-zoo train` options costs per optimizer step: step time and peak GPU memory against the same run
without them, each configuration its own process (`benchmarks/lib/real_model_run.py`), interleaved in every repeat.

    python benchmarks/option_cost.py --out DIR --repeats 3 --steps 12 \\
        --base "--task chat_arithmetic_medium --model_name_or_path smollm2-135m-instruct" \\
        --option teacher="--teacher_model self --teacher_prompt_template '{prompt} (The answer is {answer}.)'"

Repeat r runs the base and then every option (the order rotated by r, so neither side always runs first on a
warming machine), all with the same seed and `--num_heldout 0` (no held-out evaluation). A configuration's step
time is the median of its optimizer steps 3..N (the first two hold one-time warm-up), pooled over its repeats
(`real_model_run.py`'s `StepTimer`: begin to end of each step, device synchronised); its peak memory the largest
`torch.cuda.max_memory_allocated` of its repeats. Completions are sampled, so two configurations generate
different lengths once their policies part: the table gives each one's mean completion length over the timed
steps beside its time. Each `--option` adds flags to the base: NAME='FLAGS'.

Writes DIR/<name>-<r>/ (each run's folder and log), DIR/runs.jsonl (one line a run) and DIR/summary.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from trl_zoo.cli.train.run_folder import prepare_run_folder

REPO = Path(__file__).resolve().parents[1]
RUN_SCRIPT = REPO / "benchmarks" / "lib" / "real_model_run.py"
BASE = "base"
WARM_UP_STEPS = 2  # steps 1..2 of every run are left out of its step time


def parse_option(definition: str) -> tuple[str, list[str]]:
    """--option NAME='FLAGS' -> (NAME, flags)."""
    name, sep, flags = definition.partition("=")
    name = name.strip()
    if not sep or not name.replace("_", "").isalnum() or name == BASE:
        raise SystemExit(f"--option: NAME='--flag value ...' with NAME a word other than {BASE!r}, got {definition!r}")
    return name, shlex.split(flags)


def run_order(repeat: int, names: list[str]) -> list[str]:
    """The configurations of repeat r: the list rotated by r (base first in repeat 0)."""
    shift = repeat % len(names)
    return names[shift:] + names[:shift]


def run_command(flags: list[str], steps: int, seed: int, run_dir: Path) -> list[str]:
    return [sys.executable, str(RUN_SCRIPT), *flags, "--max_steps", str(steps), "--num_heldout", "0",
            "--write_report", "false", "--logging_steps", "1", "--save_strategy", "no", "--seed", str(seed),
            "--output_dir", str(run_dir)]


def run_record(name: str, repeat: int, run_dir: Path, exit_code: int) -> dict:
    """One run's line: its timed steps, peak memory and mean completion length over the timed steps."""
    record = {"name": name, "repeat": repeat, "exit_code": exit_code}
    costs_file, log_file = run_dir / "costs.json", run_dir / "costs.rank0.json"
    if exit_code != 0 or not costs_file.exists():
        return record
    costs = json.loads(costs_file.read_text())
    history = json.loads(log_file.read_text())["log_history"] if log_file.exists() else []
    lengths = [row["completions/mean_length"] for row in history
               if "completions/mean_length" in row and row.get("step", 0) > WARM_UP_STEPS]
    record.update(step_seconds=costs["step_seconds"][WARM_UP_STEPS:], peak_memory_gib=costs["peak_memory_gib"],
                  mean_completion_length=statistics.mean(lengths) if lengths else None, device=costs["device"],
                  versions=costs["versions"])
    return record


def summary_table(records: list[dict], names: list[str]) -> str:
    """Markdown, one row per configuration: median step, × base, peak memory, its difference to the base, mean
    completion length, runs that finished."""
    def pooled(name):
        return [s for r in records if r["name"] == name and r.get("step_seconds") for s in r["step_seconds"]]

    def peak(name):
        values = [r["peak_memory_gib"] for r in records if r["name"] == name and r.get("peak_memory_gib") is not None]
        return max(values) if values else None

    def length(name):
        values = [r["mean_completion_length"] for r in records
                  if r["name"] == name and r.get("mean_completion_length") is not None]
        return statistics.mean(values) if values else None

    base_steps, base_peak = pooled(BASE), peak(BASE)
    base_median = statistics.median(base_steps) if base_steps else None
    lines = ["| configuration | median step s | × base | peak memory GiB | − base GiB | mean completion tokens "
             "| runs |",
             "|---|---|---|---|---|---|---|"]
    for name in names:
        steps, memory, tokens = pooled(name), peak(name), length(name)
        median = statistics.median(steps) if steps else None
        finished = sum(1 for r in records if r["name"] == name and r["exit_code"] == 0)
        ratio = f"{median / base_median:.2f}" if median and base_median else "n/a"
        extra = f"{memory - base_peak:+.2f}" if memory is not None and base_peak is not None else "n/a"
        lines.append(f"| {name} | {f'{median:.2f}' if median else 'n/a'} | {ratio} "
                     f"| {f'{memory:.2f}' if memory is not None else 'n/a'} | {extra} "
                     f"| {f'{tokens:.1f}' if tokens is not None else 'n/a'} "
                     f"| {finished}/{sum(1 for r in records if r['name'] == name)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--base", required=True, help="the base run's trl-zoo train flags, one string")
    parser.add_argument("--option", action="append", required=True, help="NAME='FLAGS' added to the base")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps <= WARM_UP_STEPS:
        parser.error(f"--steps: more than the {WARM_UP_STEPS} warm-up steps, got {args.steps}")
    base = shlex.split(args.base)
    flags = {BASE: base, **{name: base + extra for name, extra in map(parse_option, args.option)}}
    names = list(flags)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for repeat in range(args.repeats):
        for name in run_order(repeat, names):
            run_dir = out / f"{name}-{repeat}"
            prepare_run_folder(run_dir)  # the log is written before the run claims the folder
            with open(run_dir / "log.txt", "w") as log:
                code = subprocess.run(run_command(flags[name], args.steps, args.seed, run_dir), cwd=REPO,
                                      stdout=log, stderr=subprocess.STDOUT).returncode
            records.append(run_record(name, repeat, run_dir, code))
            with open(out / "runs.jsonl", "a") as handle:
                handle.write(json.dumps(records[-1]) + "\n")
            print(f"repeat {repeat} {name}: exit {code}", flush=True)
    table = summary_table(records, names)
    (out / "summary.md").write_text(table + "\n")
    print(table)
    return 0 if all(r["exit_code"] == 0 for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
