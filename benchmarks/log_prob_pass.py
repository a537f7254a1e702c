"""One optimizer step's loss passes, forward and backward, at a size-ladder shape: TRL's log-prob pass against
`prompt_once`'s, per micro-batch size, gradient checkpointing and autocast; with `--kernels`, the device kernels
that take the time.

    python benchmarks/log_prob_pass.py --shape qwen2.5-1.5b [--micro_batches 16,32] [--repeats 5] [--kernels]

The model is the size ladder's (`lib/ladder_run.py`: random weights, bf16, LoRA r 16 on every linear layer). The
batch is one optimizer step's rows: `--prompts` prompts × `--num_generations` completions, every prompt
`--prompt_length` tokens and every completion `--completion_length` (no padding, as in the ladder), the rows of a
prompt side by side (as `prompt_once` sorts them). Each configuration runs the step's micro-batches through a
log-prob pass, TRL's own (`trl.GRPOTrainer._get_per_token_logps_and_entropies`) or trl_zoo's with `prompt_once`
on, sums each micro-batch's log-probs and back-propagates them. Configurations, for each micro-batch size:

    trl_gc, trl                      TRL's pass with and without gradient checkpointing, called bare
    prompt_once                      trl_zoo's pass with `prompt_once` (it refuses gradient checkpointing)
    trl_gc_autocast, trl_autocast    TRL's two under the trainer's mixed-precision autocast, as its training step
                                     runs them (`accelerator.autocast()`)
    fused_gc_autocast, fused_autocast  the same with the LoRA layers fused (`fused_lora`, components/fused_lora.py)

run in interleaved repeats (`--configurations` picks some). Measured: the median seconds of the step's passes
(device synchronised), the peak memory, the positions forwarded (`prompt_once`'s own count). With `--kernels`, one
more repeat of each configuration under `torch.profiler` (`lib/kernel_time.py`) gives its device time in all
kernels, their launches and its `--top` kernels. One `RESULT {json}` line per configuration.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.lib.kernel_time import KernelTime  # noqa: E402
from benchmarks.lib.ladder_run import build_trainer  # noqa: E402
from benchmarks.lib.ladder_run import parse_args as ladder_args  # noqa: E402
from trl_zoo.components.fused_lora import fuse, unfuse  # noqa: E402

CUDA = torch.cuda.is_available()
TRL_GC, TRL, PROMPT_ONCE = "trl_gc", "trl", "prompt_once"
TRL_GC_AUTOCAST, TRL_AUTOCAST = "trl_gc_autocast", "trl_autocast"  # under the trainer's autocast
FUSED_GC_AUTOCAST, FUSED_AUTOCAST = "fused_gc_autocast", "fused_autocast"  # and the LoRA layers fused
CONFIGURATIONS = (TRL_GC, TRL, PROMPT_ONCE, TRL_GC_AUTOCAST, TRL_AUTOCAST, FUSED_GC_AUTOCAST, FUSED_AUTOCAST)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="qwen2.5-1.5b")
    parser.add_argument("--prompts", type=int, default=16, help="one optimizer step's prompts (the ladder's 16)")
    parser.add_argument("--num_generations", type=int, default=8)
    parser.add_argument("--prompt_length", type=int, default=200)
    parser.add_argument("--completion_length", type=int, default=256)
    parser.add_argument("--micro_batches", default="16,32")
    parser.add_argument("--configurations", default=",".join(CONFIGURATIONS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kernels", action="store_true")
    parser.add_argument("--top", type=int, default=12)
    return parser.parse_args(argv)


def step_batch(options, vocab_size: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, vocab_size, (options.prompts, options.prompt_length), generator=generator)
    rows = options.prompts * options.num_generations
    completions = torch.randint(3, vocab_size, (rows, options.completion_length), generator=generator)
    ids = torch.cat([prompts.repeat_interleave(options.num_generations, dim=0), completions], dim=1).to(device)
    return ids, torch.ones_like(ids)


def synchronize():
    if CUDA:
        torch.cuda.synchronize()


def run_step(trainer, configuration: str, micro_batch: int, ids, mask, completion_length: int) -> float:
    """Seconds of one step's passes, forward and backward, in `configuration`."""
    import trl

    model = trainer.model
    checkpointing = "_gc" in configuration
    under_autocast = configuration.endswith("_autocast")
    if configuration.startswith("fused"):
        fuse(model)
    else:
        unfuse(model)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.zero_grad(set_to_none=True)
    synchronize()
    start = time.perf_counter()
    for at in range(0, ids.size(0), micro_batch):
        rows, rows_mask = ids[at : at + micro_batch], mask[at : at + micro_batch]
        with trainer.accelerator.autocast() if under_autocast else contextlib.nullcontext():  # one per micro-batch
            if configuration == PROMPT_ONCE:
                logps = trainer._get_per_token_logps_and_entropies(
                    model, rows, rows_mask, completion_length, compute_entropy=True
                )[0]
            else:
                logps = trl.GRPOTrainer._get_per_token_logps_and_entropies(
                    trainer, model, rows, rows_mask, completion_length, compute_entropy=True
                )[0]
            loss = logps.float().mean() * rows.size(0) / ids.size(0)
        loss.backward()
    synchronize()
    seconds = time.perf_counter() - start
    if checkpointing:
        model.gradient_checkpointing_disable()
    return seconds


