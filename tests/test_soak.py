"""Soak: 100 optimizer steps on the tiny model with every loss in the table (RSPO on a tiny MoE), off-policy
(num_iterations=2, so ratios and clips are live) with a KL term and a high learning rate. Every logged loss, gradient
norm and the final weights stay finite, and the process's resident memory does not grow step over step.

Excluded by default (marker `soak`); run with `python -m pytest -m soak tests/test_soak.py -s` to see the numbers.
Memory is the resident set size from /proc/self/statm, sampled after every optimizer step. Its growth is measured
from the median of steps 21-30 (after allocator and autograd warm-up) to the median of the last 10 steps, and must
stay under GROWTH_BOUND_MB per loss; the numbers are printed.
"""

import math
import os
import statistics

import pytest
import torch
from transformers import AutoModelForCausalLM, TrainerCallback

import trl_zoo
from tests import tiny
from tests.test_rspo import moe_model
from trl_zoo.registry import LOSSES

pytestmark = pytest.mark.soak

STEPS = 100
GROWTH_BOUND_MB = 8.0
PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20


def resident_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE_MB


class MemoryRecorder(TrainerCallback):
    def __init__(self):
        self.resident = []

    def on_step_end(self, args, state, control, **kwargs):
        self.resident.append(resident_mb())


def load_moe_model(directory) -> torch.nn.Module:
    """The tiny MoE of test_rspo, loaded from disk so TRL can build the reference model from its path."""
    moe_model().save_pretrained(directory)
    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)


@pytest.mark.parametrize("name", LOSSES.names())
def test_long_run_stays_finite_and_memory_flat(name, tmp_path):
    moe = bool(LOSSES.get(name).spec.requires_moe)
    torch.manual_seed(0)
    args = trl_zoo.GRPOConfig(
        **tiny.config_kwargs(
            loss_type=name,
            max_steps=STEPS,
            num_iterations=2,
            beta=0.04,
            learning_rate=1e-2,
            **({"epsilon_high": 5.0} if name == "cispo" else {}),
            **tiny.required_settings(name),
        )
    )
    trainer = trl_zoo.GRPOTrainer(
        model=load_moe_model(tmp_path) if moe else tiny.model(0),
        reward_funcs=tiny.digit_reward,
        args=args,
        train_dataset=tiny.prompts_dataset(answers=name == "luffy"),
        processing_class=tiny.tokenizer(),
    )
    recorder = MemoryRecorder()
    trainer.add_callback(recorder)
    trainer.train()

    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == STEPS
    for log in logs:
        assert math.isfinite(log["loss"]) and math.isfinite(log["grad_norm"]), log
    assert all(torch.isfinite(parameter).all() for parameter in trainer.model.parameters())
    start, end = statistics.median(recorder.resident[20:30]), statistics.median(recorder.resident[-10:])
    print(
        f"\n{name}: {STEPS} steps, loss range [{min(log['loss'] for log in logs):.3g}, "
        f"{max(log['loss'] for log in logs):.3g}], RSS {start:.1f} MB → {end:.1f} MB ({end - start:+.2f} MB)"
    )
    assert end - start < GROWTH_BOUND_MB, (start, end)
