"""Where a training step's time goes, against its floor: the real-model task (the packaged SmolLM2-135M-Instruct, LoRA
r 16, chat_arithmetic at its preset batch shape, as `time_to_target.py` runs it), one configuration per process.

    python benchmarks/step_profile.py --out FILE.jsonl [--configs lora_graphed,lora_graphed_bf16_copy,...]
        [--repeats 2] [--steps 10] [--deadline_seconds S]      # one process per (repeat, configuration), interleaved
    python benchmarks/step_profile.py --summarize FILE.jsonl   # the tables (markdown); runs nothing
    python benchmarks/step_profile.py --out FILE.jsonl --cpu_smoke   # the whole pipeline, tiny, on the CPU

Each process runs `trl-zoo train` for `--steps` optimizer steps with every seam of the step timed from outside the
package (nothing in trl_zoo is changed; `Seams.install` wraps methods of the built trainer and its model):

    decode             each decode forward of `generate` (trl_zoo's graphed step, or the eager forward after the
                       first), CUDA events around it (GPU time, no synchronisation inside `generate`)
    prefill            the first forward of each `generate` call, CUDA events
    generate, rest     TRL's `transformers.generate` block minus the two: sampling, stopping checks, host syncs
    merge or copy      `merge_adapter_for_generation`'s merge and restore, or `generation_bf16_copy`'s copy and
                       release (device synchronised at their ends)
    old log-probs      TRL's no-grad `_get_per_token_logps_and_entropies` inside `_prepare_inputs`, and
                       `skip_on_policy_old_logps`'s pass right after it
    reward             TRL's `_calculate_rewards` block
    prepare, rest      the rest of `_prepare_inputs` (tokenisation, advantages, shuffling, buffering)
    loss forward       TRL's `compute_loss` block
    backward           `accelerator.backward` (synchronised at both ends)
    optimizer          from the gradient clip to `on_optimizer_step` (synchronised)
    Python between     the step's clock (`StepTimer`, synchronised at both ends) minus all of the above

TRL's blocks are timed by `lib/block_times.py` (synchronised at each block's ends). The held-out evaluation (before
step 1 and after the last) is outside the clock, and the training peak is read apart from it
(`lib/time_to_target_run.py`'s `Instrumentation`). The figures are per optimizer step, the mean over whole generation
cycles after the first (`--warmup_cycles`): a cycle is one generation batch and the optimizer steps it feeds.

Each seam's floor on the card (`floors`): the decode step's bandwidth floor (the weights in the dtype they decode in,
read once, and the KV cache of the real tokens, at `BANDWIDTH` bytes/s, the device-to-device copy rate measured on
an H200); the FLOPs floor of the passes (2 · matmul parameters · tokens forward, 4 · backward, the LM head only on
the completion positions TRL keeps; attention's own FLOPs left out) at `MATMUL_FLOPS`, the bf16 matrix rate measured
on an H200; the prefill's larger of the two; the copy's and optimizer's bytes. `UNFUSED_DECODE_MS` is the earlier
measurement of the same model's decode step as plain PyTorch ops captured in one CUDA graph (issue 53).

Configurations (`CONFIGS`): TRL's trainer at its default and at its best setting (two optimizer steps per generation
batch), `speed_recipe: lora_graphed`, the recipe with `generation_bf16_copy`, and each with Liger-Kernel's fused
RMSNorm, SwiGLU and RoPE patched into transformers' Llama classes (`apply_liger_kernel_to_llama`, in the worker
only; `*_liger`; needs liger-kernel and a GPU). Every record is one JSON line appended to FILE.jsonl.
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
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.time_to_target import TWO_STEPS  # noqa: E402

BANDWIDTH = 4.3e12  # bytes/s: device-to-device copy on an H200, bytes read and written
MATMUL_FLOPS = 790e12  # FLOP/s: 8192³ bf16 matrix products on random data on an H200
UNFUSED_DECODE_MS = {128: 2.14, 256: 2.36}  # rows -> ms: plain PyTorch ops in one CUDA graph (issue 53)

# TRL's profiled blocks, by the names `lib/block_times.py` records them under
PREPARE, LOGPS, REWARDS = "_prepare_inputs", "_get_per_token_logps_and_entropies", "_calculate_rewards"
RECIPE = ["--speed_recipe", "lora_graphed"]
BF16_COPY = ["--generation_bf16_copy", "true"]
# name -> (trainer, `trl-zoo train` flags, Liger-Kernel patched in)
CONFIGS: dict[str, tuple[str, list[str], bool]] = {
    "trl_default": ("trl", [], False),
    "trl_best": ("trl", TWO_STEPS, False),
    "lora_graphed": ("trl_zoo", RECIPE, False),
    "lora_graphed_bf16_copy": ("trl_zoo", RECIPE + BF16_COPY, False),
    "lora_graphed_liger": ("trl_zoo", RECIPE, True),
    "lora_graphed_bf16_copy_liger": ("trl_zoo", RECIPE + BF16_COPY, True),
}
DEFAULT_CONFIGS = "trl_default,trl_best,lora_graphed,lora_graphed_bf16_copy"
# --cpu_smoke: the packaged model, a few rows and tokens, bf16 autocast on the CPU (the copy needs bf16)
CPU_SMOKE_FLAGS = [
    "--use_cpu", "true", "--bf16", "true", "--num_heldout", "2", "--eval_batch_size", "2",
    "--max_completion_length", "4", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
    "--num_generations", "2",
]
ROWS = ("decode", "prefill", "generate_rest", "merge_or_copy", "old_logps", "reward", "prepare_rest", "loss_forward",
        "backward", "optimizer", "python_between")


# ---------------------------------------------------------------------------------------------- the worker
class Seams:
    """Timers around the trainer's seams, summed per optimizer step (module docstring); `facts` holds the shapes the
    floors need."""

    def __init__(self):
        import torch

        self.torch = torch
        self.cuda = torch.cuda.is_available()
        self.seconds: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        self.counts: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        self.passes: list[dict] = []  # one per log-prob forward: step, grad, rows, width, logits_to_keep
        self.generations: list[dict] = []  # one per generate call
        self.trainer = None
        self._events: list[tuple[str, object, object]] = []
        self._call: dict | None = None
        self._in_graph_step = False
        self._forward_started = None
        self._optimizer_started = None

    def step(self) -> int:
        return self.trainer.state.global_step if self.trainer is not None else 0

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def mark(self):
        """A point on the device's timeline (a CUDA event) or the host's clock."""
        if self.cuda:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def add_span(self, name: str, start, end) -> None:
        self._events.append((name, start, end))

    def resolve(self) -> None:
        """Sum the spans recorded since the last call into this step (the device synchronised first)."""
        self.sync()
        step = self.step()
        for name, start, end in self._events:
            seconds = start.elapsed_time(end) / 1000 if self.cuda else end - start
            self.seconds[name][step] += seconds
            self.counts[name][step] += 1
        self._events.clear()

    def timed_sync(self, name: str, function):
        """`function` with the device synchronised at both ends, its wall time added to `name`."""
        seams = self

        def wrapper(*args, **kwargs):
            seams.sync()
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seams.sync()
                seams.seconds[name][seams.step()] += time.perf_counter() - started
                seams.counts[name][seams.step()] += 1

        return wrapper

    def install(self, trainer) -> None:
        import functools
        from contextlib import contextmanager

        from transformers import TrainerCallback

        from trl_zoo.components import decode_graph, decode_precision, generation_speed

        self.trainer = trainer
        seams = self
        unwrapped = trainer.accelerator.unwrap_model(trainer.model)
        target = decode_graph.decoding_model(unwrapped)
        self.facts = model_facts(target)

        # generate: the decoding model's own call, outermost (after decode_graph's wrapper, if any)
        generate = target.generate

        @functools.wraps(generate)
        def profiled_generate(*args, **kwargs):
            seams._call = {"step": seams.step(), "forwards": 0, "decode_steps": 0,
                           "training": bool(seams.trainer.model.training)}  # not the held-out evaluation's
            try:
                return generate(*args, **kwargs)
            finally:
                seams.resolve()
                seams.generations.append(seams._call)
                seams._call = None

        target.generate = profiled_generate

        def before_forward(module, args, kwargs):
            if seams._call is None or seams._in_graph_step:
                return
            call = seams._call
            if call["forwards"] == 0:
                ids = kwargs.get("input_ids", args[0] if args else None)
                call.update(rows=int(ids.shape[0]), prompt_width=int(ids.shape[1]),
                            weight_bytes=weight_bytes(target), weight_dtype=str(next(target.parameters()).dtype))
            seams._forward_started = seams.mark()

        def after_forward(module, args, kwargs, output):
            if seams._call is None or seams._in_graph_step:
                return
            call = seams._call
            name = "prefill" if call["forwards"] == 0 else "decode"
            call["forwards"] += 1
            call["decode_steps"] += name == "decode"
            seams.add_span(name, seams._forward_started, seams.mark())

        target.register_forward_pre_hook(before_forward, with_kwargs=True)
        target.register_forward_hook(after_forward, with_kwargs=True)

        # trl_zoo's graphed decode step (class-wide, once per process): every call is one decode step
        step_call = decode_graph.GraphedDecodeStep.__call__
        if not getattr(step_call, "_profiled", False):
            def profiled_step(step, **inputs):
                call = seams._call
                if call is None:
                    return step_call(step, **inputs)
                if call["forwards"] == 0:  # no eager prefill seen (not expected): count it as a decode step
                    call["forwards"] = 1
                started = seams.mark()
                seams._in_graph_step = True
                try:
                    return step_call(step, **inputs)
                finally:
                    seams._in_graph_step = False
                    call["decode_steps"] += 1
                    seams.add_span("decode", started, seams.mark())

            profiled_step._profiled = True
            decode_graph.GraphedDecodeStep.__call__ = profiled_step

        # the merge and the copy: context managers looked up on their modules when TRL generates
        def timed_context(name, factory):
            @contextmanager
            def wrapper(*args, **kwargs):
                seams.sync()
                started = time.perf_counter()
                with factory(*args, **kwargs) as value:
                    seams.sync()
                    seams.seconds[name][seams.step()] += time.perf_counter() - started
                    yield value
                    seams.sync()
                    started = time.perf_counter()
                seams.sync()
                seams.seconds[name][seams.step()] += time.perf_counter() - started

            return wrapper

        generation_speed.merged_adapter = timed_context("merge_or_copy", generation_speed.merged_adapter)
        decode_precision.decoding_copy = timed_context("merge_or_copy", decode_precision.decoding_copy)

        # log-prob forwards: their shapes (TRL times them as blocks)
        logps = trainer._get_per_token_logps_and_entropies

        def counted_logps(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
            seams.passes.append({"step": seams.step(), "grad": bool(seams.torch.is_grad_enabled()),
                                 "rows": int(input_ids.shape[0]), "width": int(input_ids.shape[1]),
                                 "logits_to_keep": int(logits_to_keep)})
            return logps(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)

        trainer._get_per_token_logps_and_entropies = counted_logps
        trainer.accelerator.backward = self.timed_sync("backward", trainer.accelerator.backward)

        clip = trainer._clip_grad_norm

        def clip_then_mark(*args, **kwargs):
            seams.sync()
            seams._optimizer_started = time.perf_counter()
            return clip(*args, **kwargs)

        trainer._clip_grad_norm = clip_then_mark

        class OptimizerClock(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, **kwargs):
                if seams._optimizer_started is None:  # no clip (max_grad_norm 0)
                    seams.sync()
                    seams._optimizer_started = time.perf_counter()

            def on_optimizer_step(self, args, state, control, **kwargs):
                seams.sync()
                seams.seconds["optimizer"][seams.step()] += time.perf_counter() - seams._optimizer_started
                seams._optimizer_started = None

        trainer.add_callback(OptimizerClock())

    def as_record(self) -> dict:
        return {
            "seam_seconds": {name: {str(s): round(v, 5) for s, v in sorted(steps.items())}
                             for name, steps in self.seconds.items()},
            "seam_counts": {name: {str(s): v for s, v in sorted(steps.items())}
                            for name, steps in self.counts.items()},
            "passes": self.passes,
            "generations": self.generations,
            "model": getattr(self, "facts", None),
        }


def weight_bytes(model) -> int:
    """Bytes of the parameters a forward of `model` reads as it is now (a tied weight once; a LoRA adapter's only
    while it is switched on: merged, it is off)."""
    adapters_off = all(getattr(m, "disable_adapters", False) for m in model.modules() if hasattr(m, "lora_A"))
    return sum(p.numel() * p.element_size() for name, p in model.named_parameters()
               if not (adapters_off and "lora_" in name))


def model_facts(model) -> dict:
    """What the floors need of the decoding model: matmul parameters (every linear layer's weight, the LM head's
    apart), all parameters, and the KV cache's elements per token."""
    import torch

    config = model.config
    linear = {id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)}
    head = model.get_output_embeddings()
    heads = getattr(config, "num_attention_heads", 1)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return {
        "matmul_params": sum(linear.values()),
        "head_params": head.weight.numel() if head is not None else 0,
        "params": sum(p.numel() for p in model.parameters()),
        "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "kv_elements_per_token": 2 * config.num_hidden_layers * kv_heads * head_dim,
    }


