"""The points of one optimizer step and what the `on_optimizer_step` hook point receives at each (the loss step runs
them, hooks/loss_step.py; the door's `_get_grad_norm` gives the CLIPPED one).

Tests: tests/test_kl.py (the points' order), tests/test_nonfinite_guard.py.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class StepPhase(enum.Enum):
    """The points of one optimizer step at which `_on_optimizer_step` runs, in this order (module docstring)."""

    GRADIENTS = "gradients"  # accumulated, before clipping
    CLIPPED = "clipped"  # clipped, before optimizer.step()
    UPDATED = "updated"  # after optimizer.step(), the scheduler and global_step += 1


@dataclass
class OptimizerStep:
    """One optimizer step at one of its points: what `_on_optimizer_step` receives."""

    phase: StepPhase
    global_step: int  # optimizer steps completed (at UPDATED: this one included)
    model: Any = None  # the (wrapped) model being trained (GRADIENTS, CLIPPED)
    grad_norm: Any = None  # the gradient norm transformers computed (CLIPPED)
    means: dict[str, float] = field(default_factory=dict)  # the step's token-mean metrics (UPDATED, `StepMeans`)
