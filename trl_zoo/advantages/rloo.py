"""RLOO (Ahmadian et al., arXiv:2402.14740): the leave-one-out baseline.

    Â_i = R_i − mean_{j≠i} R_j  =  G/(G−1) · (R_i − mean R)        over i's group

Tests: tests/test_advantages.py, tests/test_unequal_groups.py (groups of unequal size).
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from .base import AdvantageInputs, exact_for_constant_groups

Tensor = torch.Tensor


@ADVANTAGES.register(
    "rloo", description="leave-one-out: R_i − mean_{j≠i} R_j", source="RLOO (Ahmadian et al.), arXiv:2402.14740"
)
def rloo_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = R_i − Σ_{j≠i} R_j / (n − 1) over the scorable others j of i's group.

    With ``group_sizes``, n = n_p, i's own group's size: Â_i = n_p/(n_p − 1) · (R_i − mean_p R). A group of one
    row has no other completion, hence no baseline: Â = NaN, which the trainer turns into 0 (the rule for a
    completion whose siblings are all unscorable, and for num_generations=1).
    """
    rewards = inputs.grouped
    scorable = (~torch.isnan(rewards)).sum(1, keepdim=True).to(rewards.dtype)
    others = torch.nansum(rewards, 1, keepdim=True) - rewards
    # a completion with no scorable sibling has no baseline: NaN, zeroed by the trainer
    baseline = others / (scorable - 1).where(scorable > 1, torch.full_like(scorable, float("nan")))
    baseline = torch.where(scorable > 1, exact_for_constant_groups(baseline, rewards), baseline)
    return inputs.ungroup(rewards - baseline)
