"""Time to a target held-out accuracy against TRL's `GRPOTrainer` on one GPU (the real-model task: the packaged
SmolLM2-135M-Instruct with LoRA on chat_arithmetic, the task's preset batch shape, TRL 1.16's defaults otherwise).

    python benchmarks/time_to_target.py --out DIR [--seeds 0,1,2] [--steps 40] [--eval_every 5]
        [--contenders trl_zoo,greso_skip_bucket,merged] [--define NAME='FLAGS'] [--fraction 0.9]
        [--budget_factor 2] [--resume [--retry_failed]] [--deadline_minutes M] [--list]
    python benchmarks/time_to_target.py --out DIR --seeds 0,1,2,3 ... --summarize
        # tables of what finished; runs nothing
    python benchmarks/time_to_target.py --out DIR --contenders trl_vllm,vllm_recipe --best trl_vllm
        # the vLLM path (GPU): every time also against TRL + vLLM's
    python benchmarks/time_to_target.py --out DIR --seeds 0,1,2,3 --devices 0,1 ...
        # one run per GPU at a time, GPUs in parallel
    python benchmarks/time_to_target.py --out DIR ... --plan_minutes M [--piece_minutes 9] [--step_seconds 4.6]
        [--eval_seconds 6] [--startup_seconds 25] [--estimate_factor 1]   # what fits in M minutes; runs nothing
    python benchmarks/time_to_target.py --out DIR --cpu_smoke        # the whole pipeline, tiny, on the CPU

Per seed s, one process per run (`lib/time_to_target_run.py`), one run at a time (with `--devices`, one run a device
at a time: seed i on device i mod n, the devices in parallel, each seed's runs on its device):

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
than one seed (`finished_record`): a run counts only when its process wrote a whole record line with exit code 0 and,
for a contender, ran against the target and budget derived now. A run killed mid-way (the piece's `timeout`) leaves no
line or a cut one and runs again from step 0, so a piece loses at most the run it was in; a run killed while the study
lives ends the piece (exit 3). A run that fails by itself is kept as failed.json, listed under the summary and not
rerun unless `--retry_failed`. `--deadline_minutes M` starts no run whose estimate (`estimate_seconds`: TRL's from the
flags, a contender's from TRL's measured run of its seed) would end past M minutes and exits 3, so a piece ends
between runs; `--plan_minutes` prints the runs, their estimates, the pieces and what fits.

Compilation is measured cold: every run starts with an empty torch compile cache of its own, vLLM's inside it
(`compile_cache_dir`), except a contender named NAME + "_warm_cache", which runs NAME's flags right after NAME with
the cache NAME's run of the same seed left (a user's second run on the same machine). `--profile_blocks` adds TRL's
profiled blocks per step to every record (`lib/block_times.py`; it synchronises the device, so steps slow a little).

Every run's JSON line goes to DIR/records.jsonl (and DIR/seed<s>/<name>/record.jsonl); the summary (`summary_table`)
to DIR/summary.md: per contender over seeds the median and range of time to target (a run that did not reach it counts
as +∞ in the median), the median and range of its ratio to TRL's time on the same seed, how many seeds reached the
target, accuracy at the stop, completions, token slots, and peak memory of training and of the held-out evaluation
apart (the evaluation's batch of 500 greedy rows peaks higher than training and would hide it). Every time is stated
as × TRL's default and as × TRL at its own best setting for the task (`TRL_BEST`: TRL's trainer with two optimizer
steps per generation batch, a TRL field any TRL user can set), so what is TRL's and what is trl_zoo's stay apart.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from trl_zoo.cli.train.run_folder import prepare_run_folder

ROOT = Path(__file__).resolve().parents[1]

REFERENCE = "trl"
# TRL at its own best setting for the task, run by TRL's trainer (no trl_zoo layer): every contender's time is also
# stated as × this run's time on the same seed, so what is TRL's (a field any TRL user can set) and what is trl_zoo's
# stay apart
TRL_BEST = "trl_two_steps"
# contenders run by TRL's own GRPOTrainer (their flags are TRL fields only)
TRL_VLLM = "trl_vllm"  # TRL's trainer with its colocated vLLM: the path TRL users take for speed
TRL_VLLM_TWO_STEPS = "trl_vllm_two_steps"
VLLM_RECIPE = "vllm_recipe"
TRL_TRAINER = {TRL_BEST, TRL_VLLM, TRL_VLLM_TWO_STEPS}
# A bounded paged KV cache for continuous batching: 128 pages of 256 tokens (32,768 token slots; SmolLM2-135M in
# bf16 keeps 30 layers × 2 × 3 KV heads × 64 × 2 bytes ≈ 23 KiB a token, ≈ 0.75 GiB) instead of TRL's default,
# half of the free GPU memory (`max_memory_percent` 0.5, set in trl.GRPOTrainer.__init__), which one real-model run
# measured at 68.7 GiB peak against 1.35 GiB without continuous batching.
BOUNDED_CB = '{"num_blocks": 128}'
# + torch.compile of the prefill (varlen) path and CUDA graphs (transformers' ContinuousBatchingConfig,
# `default_compile_level` ≥ 5.11, `use_cuda_graph`). The compiled decode fast path needs flash attention's
# `flash_attn_with_kvcache`; without it transformers drops the decode compile config with a warning.
COMPILED_CB = '{"num_blocks": 128, "default_compile_level": 1, "use_cuda_graph": true}'
CB = ["--use_transformers_continuous_batching", "true"]
MERGED = ["--merge_adapter_for_generation", "true"]
# no forward/backward for zero-advantage rows (the gradient is the same), micro-batches of similar lengths
SKIP_BUCKET = ["--skip_zero_advantage", "true", "--length_bucketing", "true"]
COMPUTE = ["--dynamic_sampling", "greso", *SKIP_BUCKET]
# Two optimizer steps per generation batch: the preset accumulates 4 micro-batches of 32 a step, so 8 micro-batches
# of one generation batch of 256 completions (32 prompts × 8); the second step trains on completions of the policy
# one update old, and TRL computes the old log-probs (an extra no-grad forward) and clips the ratio to them
# (`_generate_and_score_completions`: gradient_accumulation_steps % (steps_per_generation × num_iterations) ≠ 0).
TASK_ACCUMULATION = 4  # the task's micro-batches a step (per_device_train_batch_size 32, 128 completions a step)
TWO_STEPS = ["--steps_per_generation", str(2 * TASK_ACCUMULATION)]
# one generation batch of 512 for four optimizer steps (third study: a step 0.43× TRL's, but nine points lower after
# 40 steps; decoding 512 rows costs ≈ 1.4× 256)
FOUR_STEPS = ["--steps_per_generation", str(4 * TASK_ACCUMULATION)]
COMPILED = ["--compile_generation", "true"]
# CUDA graphs of the traced decoding without inductor's kernel generation: the compile of 19-38 s (second study) is
# most of what compiled decoding cost on this ~2-minute task
CUDAGRAPHS = [*COMPILED, "--compile_generation_backend", "cudagraphs"]
# the decode step recorded as a CUDA graph by trl_zoo once per generation batch (components/decode_graph.py): no
# tracing, no inductor, a capture costs one eager step
CUDA_GRAPH = [*COMPILED, "--compile_generation_backend", "cuda_graph"]
# the frozen base loaded in bf16 (TRL's own ModelConfig field; its default is float32). TRL generates outside the
# training step's autocast, so with the default every decoding matmul runs in fp32: the step breakdown measured the
# compiled `generate` inside training at 2.4× the bf16 decoding alone. The LoRA adapter stays fp32 (peft's default).
BF16 = ["--dtype", "bfloat16"]
# the weights left in fp32, the decoding under the training forward's bf16 autocast (trl_zoo's generation_autocast)
# (bf16 is the GPU default already; said here because the field refuses to run without mixed precision). With
# compile_generation it needs transformers >= 5.24 (the config refuses the static cache under older versions)
AUTOCAST = ["--bf16", "true", "--generation_autocast", "true"]
VLLM_COLOCATE = ["--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_gpu_memory_utilization", "0.3"]

# a contender named NAME + WARM runs NAME's flags with the compile cache NAME's run of the same seed left
WARM = "_warm_cache"

# name -> `trl-zoo train` flags (trl_zoo's trainer); each is the set of config fields a user sets to get it.
CONTENDERS: dict[str, list[str]] = {
    # trl_zoo's trainer, TRL's generation path, nothing else on
    "trl_zoo": [],
    # compute in proportion: greso's dynamic sampling, no forward/backward for zero-advantage rows, length buckets
    "greso_skip_bucket": COMPUTE,
    # the LoRA adapter merged into the weights while `model.generate` runs (trl_zoo/components/generation_speed.py)
    "merged": MERGED,
    "merged_greso_skip_bucket": MERGED + COMPUTE,
    # TRL's transformers continuous batching (GRPOConfig.use_transformers_continuous_batching; trl.GRPOTrainer.
    # _generate_single_turn calls `generate_batch` on the unwrapped PeftModel, LoRA unmerged, cast to bf16 in place).
    # Runs with a LoRA adapter and on the CPU. TRL's default KV-cache size: half the free GPU memory.
    "continuous_batching": CB,
    "continuous_batching_bounded": CB + ["--transformers_continuous_batching_config", BOUNDED_CB],
    # compiled decoding: reachable in TRL 1.16 only through continuous batching. TRL's `model.generate` path builds
    # GenerationConfig(**generation_kwargs, disable_compile=True) in GRPOTrainer.__init__, so a `disable_compile`
    # key in generation_kwargs is a duplicate keyword (TypeError) and transformers' auto-compile
    # (`_valid_auto_compile_criteria`) never fires there. GPU only: the CPU smoke skips it (CPU_SMOKE_SKIP).
    "continuous_batching_compiled": CB + ["--transformers_continuous_batching_config", COMPILED_CB],
    # a static KV cache in TRL's `model.generate` path (GRPOConfig.cache_implementation, passed into TRL's
    # GenerationConfig); not compiled (disable_compile=True above), so it preallocates without the compiled kernels
    "static_cache": ["--cache_implementation", "static"],
    "two_steps_per_generation": TWO_STEPS,
    # TRL's own trainer with two optimizer steps per generation batch (TRL_BEST): an independent harness measured it at
    # 0.61-0.85x TRL's default time (2 x H100, 3 seeds), most of what merged_two_steps gains
    TRL_BEST: TWO_STEPS,
    # combined
    "merged_static_cache": MERGED + ["--cache_implementation", "static"],
    "merged_continuous_batching_bounded": MERGED + CB + ["--transformers_continuous_batching_config", BOUNDED_CB],
    "merged_greso_skip_bucket_two_steps": MERGED + COMPUTE + TWO_STEPS,
    # the first study's winner (merged) with half the generation batches and no extra sampling rounds
    "merged_two_steps": MERGED + TWO_STEPS,
    # transformers' compiled decoding (static cache, CUDA graphs) in TRL's model.generate path, which TRL turns off
    # (trl_zoo/components/generation_speed.py); the first batches pay the compile
    "compiled": COMPILED,
    "merged_compiled": MERGED + COMPILED,
    "merged_compiled_two_steps": MERGED + COMPILED + TWO_STEPS,
    # the second study (results 2026-11-27-h200x2-time-to-target-2): after compiling, a two-steps step is ≈ 1.9 s of
    # generation for 256 rows and ≈ 0.9 s of loss step per optimizer step
    "merged_four_steps": MERGED + FOUR_STEPS,
    "merged_compiled_four_steps": MERGED + COMPILED + FOUR_STEPS,
    # the best lever so far without greso's extra sampling rounds (its cost in the first study): in TRL's runs of
    # the third study 39-45 % of groups had no reward spread over the first 25 steps, a share of the loss step
    # (≈ 0.9 s of a 2.3 s step) that skip_zero_advantage does not compute. Fourth study: 71 % fewer completion
    # slots, but training-only steps 1.03-1.18 s against 0.75-0.85 s (launch-bound model): 0.67× against 0.62×
    "merged_skip_bucket_two_steps": MERGED + SKIP_BUCKET + TWO_STEPS,
    "merged_compiled_skip_bucket_two_steps": MERGED + COMPILED + SKIP_BUCKET + TWO_STEPS,
    # compiled decoding without inductor's kernels. Fifth study: 10-13 s of compiling, decoding 0.62× eager (inductor
    # 0.33×): 0.69× TRL's time, between cold inductor (0.85×) and no compile (0.62×)
    "merged_cudagraphs_two_steps": MERGED + CUDAGRAPHS + TWO_STEPS,
    # the same run again with the compile cache its cold twin left (`compile_cache_dir`): a user's second run.
    # Fifth study: 0.57× (0.54-0.83), the best median so far
    "merged_compiled_two_steps" + WARM: MERGED + COMPILED + TWO_STEPS,
    # TRL's own dtype field alone (what TRL gains from it too), then with the recommended switch, and compiled.
    # Sixth study, compiled cold, 2 seeds: 0.82x / 1.07x; the bf16 base starts 3 points lower on held-out
    "bf16": BF16,
    "merged_bf16_two_steps": MERGED + BF16 + TWO_STEPS,
    "merged_bf16_compiled_two_steps": MERGED + BF16 + COMPILED + TWO_STEPS,
    "merged_bf16_compiled_two_steps" + WARM: MERGED + BF16 + COMPILED + TWO_STEPS,
    # sixth study (transformers 5.24): compiled, cold 0.87x, warm 0.54x (0.51-0.66), the best median so far
    "merged_autocast_two_steps": MERGED + AUTOCAST + TWO_STEPS,
    "merged_autocast_compiled_two_steps": MERGED + AUTOCAST + COMPILED + TWO_STEPS,
    "merged_autocast_compiled_two_steps" + WARM: MERGED + AUTOCAST + COMPILED + TWO_STEPS,
    # one optimizer step per generation batch (on-policy: no old log-probs): in the sixth study the two-steps runs
    # needed one generation batch more than TRL on 3 of 4 seeds. Not yet run on a GPU
    "merged_autocast_compiled": MERGED + AUTOCAST + COMPILED,
    "merged_autocast_compiled" + WARM: MERGED + AUTOCAST + COMPILED,
    # speed_recipe="lora_graphed": the cold-start tax of compiled decoding gone (a capture per generation batch)
    "merged_cuda_graph_two_steps": MERGED + CUDA_GRAPH + TWO_STEPS,
    "merged_autocast_cuda_graph_two_steps": MERGED + AUTOCAST + CUDA_GRAPH + TWO_STEPS,
    # the recipe itself, as it now is: merged_cuda_graph_two_steps and skip_on_policy_old_logps (the first optimizer
    # step's old log-probs are the policy's own; only the second step's are computed). Not yet run on a GPU
    "lora_graphed": ["--speed_recipe", "lora_graphed"],
    # the vLLM path (GPU only): TRL's trainer with its colocated vLLM at 0.3 of the card, at its default and with two
    # optimizer steps per generation batch, against speed_recipe="vllm" (the same two steps, skip_on_policy_old_logps,
    # vLLM's tokens without text, fused_lora); `--best trl_vllm` states every time against TRL + vLLM
    TRL_VLLM: VLLM_COLOCATE,
    TRL_VLLM_TWO_STEPS: VLLM_COLOCATE + TWO_STEPS,
    VLLM_RECIPE: VLLM_COLOCATE + ["--speed_recipe", "vllm"],
    # the recipe without its compiled layers (≈ 21 s of compile in a first run at 135 M)
    "vllm_recipe_eager": VLLM_COLOCATE + ["--speed_recipe", "vllm", "--compiled_layers", "false"],
    # a user's second run: the compile caches (vLLM's, and the trainer's, which vLLM moves under its root) warm
    TRL_VLLM + WARM: VLLM_COLOCATE,
    VLLM_RECIPE + WARM: VLLM_COLOCATE + ["--speed_recipe", "vllm"],
}
# the recommended switch (0.62× in the fourth and fifth studies) and the fastest recipe so far (sixth study: compiled
# decoding under the step's bf16 autocast, 0.87× cold, 0.54× with a warm compile cache)
DEFAULT_CONTENDERS = (f"{TRL_BEST},merged_two_steps,merged_autocast_compiled_two_steps,"
                      "merged_autocast_compiled_two_steps_warm_cache")
# tiny settings for --cpu_smoke: the whole pipeline in a few minutes of CPU, not a measurement
CPU_SMOKE_FLAGS = [
    "--use_cpu", "true", "--bf16", "false", "--num_heldout", "2", "--eval_batch_size", "2",
    "--max_completion_length", "4", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
    "--num_generations", "2",
]
# contenders --cpu_smoke leaves out, and why (one line each)
CPU_SMOKE_SKIP = {
    **{name: "vLLM runs on a GPU only" for name in CONTENDERS if "--use_vllm" in CONTENDERS[name]},
    "continuous_batching_compiled": "CUDA graphs and torch.compile of continuous batching are GPU levers; "
    "on the CPU there is no graph backend and inductor would compile for minutes",
}
# --cpu_smoke: a small paged cache (TRL's default takes half the free memory, seconds of page allocation on a CPU)
CPU_SMOKE_CB_CONFIG = '{"num_blocks": 16}'


def contender_flags(name: str, cpu_smoke: bool = False) -> list[str]:
    """The contender's `trl-zoo train` flags; under --cpu_smoke, steps_per_generation scaled to the smoke's one
    micro-batch a step (the same optimizer steps a generation batch: 8 → 2, 16 → 4) and a small
    continuous-batching cache."""
    flags = list(CONTENDERS[name])
    if not cpu_smoke:
        return flags
    if "--steps_per_generation" in flags:
        at = flags.index("--steps_per_generation") + 1
        flags[at] = str(int(flags[at]) // TASK_ACCUMULATION)
    if "--use_transformers_continuous_batching" in flags:
        if "--transformers_continuous_batching_config" in flags:
            flags[flags.index("--transformers_continuous_batching_config") + 1] = CPU_SMOKE_CB_CONFIG
        else:
            flags += ["--transformers_continuous_batching_config", CPU_SMOKE_CB_CONFIG]
    return flags


def define_contender(definition: str) -> str:
    """--define NAME='FLAGS': a contender added for this invocation (e.g. the combination of the levers that won)."""
    name, sep, flags = definition.partition("=")
    name = name.strip()
    if not sep or not name or name == REFERENCE or not name.replace("_", "").isalnum():
        raise SystemExit(f"--define: NAME='--flag value ...' with NAME a word other than {REFERENCE!r}, got "
                         f"{definition!r}")
    CONTENDERS[name] = shlex.split(flags)
    return name


def target_accuracy(before: float, after: float, fraction: float) -> float | None:
    """a* = a₀ + f · (a_N − a₀); None when TRL gained nothing (a_N ≤ a₀), so there is no target to reach."""
    if not 0 < fraction <= 1:
        raise ValueError(f"--fraction: in (0, 1], got {fraction}.")
    if after <= before:
        return None
    return before + fraction * (after - before)


def run_order(seed_index: int, contenders: list[str]) -> list[str]:
    """TRL first (it sets the target and budget), then the contenders rotated by the seed's index; a warm-cache
    contender right after its cold twin when both run."""
    shift = seed_index % len(contenders) if contenders else 0
    warm = [c for c in contenders if c.endswith(WARM) and cold_twin(c) in contenders]
    rotated = [c for c in [*contenders[shift:], *contenders[:shift]] if c not in warm]
    for name in warm:
        rotated.insert(rotated.index(cold_twin(name)) + 1, name)
    return [REFERENCE, *rotated]


def cold_twin(name: str) -> str:
    return name.removesuffix(WARM)


def compile_cache_dir(run_dir: Path, name: str) -> Path:
    """The torch compile cache (TORCHINDUCTOR_CACHE_DIR) of a run in DIR/seed<s>/<name>: DIR/compile_cache/seed<s>/
    <cold twin>, and vLLM's (VLLM_CACHE_ROOT) inside it: a colocated vLLM engine moves the whole process's inductor
    and Triton caches under its own root, which by default is shared by every run of the machine. A run of any other
    contender empties it first, so compilation is measured cold (what a first run on a machine pays); a warm-cache
    contender reuses what its cold twin of the same seed left."""
    return run_dir.parent.parent / "compile_cache" / run_dir.parent.name / cold_twin(name)


def first_reaching(curve, target: float | None) -> float | None:
    """The clock T at the first point (step, a, T) of the curve with a ≥ target, or None."""
    if target is None:
        return None
    return next((clock for _, accuracy, clock in curve if accuracy >= target), None)


def median_range(values: list[float]) -> tuple[float, float, float]:
    """(median, min, max); +∞ entries (not reached) count in the median and the max."""
    return statistics.median(values), min(values), max(values)


def step_time_ratio(run: dict, reference: dict) -> float | None:
    """The run's training clock over its optimizer steps 2..k divided by TRL's over the same steps of the same seed
    (k: the run's steps; step 1 holds one-time warm-up, left out). With the same completions (the same trainer
    path, same seed) it is the cost of a step; for a contender that generates differently, the cost of its step."""
    own, trl = run.get("step_seconds") or [], reference.get("step_seconds") or []
    k = min(len(own), len(trl))
    if k < 2 or sum(trl[1:k]) <= 0:
        return None
    return sum(own[1:k]) / sum(trl[1:k])


def training_peak(run: dict) -> float | None:
    """GiB: the run's training peak (held-out evaluation excluded), or, for records older than that split, the
    process's peak."""
    value = run.get("training_peak_memory_gib")
    return value if value is not None else run.get("peak_memory_gib")


