"""One trainer with a vLLM engine of its own, in a process of its own (tests/gpu/test_vllm_own_engine.py):

    python -m tests.gpu.own_engine CASE POLICY_PATH      # prints one JSON line, prefixed "RESULT "

Cases: `awake` and `sleep` (two steps, with and without `vllm_enable_sleep_mode`; the card's used memory at each
step's start and end, torch's training peak), `small_share` (a memory share too small for the engine),
`long_prompt` (a prompt longer than `vllm_max_model_length` leaves room for).
"""

from __future__ import annotations

import json
import math
import sys

import torch
from transformers import TrainerCallback

from tests import tiny
from tests.gpu.test_vllm_battery import logged, make

GIB = 2**30


class CardMemory(TrainerCallback):
    """The card's used memory (all processes and pools: vLLM's included) at each step's start and end."""

    def __init__(self):
        self.used = []

    def record(self):
        free, total = torch.cuda.mem_get_info()
        self.used.append((total - free) / GIB)

    def on_step_begin(self, args, state, control, **kwargs):
        self.record()

    def on_step_end(self, args, state, control, **kwargs):
        self.record()


def steps(policy_path: str, sleep: bool) -> dict:
    trainer = make(policy_path, vllm_enable_sleep_mode=sleep, max_steps=2)
    card = CardMemory()
    trainer.add_callback(card)
    torch.cuda.reset_peak_memory_stats()
    trainer.train()
    losses = logged(trainer, "loss")
    return dict(
        losses=losses,
        finite=all(math.isfinite(x) for x in losses),
        card_used_gib=card.used,
        torch_training_peak_gib=torch.cuda.max_memory_allocated() / GIB,
        logp_difference=logged(trainer, "sampling/sampling_logp_difference/mean"),
    )


def refused(build) -> dict:
    try:
        trainer = build()
        trainer.train()
    except Exception as error:  # the outcome under test: which error, in how many lines
        text = str(error)
        return dict(error=type(error).__name__, lines=len(text.strip().splitlines()), message=text[:2000])
    return dict(error=None)


def main(case: str, policy_path: str) -> dict:
    if case in ("awake", "sleep"):
        return steps(policy_path, sleep=case == "sleep")
    if case == "small_share":
        return refused(lambda: make(policy_path, vllm_gpu_memory_utilization=0.002))
    if case == "long_prompt":
        long = tiny.prompts_dataset(16).map(lambda row: {"prompt": row["prompt"] * 40})
        return refused(lambda: make(policy_path, dataset=long, vllm_max_model_length=64, max_completion_length=16))
    raise SystemExit(f"unknown case {case!r}")


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], sys.argv[2])), flush=True)
