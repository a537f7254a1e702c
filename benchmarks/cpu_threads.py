"""CPU thread policy: `trl-zoo train` against `trl grpo` on one YAML, on a quiet and on a busy CPU.

`trl grpo` runs through accelerate's launcher, which gives a CPU process OMP_NUM_THREADS=1 unless told otherwise;
`trl-zoo train` is a plain Python process, where torch takes one thread per physical core. This script runs, in
alternating order and in fresh processes,

    trl grpo --config Y                       (the launcher's threads)
    trl-zoo train --config Y                  (trl_zoo's CPU thread policy, trl_zoo/cli/environment/cpu_threads.py)
    trl-zoo train --config Y, OMP_NUM_THREADS=<physical cores>   (torch's default, trl_zoo before the policy)

each once on a quiet CPU and once while `--busy N` processes spin on N cores, and reports the median step time
(TRL's logged `step_time`, first two steps left out) of each. The model is a 2-layer, 128-wide Qwen2 shape built
locally (the quickstart's size) with LoRA, on 2-digit sums; no hub.

    python benchmarks/cpu_threads.py [--rounds 2] [--steps 20] [--busy 1] [--markdown PATH]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trl_zoo.cli.environment.cpu_threads import physical_cores  # noqa: E402
from trl_zoo.tasks.tiny import build_char_tokenizer, build_tiny_causal_lm  # noqa: E402


def setup(work: Path, steps: int) -> Path:
    tokenizer = build_char_tokenizer()
    model = work / "model"
    build_tiny_causal_lm(tokenizer, hidden_size=128, num_layers=2, num_heads=4, seed=0).save_pretrained(model)
    tokenizer.save_pretrained(model)
    data = work / "sums.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)})
                              for a in range(10, 50) for b in range(10, 20)))
    config = {  # TRL's keys only: both commands read it
        "model_name_or_path": str(model), "datasets": [{"path": "json", "data_files": str(data)}],
        "reward_funcs": ["trl_zoo.tasks.rewards.exact_match_reward"], "use_peft": True, "lora_r": 8,
        "max_steps": steps, "per_device_train_batch_size": 16, "num_generations": 8, "max_completion_length": 8,
        "learning_rate": 1e-4, "logging_steps": 1, "save_strategy": "no", "report_to": "none", "bf16": False,
        "use_cpu": True, "seed": 0, "temperature": 1.0,
    }
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def step_times_trl(output: str) -> list[float]:
    times = []
    for line in output.splitlines():
        if "'step_time'" in line and line.lstrip().startswith("{"):
            times.append(float(ast.literal_eval(line.strip())["step_time"]))
    return times


def run(variant: str, config: Path, work: Path, tag: str) -> tuple[list[float], float]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = str(ROOT)
    out = work / f"{variant}-{tag}"
    if variant == "trl grpo":
        command = [str(Path(sys.executable).with_name("trl")), "grpo", "--config", str(config),
                   "--output_dir", str(out)]
    else:
        command = [sys.executable, "-m", "trl_zoo.cli", "train", "--config", str(config), "--output_dir", str(out),
                   "--num_heldout", "0", "--write_report", "false"]
        if variant == "trl-zoo, torch default":
            env["OMP_NUM_THREADS"] = str(physical_cores())
    started = time.perf_counter()
    result = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{variant} failed:\n{result.stderr[-3000:]}")
    if variant == "trl grpo":
        times = step_times_trl(result.stdout + result.stderr)
    else:
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        times = [r["step_time"] for r in records if r.get("kind") == "train" and "step_time" in r]
    return times, wall


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--busy", type=int, default=1, help="spinning processes in the busy condition")
    parser.add_argument("--markdown", default=None)
    options = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="trl_zoo_threads_"))
    config = setup(work, options.steps)
    variants = ["trl grpo", "trl-zoo, policy", "trl-zoo, torch default"]
    results: dict[tuple[str, str], list[float]] = {}
    walls: dict[tuple[str, str], list[float]] = {}
    for condition in ("quiet", "busy"):
        spinners = []
        if condition == "busy":
            spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(options.busy)]
        try:
            for round_index in range(options.rounds):
                order = variants if round_index % 2 == 0 else variants[::-1]
                for variant in order:
                    times, wall = run(variant, config, work, f"{condition}{round_index}")
                    results.setdefault((condition, variant), []).extend(times[2:])
                    walls.setdefault((condition, variant), []).append(wall)
                    print(f"{condition:<5} round {round_index} {variant:<24} median step "
                          f"{statistics.median(times[2:]):.3f} s  wall {wall:.1f} s  load {os.getloadavg()[0]:.1f}",
                          flush=True)
        finally:
            for spinner in spinners:
                spinner.kill()
    lines = [f"{physical_cores()} physical cores, {os.cpu_count()} logical; busy = {options.busy} "
             "spinning process(es); "
             f"{options.rounds} rounds of {options.steps} steps, alternating order.", "",
             "| condition | run | median step (s) | vs trl grpo | wall per run (s) |",
             "| --- | --- | --- | --- | --- |"]
    for condition in ("quiet", "busy"):
        base = statistics.median(results[(condition, "trl grpo")])
        for variant in variants:
            median = statistics.median(results[(condition, variant)])
            wall = ", ".join(f"{w:.0f}" for w in walls[(condition, variant)])
            lines.append(f"| {condition} | {variant} | {median:.3f} | {median / base:.2f}× | {wall} |")
    text = "\n".join(lines)
    print("\n" + text)
    if options.markdown:
        Path(options.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