def summary_table(records: list[dict], best_name: str = TRL_BEST) -> str:
    """Markdown: one row per run name (TRL first), over the seeds that have a TRL reference with a target; runs
    that failed (exit ≠ 0 by themselves) are listed under the table, not counted in it. Each time is also stated
    as × TRL at its own best setting (`best_name`: TRL_BEST, or TRL_VLLM on the vLLM path) on the same seed, where
    that run reached the target."""
    failed = [r for r in records if r.get("failed")]
    records = [r for r in records if not r.get("failed")]
    reference = {r["seed"]: r for r in records if r["name"] == REFERENCE and r.get("target") is not None}
    best = {r["seed"]: r for r in records if r["name"] == best_name and r.get("time_to_target")}
    names = [REFERENCE] + sorted({r["name"] for r in records} - {REFERENCE})
    lines = [
        "| run | seeds reached | time to target, median (range) s | × TRL, median (range) "
        f"| × TRL best ({best_name}), median (range) | accuracy at stop, median "
        "| step time × TRL, median (range) | first step s, median | completions, median | completion slots, median "
        "| training peak GiB, max | evaluation peak GiB, max |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def fmt(value: float, spec: str = "{:.1f}") -> str:
        return "not reached" if math.isinf(value) else spec.format(value)

    def ratio_text(ratios: list[float]) -> str:
        if not ratios:
            return "n/a"
        middle, low, high = median_range(ratios)
        return f"{fmt(middle, '{:.2f}')} ({fmt(low, '{:.2f}')}–{fmt(high, '{:.2f}')})"

    def peak_text(values) -> str:
        values = [v for v in values if v is not None]
        return f"{max(values):.2f}" if values else "n/a"

    for name in names:
        runs = [r for r in records if r["name"] == name and r["seed"] in reference]
        if not runs:
            continue
        times, ratios, best_ratios = [], [], []
        for r in runs:
            trl_time = reference[r["seed"]]["time_to_target"]
            own = r["time_to_target"] if r["time_to_target"] is not None else math.inf
            times.append(own)
            ratios.append(own / trl_time if trl_time else math.inf)
            if r["seed"] in best:
                best_ratios.append(own / best[r["seed"]]["time_to_target"])
        t_med, t_lo, t_hi = median_range(times)
        steps = [q for q in (step_time_ratio(r, reference[r["seed"]]) for r in runs) if q is not None]
        step_text = "{:.2f} ({:.2f}–{:.2f})".format(*median_range(steps)) if steps else "n/a"
        firsts = [r["step_seconds"][0] for r in runs if r.get("step_seconds")]
        first_text = f"{statistics.median(firsts):.1f}" if firsts else "n/a"
        lines.append(
            f"| {name} | {sum(not math.isinf(t) for t in times)}/{len(runs)} "
            f"| {fmt(t_med)} ({fmt(t_lo)}–{fmt(t_hi)}) | {ratio_text(ratios)} | {ratio_text(best_ratios)} "
            f"| {statistics.median(r['accuracy_at_stop'] for r in runs):.1%} | {step_text} | {first_text} "
            f"| {statistics.median(r['completions'] for r in runs):.0f} "
            f"| {statistics.median(r['completion_slots'] for r in runs):.0f} "
            f"| {peak_text(training_peak(r) for r in runs)} "
            f"| {peak_text(r.get('evaluation_peak_memory_gib') for r in runs)} |"
        )
    ends = end_gaps(records, reference)
    if ends:
        lines.append("\nran on past the target (--to_the_end): accuracy at the end minus TRL's at its end, median "
                     "(range), points: " + "; ".join(f"{name} {ends[name]}" for name in ends))
    for r in failed:
        lines.append(f"\nfailed: {r['name']} seed {r['seed']} (exit {r['exit_code']}): {' / '.join(r['log_tail'])}")
    return "\n".join(lines)


def end_gaps(records: list[dict], reference: dict[int, dict]) -> dict[str, str]:
    """name -> "median (min–max)" of 100 · (a_end − a_end(TRL)) over the seeds of the contender's `--to_the_end`
    runs: where a run that went on past the target ends against TRL's run of the same seed."""
    gaps: dict[str, list[float]] = {}
    for r in records:
        if r.get("to_the_end") and r["seed"] in reference and r.get("accuracy_at_stop") is not None:
            trl_end = reference[r["seed"]]["curve"][-1][1]
            gaps.setdefault(r["name"], []).append(100 * (r["accuracy_at_stop"] - trl_end))
    return {name: "{:+.1f} ({:+.1f}–{:+.1f})".format(*median_range(values)) for name, values in gaps.items()}


def trainer_of(name: str) -> str:
    """Which trainer runs `name`: TRL's for the reference and TRL_TRAINER (and their warm-cache twins), trl_zoo's for
    every other contender."""
    return "trl" if name == REFERENCE or cold_twin(name) in TRL_TRAINER else "trl_zoo"


def run_command(name: str, seed: int, out: Path, args, target: float | None, budget: float | None) -> list[str]:
    flags = (["--trainer", "trl"] if name == REFERENCE
             else ["--trainer", trainer_of(name), *contender_flags(name, getattr(args, "cpu_smoke", False))])
    steps = args.steps if name == REFERENCE else math.ceil(args.steps * args.max_steps_factor)
    command = [
        sys.executable, str(ROOT / "benchmarks" / "lib" / "time_to_target_run.py"),
        "--record", str(out / "record.jsonl"),
        *flags[:2],
    ]
    if target is not None:
        command += ["--target", repr(target)]
    if budget is not None:
        command += ["--budget_seconds", repr(budget)]
    if name != REFERENCE and args.to_the_end:
        command += ["--to_the_end"]
    if getattr(args, "profile_blocks", False):
        command += ["--profile_blocks"]
    command += [
        "--task", args.task, "--seed", str(seed), "--output_dir", str(out), "--overwrite_output_dir", "true",
        "--write_report", "false", "--save_strategy", "no", "--max_steps", str(steps),
        "--eval_every_steps", str(args.eval_every), "--eval_batch_size", str(args.eval_batch_size), *flags[2:],
        *(smoke_extra(args.extra, flags) if getattr(args, "cpu_smoke", False) else args.extra),
    ]
    return command


def smoke_extra(extra: list[str], flags: list[str]) -> list[str]:
    """--cpu_smoke's flags for a run: `--bf16 false` left out for a contender that generates under autocast
    (generation_autocast refuses to run without mixed precision; bf16 autocast runs on a CPU too)."""
    if "--generation_autocast" not in flags or "--bf16" not in extra:
        return list(extra)
    at = extra.index("--bf16")
    return extra[:at] + extra[at + 2:]


# what a run's output_dir holds besides its records (≈ 23 MB a run: the LoRA adapter, the tokenizer), deleted after
# the run unless --keep_weights
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "tokenizer.json")