def worker(options) -> int:
    import torch
    import trl

    import trl_zoo.cli.train.training_setup as training_setup
    from benchmarks.lib.block_times import BlockTimes
    from benchmarks.lib.real_model_run import versions
    from benchmarks.lib.time_to_target_run import Instrumentation
    from trl_zoo.cli import main as cli_main

    trainer_name, flags, liger = CONFIGS[options.config]
    if liger:
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=False)
    instrumentation = Instrumentation(target=None, budget=None)
    blocks = BlockTimes()
    blocks.install()
    seams = Seams()
    base = instrumentation.trainer_class(trl.GRPOTrainer if trainer_name == "trl" else training_setup.GRPOTrainer)

    class Profiled(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seams.install(self)

    Profiled.__name__ = base.__name__
    training_setup.GRPOTrainer = Profiled
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as out:
        argv = ["train", "--task", options.task, "--seed", str(options.seed), "--output_dir", out,
                "--overwrite_output_dir", "true", "--write_report", "false", "--save_strategy", "no",
                "--max_steps", str(options.steps), "--eval_every_steps", str(10 * options.steps),
                "--eval_batch_size", str(options.eval_batch_size), *flags,
                *(CPU_SMOKE_FLAGS if options.cpu_smoke else [])]
        started = time.perf_counter()
        code = cli_main(argv)
        wall = time.perf_counter() - started
    if torch.cuda.is_available():
        instrumentation.close_training_peak()
    trainer = seams.trainer
    args = trainer.args if trainer is not None else None
    record = {
        "config": options.config, "repeat": options.repeat, "exit_code": code, "liger": liger,
        "step_seconds": instrumentation.clock.seconds,
        "optimizer_steps_per_generation": (args.steps_per_generation // args.gradient_accumulation_steps
                                           if args is not None else None),
        "block_seconds": blocks.as_record(),
        **seams.as_record(),
        "training_peak_gib": instrumentation.training_peak / 2**30 if torch.cuda.is_available() else None,
        "evaluation_peak_gib": instrumentation.evaluation_peak / 2**30 if torch.cuda.is_available() else None,
        "process_seconds": wall,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "versions": versions(),
    }
    step = getattr(trainer, "_zoo_graphed_decoding", None)
    if step is not None:
        record["graph"] = {"captures": step.captures, "replays": step.replays, "eager_steps": step.eager_steps}
    with open(options.record, "a") as handle:
        handle.write(json.dumps(record) + "\n")
    return code


# ---------------------------------------------------------------------------------------------- the tables
def per_step(record: dict, warmup_cycles: int = 1) -> tuple[list[int], dict[str, float]]:
    """(the measured steps, seconds per optimizer step of each row of `ROWS` plus "step"): the mean over the whole
    generation cycles after the first `warmup_cycles`."""
    clock = record["step_seconds"]
    cycle = max(1, record.get("optimizer_steps_per_generation") or 1)
    first = warmup_cycles * cycle
    steps = list(range(first, first + (len(clock) - first) // cycle * cycle))
    if not steps:
        raise ValueError(f"{record['config']}: {len(clock)} steps leave no whole cycle after the warm-up")

    def summed(table: dict, key: str) -> float:
        return sum(table.get(key, {}).get(str(s), 0.0) for s in steps)

    blocks, seams = record["block_seconds"], record["seam_seconds"]
    generate = summed(blocks, f"{PREPARE} > transformers.generate")
    rows = {
        "decode": summed(seams, "decode"),
        "prefill": summed(seams, "prefill"),
        "merge_or_copy": summed(seams, "merge_or_copy"),
        # TRL's pass inside `_prepare_inputs`; skip_on_policy_old_logps's after it, outside TRL's blocks
        "old_logps": summed(blocks, f"{PREPARE} > {LOGPS}")
        + summed(blocks, "old_logps"),
        "reward": summed(blocks, f"{PREPARE} > {REWARDS}"),
        "loss_forward": summed(blocks, "compute_loss"),
        "backward": summed(seams, "backward"),
        "optimizer": summed(seams, "optimizer"),
    }
    rows["generate_rest"] = max(0.0, generate - rows["decode"] - rows["prefill"])
    rows["prepare_rest"] = max(0.0, summed(blocks, PREPARE) - generate - rows["merge_or_copy"]
                               - summed(blocks, f"{PREPARE} > {LOGPS}")
                               - rows["reward"])
    total = sum(clock[s] for s in steps)
    rows["python_between"] = max(0.0, total - sum(rows.values()))
    rows["step"] = total
    return steps, {name: value / len(steps) for name, value in rows.items()}


def floors(record: dict, steps: list[int]) -> dict[str, float]:
    """Seconds per optimizer step each row cannot go below on the card (module docstring), over `steps`."""
    facts = record["model"]
    n = len(steps)
    chosen = set(steps)
    body = facts["matmul_params"] - facts["head_params"]
    out = defaultdict(float)
    for generation in training_generations(record, steps):
        element = 2 if "bfloat16" in generation["weight_dtype"] or "float16" in generation["weight_dtype"] else 4
        rows, width = generation["rows"], generation["prompt_width"]
        kv = facts["kv_elements_per_token"] * element
        for t in range(generation["decode_steps"]):
            out["decode"] += (generation["weight_bytes"] + rows * (width + t + 1) * kv) / BANDWIDTH
        flops = 2 * body * rows * width + 2 * facts["head_params"] * rows
        out["prefill"] += max(flops / MATMUL_FLOPS, generation["weight_bytes"] / BANDWIDTH)
    for p in record["passes"]:
        if p["step"] not in chosen:
            continue
        forward = (2 * body * p["rows"] * p["width"] + 2 * facts["head_params"] * p["rows"] * p["logits_to_keep"])
        if p["grad"]:
            out["loss_forward"] += forward / MATMUL_FLOPS
            out["backward"] += 2 * forward / MATMUL_FLOPS
        else:
            out["old_logps"] += forward / MATMUL_FLOPS
    # AdamW in fp32 over the trainable parameters: read p, g, m, v and write p, m, v
    out["optimizer"] = n * 28 * facts["trainable_params"] / BANDWIDTH
    if record["seam_seconds"].get("merge_or_copy"):  # read the float32 weights, write a 2-byte copy (or the merge)
        out["merge_or_copy"] = len(training_generations(record, steps)) * 6 * facts["params"] / BANDWIDTH
    result = {name: value / n for name, value in out.items()}
    result["step"] = sum(result.values())
    return result


def training_generations(record: dict, steps: list[int]) -> list[dict]:
    """The `generate` calls of training (not the held-out evaluation's) in `steps`."""
    chosen = set(steps)
    return [g for g in record["generations"] if g["step"] in chosen and g.get("training", True) and "rows" in g]


def decode_step_ms(record: dict, steps: list[int]) -> float | None:
    """The mean device time of one decode step over `steps`, in ms."""
    chosen = {str(s) for s in steps}
    seconds = sum(v for s, v in record["seam_seconds"].get("decode", {}).items() if s in chosen)
    count = sum(v for s, v in record["seam_counts"].get("decode", {}).items() if s in chosen)
    return 1000 * seconds / count if count else None


def median_record(records: list[dict], warmup_cycles: int) -> dict:
    """One configuration over its repeats: the median of each row, floor and figure."""
    rows, floor_rows, decode, peaks, rows_generated = [], [], [], [], []
    for record in records:
        steps, measured = per_step(record, warmup_cycles)
        rows.append(measured)
        floor_rows.append(floors(record, steps))
        decode.append(decode_step_ms(record, steps))
        peaks.append(record.get("training_peak_gib"))
        rows_generated += [g["rows"] for g in training_generations(record, steps)]

    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    return {
        "config": records[0]["config"], "repeats": len(records),
        "seconds": {name: median([r.get(name, 0.0) for r in rows]) for name in (*ROWS, "step")},
        "floor": {name: median([f.get(name, 0.0) for f in floor_rows]) for name in (*ROWS, "step")},
        "decode_step_ms": median(decode), "training_peak_gib": median(peaks),
        "rows_generated": max(rows_generated) if rows_generated else None,
    }


LABELS = {
    "decode": "decode", "prefill": "prefill", "generate_rest": "generate, rest (sampling, stops, syncs)",
    "merge_or_copy": "merge or bf16 copy (and restore)", "old_logps": "old log-probs", "reward": "reward",
    "prepare_rest": "prepare, rest", "loss_forward": "loss forward", "backward": "backward",
    "optimizer": "optimizer (clip + step)", "python_between": "Python between", "step": "**step**",
}


def summary_tables(records: list[dict], warmup_cycles: int = 1) -> str:
    """Markdown: per configuration, seconds per optimizer step of each row against its floor; then one line per
    configuration with the decode step against the unfused graphed measurement, the step and the training peak."""
    by_config: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        if record.get("exit_code") == 0:
            by_config[record["config"]].append(record)
    summaries = [median_record(rs, warmup_cycles) for rs in by_config.values()]
    names = [s["config"] for s in summaries]
    lines = ["| seconds per optimizer step | " + " | ".join(f"{n} (floor)" for n in names) + " |",
             "|---|" + "---|" * len(names)]
    for row in (*ROWS, "step"):
        cells = []
        for s in summaries:
            value, floor = s["seconds"][row], s["floor"][row]
            cells.append(f"{value:.3f}" + (f" ({floor:.4f})" if floor else " (–)"))
        lines.append(f"| {LABELS[row]} | " + " | ".join(cells) + " |")
    lines += ["", "| configuration | repeats | rows generated | decode step ms (× unfused graph) | step s "
              "(× floor) | training peak GiB |", "|---|---|---|---|---|---|"]
    for s in summaries:
        unfused = UNFUSED_DECODE_MS.get(s["rows_generated"])
        decode = s["decode_step_ms"]
        decode_text = "–" if decode is None else f"{decode:.2f}" + (f" ({decode / unfused:.2f}×)" if unfused else "")
        floor = s["floor"]["step"]
        peak = s["training_peak_gib"]
        lines.append(f"| {s['config']} | {s['repeats']} | {s['rows_generated']} | {decode_text} | "
                     f"{s['seconds']['step']:.3f} ({s['seconds']['step'] / floor:.0f}×) | "
                     f"{'–' if peak is None else f'{peak:.2f}'} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- the driver
def drive(options) -> int:
    names = [n.strip() for n in options.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"--configs: unknown {unknown}; choose from {sorted(CONFIGS)}")
    started = time.monotonic()
    estimate = 0.0
    for repeat in range(options.repeats):
        for name in names:
            elapsed = time.monotonic() - started
            if options.deadline_seconds and elapsed + estimate > options.deadline_seconds:
                print(f"DEADLINE: {name} repeat {repeat} not started ({elapsed:.0f} s used)", flush=True)
                return 3
            command = [sys.executable, __file__, "--worker", "--config", name, "--repeat", str(repeat),
                       "--record", str(options.out), "--steps", str(options.steps), "--task", options.task,
                       "--seed", str(options.seed), "--eval_batch_size", str(options.eval_batch_size)]
            if options.cpu_smoke:
                command.append("--cpu_smoke")
            run_started = time.monotonic()
            code = subprocess.run(command, cwd=ROOT, env=os.environ.copy(), check=False).returncode
            estimate = max(estimate, time.monotonic() - run_started)
            print(f"RUN {name} repeat {repeat}: exit {code}, {time.monotonic() - run_started:.0f} s", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--configs", default=DEFAULT_CONFIGS)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--task", default="chat_arithmetic")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval_batch_size", type=int, default=500)
    parser.add_argument("--warmup_cycles", type=int, default=1)
    parser.add_argument("--deadline_seconds", type=float, default=0.0,
                        help="Start no process that, at the longest one's time so far, would end past this.")
    parser.add_argument("--cpu_smoke", action="store_true")
    parser.add_argument("--summarize", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--record", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        return worker(options)
    if options.summarize:
        records = [json.loads(line) for line in options.summarize.read_text().splitlines() if line.strip()]
        print(summary_tables(records, options.warmup_cycles))
        return 0
    if options.out is None:
        parser.error("--out FILE.jsonl (or --summarize FILE.jsonl)")
    if options.cpu_smoke and options.configs == DEFAULT_CONFIGS:
        options.configs = "trl_default,lora_graphed_bf16_copy"
    code = drive(options)
    if options.out.exists():
        print(summary_tables([json.loads(line) for line in options.out.read_text().splitlines() if line.strip()],
                             options.warmup_cycles))
    return code


if __name__ == "__main__":
    sys.exit(main())