def kernel_table(trainer, configuration, micro_batch, ids, mask, completion_length, top: int) -> dict:
    with KernelTime() as kernels:
        run_step(trainer, configuration, micro_batch, ids, mask, completion_length)
    return kernels.summary(top)


def main(argv=None):
    options = parse_args(argv)
    micro_batches = [int(m) for m in options.micro_batches.split(",")]
    ladder = ladder_args([
        "--contender", "zoo_prompt_once", "--shape", options.shape, "--prompts", str(options.prompts),
        "--num_generations", str(options.num_generations), "--micro_batch", str(min(micro_batches)),
        "--prompt_length", str(options.prompt_length), "--completion_length", str(options.completion_length),
        "--gradient_checkpointing", "false",
    ])
    trainer = build_trainer(ladder)
    trainer.model.train()
    vocab_size = trainer.model.config.vocab_size
    device = next(trainer.model.parameters()).device
    ids, mask = step_batch(options, vocab_size, device)
    chosen = options.configurations.split(",")
    unknown = sorted(set(chosen) - set(CONFIGURATIONS))
    if unknown:
        raise SystemExit(f"--configurations: unknown {', '.join(unknown)}; choose from {', '.join(CONFIGURATIONS)}")
    configurations = [(c, m) for m in micro_batches for c in CONFIGURATIONS if c in chosen]
    run_step(trainer, TRL, micro_batches[0], ids, mask, options.completion_length)  # warm-up
    seconds: dict[tuple, list[float]] = {key: [] for key in configurations}
    peaks: dict[tuple, float] = {}
    for _ in range(options.repeats):
        for key in configurations:
            if CUDA:
                torch.cuda.reset_peak_memory_stats()
            seconds[key].append(run_step(trainer, *key, ids, mask, options.completion_length))
            peaks[key] = torch.cuda.max_memory_allocated() / 2**30 if CUDA else 0.0
    slots = trainer._metrics["train"]["prompt_once/token_slots"]  # prompt_once's own count of each pass
    for configuration, micro in configurations:
        forwarded = ids.numel()  # TRL's pass forwards every row whole
        if configuration == PROMPT_ONCE:
            slots.clear()
            run_step(trainer, configuration, micro, ids, mask, options.completion_length)
            forwarded = int(sum(slots))
        result = {
            "shape": options.shape, "configuration": configuration, "micro_batch": micro, "rows": ids.size(0),
            "prompt_length": options.prompt_length, "completion_length": options.completion_length,
            "seconds": statistics.median(seconds[(configuration, micro)]),
            "all_seconds": seconds[(configuration, micro)], "peak_gib": peaks[(configuration, micro)],
            "positions": forwarded, "device": torch.cuda.get_device_name() if CUDA else "cpu",
        }
        if options.kernels:
            summary = kernel_table(trainer, configuration, micro, ids, mask, options.completion_length, options.top)
            result.update(kernels=summary.pop("top"), **summary)
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