class Interrupted(Exception):
    """A run was killed by a signal (the piece's `timeout`, a lost machine): nothing of it is kept or counted."""


def finished_record(
    out: Path, target: float | None, budget: float | None, to_the_end: bool | None = None
) -> dict | None:
    """The record of a run an earlier invocation finished in `out`, or None (it must run, again).

    Counted only when the last line of record.jsonl is whole JSON with exit code 0 and, for a contender, the target
    and budget it ran against are the ones derived now (a changed --fraction or --budget_factor reruns it). A run
    killed mid-way leaves no line (the run writes it after training) or a cut one, so it is run again from step 0.
    A run that failed (failed.json, written when the run exited non-zero by itself) is reported, not rerun, unless
    --retry_failed removed the file."""
    failed = out / "failed.json"
    if failed.exists():
        try:
            return json.loads(failed.read_text())
        except json.JSONDecodeError:
            return None
    path = out / "record.jsonl"
    if not path.exists():
        return None
    lines = path.read_text().splitlines()
    try:
        line = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None
    if not line or line.get("exit_code") != 0:
        return None
    if line.get("trainer") != "trl" or line.get("target") is not None:  # a contender (TRL's reference has none)
        for key, wanted in (("target", target), ("budget_seconds", budget)):
            if wanted is not None and (line.get(key) is None or not math.isclose(line[key], wanted, rel_tol=1e-9)):
                return None
        if to_the_end is not None and bool(line.get("to_the_end")) != to_the_end:
            return None
    return line


