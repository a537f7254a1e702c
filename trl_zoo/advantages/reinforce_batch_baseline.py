"""REINFORCE (Williams 1992) with the batch's mean reward as baseline.

    Â_i = R_i − mean over the whole batch of R

Tests: tests/test_advantages.py, tests/test_unequal_groups.py (groups of unequal size).
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from .base import AdvantageInputs

Tensor = torch.Tensor


@ADVANTAGES.register(
    "reinforce_batch_baseline", description="R − mean of R over the whole batch", source="Williams 1992"
)
def reinforce_batch_baseline_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = R_i − mean of the N rewards; the baseline is the batch's, so ``group_sizes`` changes nothing."""
    return inputs.rewards - torch.nanmean(inputs.rewards)
