"""The size ladder: step time, the share of generation and the training peak of TRL and trl_zoo's speed recipes on
models of the sizes users train with LoRA (and QLoRA) on one GPU.

    python benchmarks/size_ladder.py --out ladder.jsonl --shapes qwen2.5-1.5b,qwen2.5-7b \\
        --contenders trl_default,trl_best,lora_graphed [--load_in_4bit] [--repeats 1]
    python benchmarks/size_ladder.py --out ladder.jsonl --summarize

Every configuration runs in its own process (`lib/ladder_run.py`, which documents what is measured), one at a time,
in interleaved order (repeat by repeat, shape by shape, contender by contender); each result is appended to `--out`
as one JSON line as soon as it exists. `--summarize` prints one Markdown table: per shape and contender the median
step time over repeats, × TRL at its best (`trl_best`: TRL's steps_per_generation = 2 × accumulation), the share of
generation, the training peak apart from the decoding's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKER = HERE / "lib" / "ladder_run.py"


def run_one(contender: str, shape: str, passed: list[str], timeout: float) -> dict:
    command = [sys.executable, str(WORKER), "--contender", contender, "--shape", shape, *passed]
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"contender": contender, "shape": shape, "error": f"over {timeout:.0f} s"}
    for line in completed.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = [line for line in completed.stderr.splitlines() if line.strip()][-4:]
    return {"contender": contender, "shape": shape, "error": tail}


def summarize(records: list[dict]) -> list[str]:
    rows = ["| shape | 4-bit | contender | s/step | × TRL best | generation share | training peak GiB "
            "| decoding peak GiB |", "|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["shape"], r.get("load_in_4bit", False)) for r in records})
    for shape, four_bit in keys:
        mine = [r for r in records if r["shape"] == shape and r.get("load_in_4bit", False) == four_bit]
        by_contender: dict[str, list[dict]] = {}
        for record in mine:
            by_contender.setdefault(record["contender"], []).append(record)
        best = [r["step_s"] for r in by_contender.get("trl_best", []) if "step_s" in r]
        best_s = statistics.median(best) if best else None
        for contender, runs in by_contender.items():
            done = [r for r in runs if "step_s" in r]
            if not done:
                rows.append(f"| {shape} | {four_bit} | {contender} | failed: {runs[-1].get('error')} | | | | |")
                continue
            step = statistics.median(r["step_s"] for r in done)
            ratio = f"{step / best_s:.2f}" if best_s else "—"
            rows.append(
                f"| {shape} | {four_bit} | {contender} | {step:.2f} | {ratio} "
                f"| {statistics.median(r['generation_share'] for r in done):.2f} "
                f"| {max(r['train_peak_gib'] for r in done):.2f} | {max(r['generation_peak_gib'] for r in done):.2f} |"
            )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--shapes", default="qwen2.5-1.5b,qwen2.5-7b")
    parser.add_argument("--contenders", default="trl_default,trl_best,lora_graphed")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one configuration may take")
    parser.add_argument("--summarize", action="store_true")
    options, passed = parser.parse_known_args(argv)
    if not options.summarize:
        for _ in range(options.repeats):
            for shape in options.shapes.split(","):
                for contender in options.contenders.split(","):
                    record = run_one(contender, shape, passed, options.timeout)
                    print(json.dumps(record), flush=True)
                    with options.out.open("a") as handle:
                        handle.write(json.dumps(record) + "\n")
    records = [json.loads(line) for line in options.out.read_text().splitlines() if line.strip()]
    print("\n".join(summarize(records)))


if __name__ == "__main__":
    main()