def run_one(name: str, seed: int, out: Path, args, target, budget, device: str | None = None) -> dict:
    command = run_command(name, seed, out, args, target, budget)
    flags = command[command.index("--task"):]
    if args.resume:
        if args.retry_failed:
            (out / "failed.json").unlink(missing_ok=True)
        line = finished_record(out, target, budget, args.to_the_end)
        if line is not None:  # a finished run of an earlier, cut-short invocation
            return {**line, "name": name, "seed": seed, "flags": flags}
    prepare_run_folder(out)  # its log and records are written beside the run's files, before the run claims it
    (out / "record.jsonl").unlink(missing_ok=True)
    (out / "failed.json").unlink(missing_ok=True)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if device is not None:  # --devices: this run sees only its device
        env["CUDA_VISIBLE_DEVICES"] = device
    cache = compile_cache_dir(out, name)
    if not name.endswith(WARM):
        shutil.rmtree(cache, ignore_errors=True)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache.resolve())
    env["VLLM_CACHE_ROOT"] = str((cache / "vllm").resolve())  # vLLM points the process's inductor cache there
    started = time.perf_counter()
    with open(out / "log.txt", "w") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT).returncode
    wall = time.perf_counter() - started
    if code < 0 or code in (128 + signal.SIGTERM, 128 + signal.SIGKILL, 128 + signal.SIGINT):
        (out / "record.jsonl").unlink(missing_ok=True)
        raise Interrupted(f"{name} seed {seed}: killed (exit {code}); not counted, rerun with --resume")
    lines = (out / "record.jsonl").read_text().splitlines() if (out / "record.jsonl").exists() else []
    if code != 0 or not lines:
        tail = (out / "log.txt").read_text().splitlines()[-3:]
        failure = {"trainer": trainer_of(name), "exit_code": code or 1, "failed": True,
                   "wall_seconds": wall, "log_tail": tail}
        (out / "failed.json").write_text(json.dumps(failure) + "\n")
        return {**failure, "name": name, "seed": seed, "flags": flags}
    line = json.loads(lines[-1])
    line["wall_seconds"] = wall
    if not args.keep_weights:  # the study keeps records, logs and metrics: a DIR small enough to carry between pieces
        for pattern in WEIGHT_FILES:
            for path in out.glob(pattern):
                path.unlink()
    (out / "record.jsonl").write_text("".join(lines[:-1] + [json.dumps(line)]) + "\n")
    return {**line, "name": name, "seed": seed, "flags": flags}


