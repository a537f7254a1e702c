"""The main job over seeds: `trl-zoo train --seed S` from a fresh cache, one process per seed, and a table.

Each seed bootstraps its own base policy (a fresh cache directory per seed), so the table shows what a new user
sees on a first run: held-out greedy accuracy before and after RL, the gain, and the wall time of the whole run
(bootstrap included) and of the RL phase. A second, cached run per seed is timed with `--cached`.

    python benchmarks/quickstart_seeds.py                       # seeds 0-4, the embedded default
    python benchmarks/quickstart_seeds.py --seeds 0,1 --cached  # also time a run that reuses the cached policy
    python benchmarks/quickstart_seeds.py -- --loss_type dapo   # extra `trl-zoo train` flags after --

Results differ between machines for a given seed (float rounding differs between CPUs): quote the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_seed(seed: int, work: Path, extra: list[str], name: str) -> dict:
    """One `trl-zoo train` process; returns its summary.json plus the process's wall time."""
    output_dir = work / f"{name}-seed{seed}"
    env = {**os.environ, "TRL_ZOO_CACHE": str(work / f"cache-seed{seed}"), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "trl_zoo.cli", "train", "--seed", str(seed), "--output_dir", str(output_dir),
               "--write_report", "false", *extra]
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    summary = json.loads((output_dir / "summary.json").read_text())
    return {**summary, "process_seconds": time.perf_counter() - started}


def table(rows: list[dict], cached: dict[int, dict]) -> str:
    lines = [
        "| seed | before | after | gain (points) | first run (s) | RL (s) |" + (" cached run (s) |" if cached else ""),
        "|---|---|---|---|---|---|" + ("---|" if cached else ""),
    ]
    for row in rows:
        gain = 100 * (row["accuracy_after"] - row["accuracy_before"])
        line = (f"| {row['seed']} | {row['accuracy_before']:.1%} | {row['accuracy_after']:.1%} | {gain:+.1f} | "
                f"{row['process_seconds']:.0f} | {row['train_seconds']:.0f} |")
        if cached:
            line += f" {cached[row['seed']]['process_seconds']:.0f} |"
        lines.append(line)
    gains = [100 * (row["accuracy_after"] - row["accuracy_before"]) for row in rows]
    lines.append(f"\nGain: median {statistics.median(gains):+.1f} points, worst {min(gains):+.1f}, "
                 f"best {max(gains):+.1f} over {len(gains)} seeds.")
    return "\n".join(lines)


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--cached", action="store_true", help="Time a second run per seed on the cached policy.")
    parser.add_argument("--work_dir", default=None, help="Where caches and runs go (default: a new temp dir).")
    parser.add_argument("--out", default=None, help="Also write the table and the raw rows (JSON) here.")
    args = parser.parse_args(own)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="quickstart_seeds_"))
    seeds = [int(seed) for seed in args.seeds.split(",")]
    rows = []
    for seed in seeds:
        rows.append(run_seed(seed, work, extra, "first"))
        print(f"seed {seed}: {rows[-1]['accuracy_before']:.1%} -> {rows[-1]['accuracy_after']:.1%} "
              f"({rows[-1]['process_seconds']:.0f} s)", flush=True)
    cached = {seed: run_seed(seed, work, extra, "cached") for seed in seeds} if args.cached else {}
    text = table(rows, cached)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n\n" + json.dumps({"rows": rows, "cached": cached}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
