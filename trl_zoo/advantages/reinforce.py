"""REINFORCE (Williams 1992) without a baseline.

    Â_i = R_i

Tests: tests/test_advantages.py, tests/test_unequal_groups.py (groups of unequal size).
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from .base import AdvantageInputs

Tensor = torch.Tensor


@ADVANTAGES.register("reinforce", description="R (no baseline)", source="Williams 1992")
def reinforce_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = R_i; no group enters, so ``group_sizes`` changes nothing."""
    return inputs.rewards.clone()