def evaluations_in(steps: int, eval_every: int) -> int:
    """Held-out evaluations of a run of `steps` steps: at step 0, every eval_every steps and at the last."""
    return 1 + steps // eval_every + (1 if steps % eval_every else 0)


# a contender's estimate from its own finished runs of other seeds: their longest wall clock times this margin
SAME_RUN_MARGIN = 1.25


def estimate_seconds(name: str, args, reference: dict | None = None, earlier: list[dict] = ()) -> float:
    """Expected wall seconds of one run (process start, training, evaluations).

    TRL's run, or any run before TRL's of its seed finished: startup + N · step + evaluations · eval, from the flags
    (--step_seconds, --eval_seconds, --startup_seconds). A contender after TRL's run: the same terms measured on
    TRL's run, its training clock scaled by --estimate_factor (1: stops at N steps at TRL's speed; the budget
    factor b: the worst case, a contender that never reaches the target). Evaluations are counted for N steps.
    A contender with finished runs on other seeds (`earlier`, same name): the longest of their wall clocks ×
    SAME_RUN_MARGIN, at most the estimate above (a fast lever's next seed is not held back by TRL's pace)."""
    measured = [r["wall_seconds"] for r in earlier if r.get("wall_seconds") and not r.get("failed")]
    if measured and name != REFERENCE:
        return min(max(measured) * SAME_RUN_MARGIN, estimate_seconds(name, args, reference))
    steps = args.steps if name == REFERENCE else math.ceil(args.steps * args.max_steps_factor)
    factor = 1.0 if name == REFERENCE else args.estimate_factor
    evaluations = evaluations_in(steps, args.eval_every)
    if reference is not None and reference.get("training_seconds") and reference.get("evaluations"):
        training = reference["training_seconds"] * factor * steps / max(reference["steps"], 1)
        per_eval = reference["eval_seconds"] / reference["evaluations"]
        wall = reference.get("wall_seconds")
        startup = (max(wall - reference["training_seconds"] - reference["eval_seconds"], 0.0)
                   if wall else args.startup_seconds)
        return startup + training + evaluations * per_eval
    return args.startup_seconds + steps * args.step_seconds * factor + evaluations * args.eval_seconds


