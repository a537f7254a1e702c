"""Dr. GRPO (arXiv:2503.20783): the group mean as baseline, no std scaling.

    Â_i = R_i − mean R        over i's group

Tests: tests/test_advantages.py, tests/test_unequal_groups.py (groups of unequal size).
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from .base import AdvantageInputs, group_mean

Tensor = torch.Tensor


@ADVANTAGES.register("dr_grpo", description="R − group mean (no std scaling)", source="Dr. GRPO, arXiv:2503.20783")
def dr_grpo_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = R_i − mean R over i's group; with ``group_sizes``, the mean over the n_p rows of i's own group (a group
    of one gets Â = 0)."""
    return inputs.rewards - group_mean(inputs)
