"""Multi-GPU benchmark driver: trl_zoo on 2 GPUs (NCCL) — speed beside TRL, FSDP2 and ZeRO parity with DDP,
dynamic sampling and the critic under DDP, checkpoint save and resume.

    python benchmarks/multi_gpu.py --out DIR [--only a,b] [--deadline SECONDS] [--list] [--cpu_smoke]

Every measured run is its own process: `accelerate launch --config_file configs/accelerate/<config>.yaml
--num_processes 2 --mixed_precision bf16 benchmarks/lib/real_model_run.py [--trainer trl] <trl-zoo train flags>` (the
one-GPU runs: plain `python benchmarks/lib/real_model_run.py` with CUDA_VISIBLE_DEVICES=0). real_model_run.py writes
costs.rank{r}.json per process (step times, peak memory, log history, parameter checksums, trained batches).
Each run's folder is DIR/<part>/<run>, with the run's console output in log.txt; DIR/runs.jsonl has one line per
run (exit code, seconds, status) and DIR/summary.md one table per part, rewritten after every run.

Setup (every part): the packaged SmolLM2-135M-Instruct (`smollm2-135m-instruct`) on `chat_arithmetic` and its
preset (LoRA r 16 on every linear layer, learning rate 2e-4, 8 completions a prompt, 64 new tokens,
32 rows per device micro-batch), seed 0, no held-out set (`--num_heldout 0`: no evaluation, no report), no
checkpoints except in `checkpoint`. Both DDP and FSDP2 run under bf16 mixed precision (`--mixed_precision bf16`
on the launcher for every config, as the configs also say).

Parts (names for --only):
- `ddp_speed`: DDP on 2 GPUs, 32 rows × 2 accumulation on each GPU = 128 completions a step, 12 steps, runs
  interleaved trl, zoo, trl, zoo. Median step time = median of the wall time of optimizer steps 3..12 (the first
  2 are skipped: warm-up), each step timed from its begin to its end with the device synchronised, on the first
  process; a trainer's figure is the median of the pooled steps of its repeats. Peak memory: torch's
  max_memory_allocated on each GPU (GiB).
- `one_gpu_speed`: the same global batch on 1 GPU (32 × 4), trl and zoo, 12 steps. Scaling = one-GPU median step
  time / DDP median step time (2.0 is perfect).
- `fsdp_parity`: losses grpo, dapo, gspo, cispo (cap 5.0) with LoRA, 3 steps (32 × 1 per GPU) at two updates per
  generation batch (`PARITY_FLAGS`, `PARITY_LOSS_FLAGS`), under ddp.yaml and fsdp2.yaml on the same seed, on the same
  completions: the DDP run records each generation batch's completions (`--record_generations`), the FSDP2 run replays
  them (`--replay_generations`; real_model_run.py's docstring) and scores them itself, so both train on identical
  batches (without it, the sharded bf16 forward rounds differently and sampling at temperature 1 draws other
  completions from step 1 on). |loss_DDP − loss_FSDP| and |grad_norm_DDP − grad_norm_FSDP| per logged step, peak
  memory per GPU, and the generation batches replayed. bf16 autocast on both, so differences of bf16 rounding order in
  the update are expected; the table shows their size.
- `zero2_parity`, `zero3_parity`: as fsdp_parity with zero2.yaml / zero3.yaml against ddp.yaml (the DDP runs of
  fsdp_parity and their recorded completions, run again if absent); skipped with a line when deepspeed is not
  importable.
- `sampling_ddp`: `--dynamic_sampling resample` and `greso`, 3 steps under DDP. For every trained generation batch:
  rows on each process (must be equal), whole groups (the processes' rows, concatenated in rank order, fall into
  consecutive blocks of 8 with one prompt each; a group may straddle the processes), share of groups with reward
  spread (advantages not all equal), and prompts skipped (must be equal on every process).
- `critic_ddp`: `--advantage_estimator gae` (critic adapter), 3 steps under DDP; at the end every process writes the
  float64 sum and sum of squares of its trainable policy parameters and of the critic's; they must be equal across
  processes (DDP all-reduces the policy's gradients; trl_zoo averages the critic's).
- `checkpoint`: under DDP and FSDP2, 4 steps with `--save_strategy steps --save_steps 2`, then a second run resumed
  from checkpoint-2 to step 4; |loss| differences at steps 3 and 4 between the resumed and the uninterrupted run,
  and whether checkpoint-2 and the final folder load (`peft.AutoPeftModelForCausalLM.from_pretrained`).

--losses: the parity parts' losses (default all four). Several drivers with one loss each may run at once on one
--out (their run folders differ; runs.jsonl takes one appended line per run; `--only ""` rewrites summary.md).
--deadline: seconds from the start after which no new run starts and the running one is killed (its folder keeps
what it wrote); the summary is written from what exists. Several invocations may share one --out (e.g. part by
part): summary.md covers every run folder there, and the DDP reference runs of the parity parts are run once.
--cpu_smoke: the same pipeline on 2 gloo CPU processes on the built-in `addition` task (its bootstrapped policy, or
with `--smoke_model tiny` a tiny random model), tiny batches and at most 4 steps, in fp32. FSDP configs run as DDP
there (accelerate enables FSDP only on accelerators); ZeRO configs run on DeepSpeed's CPU accelerator
(`cpu_smoke_env`) and are skipped without deepspeed. Every parity row names what accelerate ran, so the ZeRO rows
are a real fp32 parity check and the FSDP2 rows only plumbing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from trl_zoo.cli.train.run_folder import prepare_run_folder

REPO = Path(__file__).resolve().parents[1]
RUN_SCRIPT = "benchmarks/lib/real_model_run.py"
PARTS = ["ddp_speed", "one_gpu_speed", "fsdp_parity", "sampling_ddp", "critic_ddp", "checkpoint", "zero2_parity",
         "zero3_parity"]
PARITY_LOSSES = ["grpo", "dapo", "gspo", "cispo"]
# two updates per generation batch, so that step 2's ratios π/π_old leave 1 and the clips and sequence ratios act
# (at one update every ratio is 1, and gspo's loss and gradient equal grpo's)
PARITY_FLAGS = ["--num_iterations", "2"]
PARITY_LOSS_FLAGS = {"cispo": ["--epsilon_high", "5.0"]}  # CISPO with its preset's cap (TRL's default caps at 0.2)
GROUP_SIZE = {"gpu": 8, "cpu": 4}


@dataclass
class Run:
    part: str
    name: str
    command: list[str]
    env: dict = field(default_factory=dict)
    run_dir: Path | None = None  # the --output_dir of the run (None for checks)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------------------------------- the plan


SMOKE_MODEL = {"value": "bootstrap"}  # --smoke_model


def train_flags(smoke: bool, out_dir: Path, steps: int, accumulation: int, extra: list[str] = ()) -> list[str]:
    if smoke:
        model = (
            ["--model_name_or_path", str(out_dir.parents[1] / "tiny_model")] if SMOKE_MODEL["value"] == "tiny" else []
        )
        base = ["--task", "addition", *model, "--per_device_train_batch_size", "8", "--num_generations", "4",
                "--max_completion_length", "8", "--use_cpu", "true"]
        steps = min(steps, 4)
    else:
        base = ["--task", "chat_arithmetic", "--model_name_or_path", "smollm2-135m-instruct",
                "--per_device_train_batch_size", "32"]
    return [*base, "--output_dir", str(out_dir), "--max_steps", str(steps), "--gradient_accumulation_steps",
            str(accumulation), "--num_heldout", "0", "--write_report", "false", "--seed", "0", "--logging_steps", "1",
            "--overwrite_output_dir", "true", *extra]


def launch(config: str, smoke: bool, processes: int = 2) -> list[str]:
    mixed = "no" if smoke else "bf16"
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", f"configs/accelerate/{config}.yaml",
            "--num_processes", str(processes), "--num_machines", "1", "--mixed_precision", mixed,
            "--dynamo_backend", "no", "--main_process_port", "PORT", RUN_SCRIPT]


def launched(part, name, config, out, smoke, steps, accumulation, extra=(), trainer="zoo", env=None) -> Run:
    run_dir = out / part / name
    trl = ["--trainer", "trl"] if trainer == "trl" else []
    command = launch(config, smoke) + trl + train_flags(smoke, run_dir, steps, accumulation, list(extra))
    return Run(part, name, command, env or {}, run_dir)


def plan(parts: list[str], out: Path, smoke: bool, losses: list[str] = PARITY_LOSSES) -> list[Run]:
    runs: list[Run] = []
    for part in parts:
        if part == "ddp_speed":
            for repeat in (1, 2):
                for trainer in ("trl", "zoo"):
                    runs.append(launched(part, f"{trainer}-{repeat}", "ddp", out, smoke, 12, 2, trainer=trainer))
        elif part == "one_gpu_speed":
            for trainer in ("trl", "zoo"):
                run_dir = out / part / trainer
                trl = ["--trainer", "trl"] if trainer == "trl" else []
                command = [sys.executable, RUN_SCRIPT, *trl, *train_flags(smoke, run_dir, 12, 4)]
                runs.append(Run(part, trainer, command, {"CUDA_VISIBLE_DEVICES": "0"}, run_dir))
        elif part in ("fsdp_parity", "zero2_parity", "zero3_parity"):
            other = {"fsdp_parity": "fsdp2", "zero2_parity": "zero2", "zero3_parity": "zero3"}[part]
            for loss in losses:
                # the DDP reference runs live in fsdp_parity/ and serve every parity part (run once per --out)
                # it records its completions, the sharded run replays them: both train on the same batches
                flags = ["--loss_type", loss, *PARITY_FLAGS, *PARITY_LOSS_FLAGS.get(loss, [])]
                reference = launched("fsdp_parity", f"{loss}-ddp", "ddp", out, smoke, 3, 1,
                                     [*flags, "--record_generations"])
                done = part != "fsdp_parity" and all(
                    (reference.run_dir / name).exists() for name in ("costs.rank0.json", "generations.rank0.jsonl"))
                if not done and all(run.run_dir != reference.run_dir for run in runs):
                    runs.append(reference)
                replay = ["--replay_generations", str(reference.run_dir)]
                runs.append(launched(part, f"{loss}-{other}", other, out, smoke, 3, 1, [*flags, *replay]))
        elif part == "sampling_ddp":
            for mode in ("resample", "greso"):
                runs.append(launched(part, mode, "ddp", out, smoke, 3, 1, ["--dynamic_sampling", mode],
                                     env={"REAL_MODEL_RECORD_BATCHES": "1"}))
        elif part == "critic_ddp":
            runs.append(launched(part, "gae", "ddp", out, smoke, 3, 1, ["--advantage_estimator", "gae"]))
        elif part == "checkpoint":
            for config in ("ddp", "fsdp2"):
                save = ["--save_strategy", "steps", "--save_steps", "2"]
                full = launched(part, f"{config}-full", config, out, smoke, 4, 1, save)
                resume = ["--resume_from_checkpoint", str(full.run_dir / "checkpoint-2")]
                runs.append(full)
                runs.append(launched(part, f"{config}-resumed", config, out, smoke, 4, 1, save + resume))
                check = [sys.executable, __file__, "--check_load", str(out / part / f"{config}-load.json"),
                         str(full.run_dir / "checkpoint-2"), str(full.run_dir)]
                runs.append(Run(part, f"{config}-load", check, {"CUDA_VISIBLE_DEVICES": ""}))
    return runs


# ------------------------------------------------------------------------------------------------- the runner


def deepspeed_importable() -> bool:
    result = subprocess.run([sys.executable, "-c", "import deepspeed"], capture_output=True)
    return result.returncode == 0


def cpu_smoke_env(command: list[str]) -> dict[str, str]:
    """Environment of a --cpu_smoke process: one thread each, and CPU processes. DeepSpeed runs on its own CPU
    accelerator (gloo) under a ZeRO config; ACCELERATE_USE_CPU there would make accelerate run plain DDP over a model
    that transformers already partitioned for ZeRO-3 (a crash in the first forward) or silently DDP under ZeRO-2."""
    zero = any(argument.endswith(".yaml") and "zero" in Path(argument).name for argument in command)
    return {"OMP_NUM_THREADS": "1", **({"DS_ACCELERATOR": "cpu"} if zero else {"ACCELERATE_USE_CPU": "true"})}


PORT_TAKEN = "EADDRINUSE"  # torch's rendezvous store could not listen: the free port was taken in the meantime
PORT_ATTEMPTS = 3


def run_one(run: Run, out: Path, smoke: bool, deadline_at: float) -> dict:
    """Run one process (group) to its end or the deadline. A launch whose rendezvous port was taken between
    `free_port` and the launcher's bind (another launch on the machine) is started again on a new port, up to
    PORT_ATTEMPTS times; `port_retries` in the result counts them."""
    log_dir = run.run_dir or out / run.part
    if run.run_dir:
        prepare_run_folder(log_dir)  # the log is written before the run claims the folder
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **run.env}
    if smoke:
        env.pop("CUDA_VISIBLE_DEVICES", None)
        env.update(cpu_smoke_env(run.command))
    started = time.time()
    log_path = log_dir / ("log.txt" if run.run_dir else f"{run.name}.log.txt")
    for attempt in range(PORT_ATTEMPTS):
        command = [str(free_port()) if argument == "PORT" else argument for argument in run.command]
        with open(log_path, "w") as log:
            process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
            try:
                code = process.wait(timeout=max(1.0, deadline_at - time.time()))
                status = "ok" if code == 0 else "failed"
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # the launcher and its workers: their own session
                code, status = process.wait(), "killed at deadline"
        if status != "failed" or "PORT" not in run.command or PORT_TAKEN not in log_path.read_text(errors="replace"):
            break
    return {"part": run.part, "run": run.name, "status": status, "rc": code, "port_retries": attempt,
            "seconds": round(time.time() - started, 1), "log": str(log_path.relative_to(out))}


def check_load(result_path: str, folders: list[str]) -> int:
    """Load each folder as a PEFT model (the adapter over its base) and record ok / the error."""
    from peft import AutoPeftModelForCausalLM

    results = {}
    for folder in folders:
        try:
            model = AutoPeftModelForCausalLM.from_pretrained(folder)
            results[folder] = {"ok": True, "adapters": list(model.peft_config)}
        except Exception as error:  # any failure to load is the finding
            results[folder] = {"ok": False, "error": f"{type(error).__name__}: {str(error)[:300]}"}
    Path(result_path).write_text(json.dumps(results, indent=2))
    return 0


# --------------------------------------------------------------------------------------------- the summariser


def read_ranks(run_dir: Path) -> list[dict]:
    files = sorted(run_dir.glob("costs.rank*.json"), key=lambda path: int(path.stem.split("rank")[1]))
    return [json.loads(path.read_text()) for path in files]


def logged(record: dict, key: str) -> dict[int, float]:
    return {row["step"]: row[key] for row in record["log_history"] if key in row and "step" in row}


def fmt(value, digits=3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e-2 and value != 0 else f"{value:.{digits}f}"
    return str(value)


def distributed_type(ranks: list[dict]) -> str:
    """What accelerate really ran (`MULTI_GPU`, `FSDP`, `DEEPSPEED`, ...): a config it cannot honour on the device
    at hand falls back silently (FSDP on CPU processes runs as DDP), so every parity row says it."""
    kinds = {str(rank.get("distributed_type", "?")).removeprefix("DistributedType.") for rank in ranks}
    return " / ".join(sorted(kinds)) or "?"


def memory(ranks: list[dict]) -> str:
    return " / ".join(fmt(rank.get("peak_memory_gib"), 2) for rank in ranks) or "–"


def table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(fmt(cell) for cell in row) + " |" for row in rows]


def speed_section(out: Path) -> list[str]:
    pooled: dict[tuple[str, str], list[float]] = {}
    rows = []
    for part, gpus in (("ddp_speed", 2), ("one_gpu_speed", 1)):
        for run_dir in sorted((out / part).glob("*/")):
            ranks = read_ranks(run_dir)
            if not ranks:
                continue
            trainer = run_dir.name.split("-")[0]
            measured = ranks[0]["step_seconds"][2:]
            pooled.setdefault((part, trainer), []).extend(measured)
            median = statistics.median(measured) if measured else None
            rows.append([part, run_dir.name, gpus, len(ranks[0]["step_seconds"]), median, memory(ranks)])
    if not rows:
        return []
    lines = ["## Speed (DDP on 2 GPUs, and 1 GPU, 128 completions a step)", "",
             *table(["part", "run", "GPUs", "steps", "median step (s), steps 3+", "peak memory per GPU (GiB)"], rows),
             ""]
    summary = []
    for trainer in ("trl", "zoo"):
        ddp, one = pooled.get(("ddp_speed", trainer)), pooled.get(("one_gpu_speed", trainer))
        ddp_median = statistics.median(ddp) if ddp else None
        one_median = statistics.median(one) if one else None
        scaling = one_median / ddp_median if ddp_median and one_median else None
        summary.append([trainer, ddp_median, one_median, scaling])
    lines += table(
        ["trainer", "DDP median step (s), pooled", "1-GPU median step (s)", "scaling (1 GPU / DDP)"], summary
    )
    return lines + [""]


def replayed_batches(rank: dict) -> int:
    """How many generation batches a process replayed (0 when it generated its own)."""
    generations = rank.get("generations") or {}
    return generations.get("batches", 0) if generations.get("replay") else 0


def parity_section(out: Path, part: str, other: str) -> list[str]:
    rows = []
    for loss in PARITY_LOSSES:
        ddp, sharded = read_ranks(out / "fsdp_parity" / f"{loss}-ddp"), read_ranks(out / part / f"{loss}-{other}")
        if not sharded:
            continue
        if not ddp:
            rows.append([loss, "no DDP reference run", None, None, None, None, None, None, None, memory(sharded),
                         distributed_type(sharded)])
            continue
        replayed = " / ".join(str(replayed_batches(rank)) for rank in sharded)
        ran_as = " ; ".join(distributed_type(ranks) for ranks in (ddp, sharded))
        for step in sorted(logged(ddp[0], "loss")):
            values = []
            for key in ("loss", "grad_norm"):
                a, b = logged(ddp[0], key).get(step), logged(sharded[0], key).get(step)
                values += [a, b, abs(a - b) if a is not None and b is not None else None]
            rows.append([loss, step, *values, replayed, memory(ddp) + " ; " + memory(sharded), ran_as])
    if not rows:
        return []
    title = {"fsdp2": "FSDP2", "zero2": "ZeRO-2", "zero3": "ZeRO-3"}[other]
    header = ["loss", "step", "loss DDP", f"loss {title}", "abs diff", "grad_norm DDP", f"grad_norm {title}",
              "abs diff", "batches replayed per process", f"peak GiB per GPU: DDP ; {title}",
              f"ran as: DDP ; {title}"]
    return [f"## {title} against DDP (LoRA, same seed, the DDP run's completions replayed, bf16 mixed precision on "
            "both)", "", *table(header, rows), ""]


def sampling_checks(ranks: list[dict], group: int) -> dict:
    batches = list(zip(*(rank["batches"] for rank in ranks)))
    equal_rows = whole = True
    spread = groups = 0
    skipped_equal = True
    for per_rank in batches:
        equal_rows &= len({batch["rows"] for batch in per_rank}) == 1
        crcs = [crc for batch in per_rank for crc in batch["prompt_crc"]]
        advantages = [value for batch in per_rank for value in batch["advantages"]]
        whole &= len(crcs) % group == 0 and all(len(set(crcs[i:i + group])) == 1 for i in range(0, len(crcs), group))
        for start in range(0, len(advantages), group):
            groups += 1
            spread += max(advantages[start:start + group]) > min(advantages[start:start + group])
        skipped_equal &= len({batch["prompts_skipped"] for batch in per_rank}) == 1
    return {"batches": len(batches), "rows": " / ".join(str(sum(b["rows"] for b in r["batches"])) for r in ranks),
            "equal_rows": equal_rows, "whole_groups": whole, "spread": f"{spread}/{groups}",
            "skipped": " / ".join(str([b["prompts_skipped"] for b in r["batches"]]) for r in ranks),
            "skipped_equal": skipped_equal}


def sampling_section(out: Path, group: int) -> list[str]:
    rows = []
    for mode in ("resample", "greso"):
        ranks = read_ranks(out / "sampling_ddp" / mode)
        if ranks:
            c = sampling_checks(ranks, group)
            rows.append([mode, len(ranks), c["batches"], c["rows"], "yes" if c["equal_rows"] else "NO",
                         "yes" if c["whole_groups"] else "NO", c["spread"], c["skipped"],
                         "yes" if c["skipped_equal"] else "NO", memory(ranks)])
    if not rows:
        return []
    header = ["dynamic_sampling", "processes", "trained batches", "rows trained per process", "equal rows",
              "whole groups", "groups with spread", "prompts skipped per batch, per process", "same skips",
              "peak GiB per GPU"]
    return ["## Dynamic sampling under DDP", "", *table(header, rows), ""]


def critic_section(out: Path) -> list[str]:
    ranks = read_ranks(out / "critic_ddp" / "gae")
    if not ranks:
        return []
    rows = []
    for key in ("policy_checksum", "critic_checksum"):
        sums = [rank[key] for rank in ranks if rank.get(key)]
        if not sums:
            rows.append([key.split("_")[0], "absent", "", "", ""])
            continue
        equal = all(s["sum"] == sums[0]["sum"] and s["sum_squares"] == sums[0]["sum_squares"] for s in sums)
        rows.append([key.split("_")[0], sums[0]["numel"], " / ".join(f"{s['sum']:.12g}" for s in sums),
                     " / ".join(f"{s['sum_squares']:.12g}" for s in sums), "yes" if equal else "NO"])
    return ["## Critic (GAE) under DDP: parameters after training, per process", "",
            *table(["parameters", "values", "sum (float64)", "sum of squares (float64)", "bitwise equal"], rows),
            f"Peak GiB per GPU: {memory(ranks)}", ""]


def checkpoint_section(out: Path) -> list[str]:
    rows = []
    for config in ("ddp", "fsdp2"):
        full, resumed = (
            read_ranks(out / "checkpoint" / f"{config}-full"), read_ranks(out / "checkpoint" / f"{config}-resumed")
        )
        loads_path = out / "checkpoint" / f"{config}-load.json"
        loads = json.loads(loads_path.read_text()) if loads_path.exists() else {}
        load_text = ", ".join(f"{Path(k).name}: {'ok' if v['ok'] else v['error']}" for k, v in loads.items()) or "–"
        if not full:
            continue
        for step in (3, 4):
            a = logged(full[0], "loss").get(step)
            b = logged(resumed[0], "loss").get(step) if resumed else None
            rows.append([config, step, a, b, abs(a - b) if a is not None and b is not None else None,
                         full[0].get("distributed_type"), load_text if step == 3 else ""])
    if not rows:
        return []
    header = ["config", "step", "loss, uninterrupted", "loss, resumed from checkpoint-2", "abs diff",
              "distributed type", "folders load"]
    return ["## Checkpoint save and resume", "", *table(header, rows), ""]


def environment(out: Path) -> list[str]:
    for path in sorted(out.glob("*/*/costs.rank0.json")):
        record = json.loads(path.read_text())
        costs = path.with_name("costs.json")
        versions = json.loads(costs.read_text()).get("versions", {}) if costs.exists() else {}
        return [
            f"Device: {record.get('device')}; versions: {versions}; precision: {record.get('mixed_precision')}", ""
        ]
    return []


def write_summary(out: Path, smoke: bool) -> Path:
    """summary.md from every run folder under `out` and every line of runs.jsonl (earlier invocations included)."""
    runs_log = out / "runs.jsonl"
    results = [json.loads(line) for line in runs_log.read_text().splitlines()] if runs_log.exists() else []
    smoke_note = (" (CPU smoke: two CPU processes in fp32, a small policy; times and memory mean nothing, and a "
                  "parity row means something only where 'ran as' names the sharded type: FSDP falls back to DDP on "
                  "CPU processes)")
    lines = ["# Multi-GPU benchmark" + (smoke_note if smoke else ""), ""]
    lines += environment(out)
    lines += speed_section(out)
    lines += parity_section(out, "fsdp_parity", "fsdp2")
    lines += parity_section(out, "zero2_parity", "zero2")
    lines += parity_section(out, "zero3_parity", "zero3")
    lines += sampling_section(out, GROUP_SIZE["cpu" if smoke else "gpu"])
    lines += critic_section(out)
    lines += checkpoint_section(out)
    lines += ["## Runs", "", *table(["part", "run", "status", "exit code", "seconds", "log"],
                                    [[r["part"], r["run"], r["status"], r["rc"], r["seconds"], r["log"]]
                                     for r in results])]
    path = out / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    return path


# ----------------------------------------------------------------------------------------------------- main


def make_tiny_model(path: Path):
    from trl_zoo.tasks.tiny import build_char_tokenizer, build_tiny_causal_lm

    if not (path / "config.json").exists():
        tokenizer = build_char_tokenizer()
        build_tiny_causal_lm(tokenizer, hidden_size=32, num_layers=2, num_heads=2, seed=0).save_pretrained(path)
        tokenizer.save_pretrained(path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--check_load"]:
        return check_load(argv[1], argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("outputs/multi_gpu"))
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts of: {', '.join(PARTS)}")
    parser.add_argument("--deadline", type=float, default=510.0,
                        help="seconds; then no new run starts, the running one is killed")
    parser.add_argument("--losses", default=",".join(PARITY_LOSSES),
                        help="the parity parts' losses, comma-separated (several drivers, one loss each, may share "
                        "one --out at once)")
    parser.add_argument("--list", action="store_true", help="print the commands and exit")
    parser.add_argument("--cpu_smoke", action="store_true", help="2 gloo CPU processes, tiny model and batches")
    parser.add_argument("--smoke_model", choices=["bootstrap", "tiny"], default="bootstrap",
                        help="--cpu_smoke's policy: the addition task's bootstrapped policy (cached after its first "
                        "build, which takes minutes; rewards with spread) or a tiny random model (instant; rewards 0)")
    args = parser.parse_args(argv)
    SMOKE_MODEL["value"] = args.smoke_model
    parts = [part.strip() for part in args.only.split(",") if part.strip()]
    unknown = [part for part in parts if part not in PARTS]
    if unknown:
        parser.error(f"unknown parts {unknown}; choose from {PARTS}")
    out = args.out.resolve()
    started = time.time()
    deadline_at = started + args.deadline
    zero = [part for part in parts if part.startswith("zero")]
    if zero and not args.list and not deepspeed_importable():
        print(f"[multi_gpu] skipping {', '.join(zero)}: deepspeed is not importable", flush=True)
        parts = [part for part in parts if part not in zero]
    losses = [loss.strip() for loss in args.losses.split(",") if loss.strip()]
    if not set(losses) <= set(PARITY_LOSSES):
        parser.error(f"unknown --losses {sorted(set(losses) - set(PARITY_LOSSES))}; choose from {PARITY_LOSSES}")
    runs = plan(parts, out, args.cpu_smoke, losses)
    if args.list:
        for run in runs:
            env = " ".join(f"{k}={v}" for k, v in run.env.items())
            print(f"[{run.part}/{run.name}] {env + ' ' if env else ''}{' '.join(run.command)}", flush=True)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    if args.cpu_smoke and args.smoke_model == "tiny":
        make_tiny_model(out / "tiny_model")
    results: list[dict] = []
    runs_log = out / "runs.jsonl"
    for index, run in enumerate(runs, 1):
        elapsed = time.time() - started
        if time.time() >= deadline_at:
            result = {"part": run.part, "run": run.name, "status": "not started (deadline)", "rc": None,
                      "seconds": 0, "log": ""}
        else:
            print(f"[multi_gpu {elapsed:5.0f} s] {index}/{len(runs)} {run.part}/{run.name} ...", flush=True)
            result = run_one(run, out, args.cpu_smoke, deadline_at)
            print(f"[multi_gpu {time.time() - started:5.0f} s] {run.part}/{run.name}: {result['status']} "
                  f"(rc {result['rc']}, {result['seconds']} s)", flush=True)
        results.append(result)
        with open(runs_log, "a") as handle:
            handle.write(json.dumps(result) + "\n")
        write_summary(out, args.cpu_smoke)
    path = write_summary(out, args.cpu_smoke)
    print(f"[multi_gpu {time.time() - started:5.0f} s] summary: {path}", flush=True)
    print(path.read_text(), flush=True)
    return 0 if all(r["status"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