def plan(args, seeds: list[int], contenders: list[str], out: Path) -> list[dict]:
    """Every run of the study in order, with its estimate, whether a finished record exists (with --resume), the
    piece of --piece_minutes it falls in, and whether it fits in --plan_minutes of device time."""
    rows, elapsed, piece, in_piece = [], 0.0, 1, 0.0
    for index, seed in enumerate(seeds):
        reference = None
        reference_dir = out / f"seed{seed}" / REFERENCE
        if args.resume:
            reference = finished_record(reference_dir, None, None)
            if reference is not None and reference.get("failed"):
                reference = None
        for name in run_order(index, contenders):
            done = False
            if args.resume:
                if name == REFERENCE:
                    done = reference is not None
                else:
                    line = finished_record(out / f"seed{seed}" / name, None, None, args.to_the_end)
                    done = line is not None and reference is not None
            if args.cpu_smoke and name in CPU_SMOKE_SKIP:
                continue
            seconds = 0.0 if done else estimate_seconds(name, args, reference)
            if not done:
                if in_piece and in_piece + seconds > 60 * args.piece_minutes:
                    piece, in_piece = piece + 1, 0.0
                in_piece += seconds
                elapsed += seconds
            rows.append({"seed": seed, "name": name, "done": done, "seconds": seconds,
                         "piece": None if done else piece, "cumulative": elapsed,
                         "fits": done or elapsed <= 60 * args.plan_minutes,
                         "alone": seconds > 60 * args.piece_minutes})
    return rows


