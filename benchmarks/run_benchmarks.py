"""Run benchmark suites, each configuration in its own process, and print a Markdown table.

    python benchmarks/run_benchmarks.py --suite speed  [--shape qwen2.5-1.5b --completion_length 256]
    python benchmarks/run_benchmarks.py --suite qlora  [--shape qwen2.5-7b --completion_length 512]

`speed`: every loss TRL ships, TRL vs trl_zoo (ratio zoo/TRL of the loss-step time and peak memory), then every
trl_zoo-only loss against trl_zoo's grpo. `qlora`: a 4-bit model with LoRA, TRL vs trl_zoo, full steps.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRL_LOSSES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]


def run_one(implementation: str, loss_type: str, common: list[str]) -> dict:
    command = [sys.executable, str(HERE / "step_benchmark.py"), "--implementation", implementation,
               "--loss_type", loss_type, *common]
    completed = subprocess.run(command, capture_output=True, text=True)
    for line in completed.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    error = [line for line in completed.stderr.splitlines() if "Error" in line or "error" in line]
    return {"implementation": implementation, "loss_type": loss_type, "error": error[:3] + error[-3:]}


def speed_rows(results: dict, zoo_only: list[str]) -> list[str]:
    rows = ["| loss | TRL loss step (ms) | trl_zoo (ms) | time ratio | TRL peak (GiB) | trl_zoo peak (GiB) "
            "| memory ratio |",
            "|---|---|---|---|---|---|---|"]
    for loss in TRL_LOSSES:
        trl, zoo = results.get(("trl", loss), {}), results.get(("zoo", loss), {})
        if "loss_ms" not in trl or "loss_ms" not in zoo:
            rows.append(f"| {loss} | error | error | | | | |")
            continue
        rows.append(
            f"| {loss} | {trl['loss_ms']:.1f} | {zoo['loss_ms']:.1f} | {zoo['loss_ms'] / trl['loss_ms']:.3f} "
            f"| {trl['peak_gib']:.2f} | {zoo['peak_gib']:.2f} | {zoo['peak_gib'] / trl['peak_gib']:.3f} |"
        )
    base = results.get(("zoo", "grpo"), {})
    if zoo_only and "loss_ms" in base:
        rows += ["", "| trl_zoo-only loss | loss step (ms) | vs trl_zoo grpo | peak (GiB) |", "|---|---|---|---|"]
        for loss in zoo_only:
            zoo = results.get(("zoo", loss), {})
            if "loss_ms" not in zoo:
                rows.append(f"| {loss} | error | | |")
                continue
            rows.append(
                f"| {loss} | {zoo['loss_ms']:.1f} | {zoo['loss_ms'] / base['loss_ms']:.3f} | {zoo['peak_gib']:.2f} |"
            )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", choices=["speed", "qlora"], default="speed")
    parser.add_argument("--losses", default=",".join(TRL_LOSSES))
    parser.add_argument("--zoo_only", default="gspo,gspo_token,gmpo,reinforce,ppo_kl,clip_cov,kl_cov")
    parser.add_argument("--out", default=None, help="write the Markdown table and raw JSON lines here (a folder)")
    options, common = parser.parse_known_args(argv)
    losses = [loss for loss in options.losses.split(",") if loss]
    zoo_only = [loss for loss in options.zoo_only.split(",") if loss] if options.suite == "speed" else []
    if options.suite == "qlora":
        common = ["--shape", "qwen2.5-7b", "--load_in_4bit", "--completion_length", "512", "--prompts_per_step", "1",
                  "--train_steps", "3", "--gradient_checkpointing", *common]
    results = {}
    for loss in losses:
        for implementation in ("trl", "zoo"):
            results[(implementation, loss)] = run_one(implementation, loss, common)
            print(json.dumps(results[(implementation, loss)]), flush=True)
    for loss in zoo_only:
        results[("zoo", loss)] = run_one("zoo", loss, common)
        print(json.dumps(results[("zoo", loss)]), flush=True)

    rows = speed_rows(results, zoo_only)
    if options.suite == "qlora":
        rows += ["", "| implementation | step (s) | train peak (GiB) | loss step (ms) | loss-step peak (GiB) |",
                 "|---|---|---|---|---|"]
        for (implementation, loss), result in results.items():
            if "step_s" in result:
                rows.append(f"| {implementation} {loss} | {result['step_s']:.2f} | {result['train_peak_gib']:.2f} "
                            f"| {result['loss_ms']:.1f} | {result['peak_gib']:.2f} |")
    table = "\n".join(rows)
    print(table)
    if options.out:
        out = Path(options.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{options.suite}.md").write_text(table + "\n")
        (out / f"{options.suite}.jsonl").write_text("\n".join(json.dumps(r) for r in results.values()) + "\n")


if __name__ == "__main__":
    main()