def print_plan(rows: list[dict], args, argv: list[str]) -> None:
    todo = [r for r in rows if not r["done"]]
    print(f"estimates: {args.step_seconds} s a step, {args.eval_seconds} s an evaluation, {args.startup_seconds} s a "
          f"process start (TRL's run and contenders before it), contenders × {args.estimate_factor} TRL's clock")
    print("| seed | run | estimate min | piece | cumulative min | fits in plan |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        state = "done" if r["done"] else ("yes" if r["fits"] else "no")
        note = " (longer than a piece)" if r["alone"] else ""
        print(f"| {r['seed']} | {r['name']} | {r['seconds'] / 60:.1f}{note} | {r['piece'] or '-'} "
              f"| {r['cumulative'] / 60:.1f} | {state} |")
    fits = [r for r in todo if r["fits"]]
    pieces = max((r["piece"] for r in todo), default=0)
    fitting_pieces = max((r["piece"] for r in fits), default=0)
    print(f"{len(todo)} runs to do, ~{sum(r['seconds'] for r in todo) / 60:.0f} min in {pieces} pieces of ≤ "
          f"{args.piece_minutes} min; {len(fits)} fit in {args.plan_minutes} min ({fitting_pieces} pieces).")
    keep, skip = [], {"--plan_minutes", "--piece_minutes", "--deadline_minutes"}
    iterator = iter(argv)
    for token in iterator:
        if token in skip:
            next(iterator, None)
        elif token.split("=")[0] not in skip:
            keep.append(token)
    resume = [] if "--resume" in keep else ["--resume"]
    limit = math.ceil(60 * args.piece_minutes) + 30
    print("each piece (the same command; it resumes, and stops before a run it cannot finish):")
    print(f"    timeout {limit} python benchmarks/time_to_target.py {shlex.join(keep + resume)} "
          f"--deadline_minutes {args.piece_minutes}")


class Study:
    """One invocation's runs and records. With --devices, one thread per device runs its seeds (each seed's TRL run
    and contenders on that device, one at a time); the records are shared under a lock and written in seed and run
    order whichever device finished first."""

    def __init__(self, out: Path, args, contenders: list[str], started: float):
        self.out, self.args, self.contenders, self.started = out, args, contenders, started
        self._records: dict[tuple[int, int], dict] = {}
        self._lock = threading.Lock()

    def ordered_records(self) -> list[dict]:
        """The records by (seed's index, place in `run_order`)."""
        with self._lock:
            return self._ordered()

    def _ordered(self) -> list[dict]:
        return [self._records[key] for key in sorted(self._records)]

    def _add(self, key: tuple[int, int], record: dict) -> None:
        with self._lock:  # one writer at a time, and atomic: a kill while writing leaves the previous file
            self._records[key] = record
            temporary = self.out / "records.jsonl.tmp"
            temporary.write_text("".join(json.dumps(r) + "\n" for r in self._ordered()))
            os.replace(temporary, self.out / "records.jsonl")

    def run_seed(self, index: int, seed: int, device: str | None = None) -> bool:
        """TRL's run of the seed, then its contenders (`run_order`); False when --deadline_minutes stopped it."""
        args, out = self.args, self.out
        target = budget = reference = None
        for position, name in enumerate(run_order(index, self.contenders)):
            run_dir = out / f"seed{seed}" / name
            if args.summarize and finished_record(run_dir, target, budget, args.to_the_end) is None:
                if name == REFERENCE:
                    return True
                continue
            if args.deadline_minutes is not None and not (
                args.resume and finished_record(run_dir, target, budget, args.to_the_end) is not None
            ):
                with self._lock:
                    earlier = [r for r in self._records.values() if r["name"] == name]
                need = estimate_seconds(name, args, reference, earlier)
                left = 60 * args.deadline_minutes - (time.perf_counter() - self.started)
                if need > left:
                    print(f"deadline: {name} seed {seed} needs ~{need:.0f} s, {max(left, 0):.0f} s left; "
                          f"stopping here (rerun with --resume)", flush=True)
                    return False
            record = run_one(name, seed, run_dir, args, target, budget, device)
            if record.get("failed"):
                self._add((index, position), record)
                print(f"seed {seed} {name}: FAILED (exit {record['exit_code']}): {' / '.join(record['log_tail'])}",
                      flush=True)
                if name == REFERENCE:
                    return True
                continue
            if name == REFERENCE:
                reference = record
                before, after = record["curve"][0][1], record["curve"][-1][1]
                target = target_accuracy(before, after, args.fraction)
                if args.fixed_target is not None:
                    target = args.fixed_target
                budget = args.budget_factor * record["training_seconds"]
                record.update(target=target, budget_seconds=budget, reached=None,
                              time_to_target=first_reaching(record["curve"], target))
                record["reached"] = record["time_to_target"] is not None
            self._add((index, position), record)
            if target is None:
                print(f"seed {seed}: TRL gained nothing ({before:.1%} → {after:.1%}); no target, contenders skipped")
                return True
            print(f"seed {seed} {name}: stop {record['stop_reason']}, time to target {record['time_to_target']}, "
                  f"accuracy {record['accuracy_at_stop']:.1%}, clock {record['training_seconds']:.1f} s", flush=True)
        return True


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--task", default="chat_arithmetic")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=40, help="TRL's run: N optimizer steps (the task preset's 40).")
    parser.add_argument("--eval_every", type=int, default=5)
    parser.add_argument("--eval_batch_size", type=int, default=500,
                        help="Held-out prompts per greedy batch of every run (the task's 500 in one batch: ≈ 3 s an "
                             "evaluation on an H200, against ≈ 15 s in batches of 128).")
    parser.add_argument("--fraction", type=float, default=0.9)
    parser.add_argument("--budget_factor", type=float, default=2.0)
    parser.add_argument("--max_steps_factor", type=float, default=1.0)
    parser.add_argument("--profile_blocks", action="store_true",
                        help="Every run also records TRL's profiled blocks per step (lib/block_times.py; adds syncs).")
    parser.add_argument("--contenders", default=DEFAULT_CONTENDERS)
    parser.add_argument("--best", default=TRL_BEST, choices=sorted(TRL_TRAINER),
                        help="TRL's run the summary's second ratio is against (trl_vllm on the vLLM path)")
    parser.add_argument("--define", action="append", default=[], metavar="NAME='FLAGS'",
                        help="Add a contender for this invocation (repeatable), e.g. a combination of levers.")
    parser.add_argument("--cpu_smoke", action="store_true", help="Tiny settings on the CPU: tests the pipeline only.")
    parser.add_argument("--fixed_target", type=float, default=None,
                        help="Pipeline tests only: this target instead of the rule (e.g. 1.01: never reached).")
    parser.add_argument("--resume", action="store_true",
                        help="Reuse the runs a cut-short invocation finished (DIR/seed<s>/<name>/record.jsonl).")
    parser.add_argument("--keep_weights", action="store_true",
                        help="Keep each run's adapter and tokenizer files (deleted by default after the run).")
    parser.add_argument("--retry_failed", action="store_true", help="With --resume: rerun runs that failed.")
    parser.add_argument("--to_the_end", action="store_true",
                        help="Contenders do not stop at the target: they run to max_steps or the budget, so the "
                             "summary also says where each ends against TRL's end (a lever that reaches the target "
                             "first but ends lower shows it).")
    parser.add_argument("--devices", default=None, metavar="0,1",
                        help="One run per listed GPU at a time: seed i runs on device i mod n (its TRL run and its "
                             "contenders on the same device), the devices in parallel.")
    parser.add_argument("--summarize", action="store_true",
                        help="Run nothing: records.jsonl and summary.md from the runs finished under DIR (studies of "
                             "several cards or pieces, their seed folders copied into one DIR).")
    parser.add_argument("--deadline_minutes", type=float, default=None,
                        help="Start no run whose estimate would end past this many minutes; exit 3 (resume later).")
    parser.add_argument("--plan_minutes", type=float, default=None,
                        help="Print the runs, their estimates, pieces and what fits in M minutes; run nothing.")
    parser.add_argument("--piece_minutes", type=float, default=9.0, help="Plan: minutes of one piece (one call).")
    parser.add_argument("--step_seconds", type=float, default=4.6,
                        help="Estimate: TRL's seconds a step (H200, 128 completions, timed alone: 4.6).")
    parser.add_argument("--eval_seconds", type=float, default=6.0,
                        help="Estimate: seconds of one held-out evaluation (500 prompts in one greedy batch: ≈ 3 s "
                             "on an H200; 4 batches of 128: ≈ 15 s).")
    parser.add_argument("--startup_seconds", type=float, default=25.0,
                        help="Estimate: a run's process start (imports, model load, datasets).")
    parser.add_argument("--estimate_factor", type=float, default=1.0,
                        help="Estimate: a contender's training clock over TRL's (1: N steps at TRL's speed; "
                             "--budget_factor: the worst case).")
    parser.add_argument("--list", action="store_true", help="Print TRL's commands (contenders need its target).")
    args, args.extra = parser.parse_known_args(argv)
    defined = [define_contender(d) for d in args.define]
    contenders = [c for c in args.contenders.split(",") if c]
    contenders += [d for d in defined if d not in contenders]
    unknown = [c for c in contenders if c not in CONTENDERS]
    if unknown:
        raise SystemExit(f"--contenders: unknown {unknown}; known: {', '.join(CONTENDERS)}")
    out = Path(args.out)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.summarize:
        args.resume, args.retry_failed = True, False
    if args.plan_minutes is not None:
        print_plan(plan(args, seeds, contenders, out), args, argv)
        return 0
    if args.cpu_smoke:
        args.extra = [*CPU_SMOKE_FLAGS, *args.extra]
        for name in [c for c in contenders if c in CPU_SMOKE_SKIP]:
            print(f"--cpu_smoke: {name} skipped: {CPU_SMOKE_SKIP[name]}")
            contenders.remove(name)
    if args.list:
        for seed in seeds:
            print(" ".join(run_command(REFERENCE, seed, out / f"seed{seed}" / REFERENCE, args, None, None)))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    study = Study(out, args, contenders, time.perf_counter())
    devices = args.devices.split(",") if args.devices else [None]
    complete = True

    def run_device(k: int) -> bool:  # the seeds of device k, one after another; False when the deadline stopped it
        for index, seed in list(enumerate(seeds))[k :: len(devices)]:
            if not study.run_seed(index, seed, devices[k]):
                return False
        return True

    try:
        if len(devices) == 1:
            complete = run_device(0)
        else:
            with ThreadPoolExecutor(max_workers=len(devices)) as pool:
                complete = all(list(pool.map(run_device, range(len(devices)))))
    except Interrupted as interrupted:
        print(interrupted, flush=True)
        complete = False
    records = study.ordered_records()
    table = summary_table(records, args.best)
    (out / "summary.md").write_text(table + "\n")
    print(table)
    if not complete:
        print("study incomplete: run the same command with --resume")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
