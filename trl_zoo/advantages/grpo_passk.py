"""verl's `grpo_passk` (Tang et al., arXiv:2503.19595): the leave-one-out pass@G advantage, only the group's best
completion gets one.

    Â_i = max_j R_j − max_{j≠i} R_j        over i's group (scale_rewards="group": divided by std R + ε)

so the best completion gets R_max − R_second and every other one 0; a tie for the best gives the whole group 0. This
is verl's `compute_grpo_passk_outcome_advantage` (verl/trainer/ppo/core_algos.py), pass@k with k = the group size,
not the analytical pass@k advantage of arXiv:2508.10751 (`passk.py`), which gives every completion an advantage.
verl's `norm_adv_by_std_in_grpo` is ``scale_rewards``: "group" divides by the group's std + ε (verl: the unbiased
std, ``advantage_std_unbiased``), "none" by nothing, "batch" by the batch's std, as grpo.

Where verl raises (a group of one), a completion with no scorable sibling gets NaN, as RLOO (the trainer's 0);
unscorable completions (NaN) are left out of the maxima and get NaN.

Tests: tests/test_passk.py (against a transcription of verl's function, ties, NaN and unequal groups),
tests/test_unequal_groups.py.
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from .base import AdvantageInputs, nan_std

Tensor = torch.Tensor


@ADVANTAGES.register(
    "grpo_passk",
    description="verl's pass@k (k = group size): only a group's best completion gets R_max − R_second (÷ std + ε)",
    source="Tang et al., arXiv:2503.19595 (verl's grpo_passk)",
)
def grpo_passk_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = max_j R_j − max_{j≠i} R_j over the scorable completions of i's group, scaled per ``scale_rewards``."""
    grid = inputs.grouped
    scored = ~torch.isnan(grid)
    if grid.size(1) < 2:  # groups of one: no sibling
        return inputs.rewards * float("nan")
    top = grid.masked_fill(~scored, float("-inf")).topk(2, dim=1)
    best, second = top.values[:, :1], top.values[:, 1:]
    is_best = torch.arange(grid.size(1), device=grid.device) == top.indices[:, :1]
    advantages = torch.where(is_best, best - second, torch.zeros_like(grid))
    lonely = scored.sum(1, keepdim=True) < 2
    advantages = advantages.masked_fill(lonely | ~scored, float("nan"))
    advantages = inputs.ungroup(advantages)

    scale = getattr(args, "scale_rewards", "group")
    if scale == "none":
        return advantages
    if scale == "group":
        std = nan_std(grid, dim=1, unbiased=args.advantage_std_unbiased, keepdim=True).expand_as(grid)
        std = inputs.ungroup(std)
    elif scale == "batch":
        std = nan_std(inputs.rewards, unbiased=args.advantage_std_unbiased).expand_as(inputs.rewards)
    else:
        raise ValueError(f"scale_rewards: got {scale!r}; use 'group', 'batch' or 'none'.")
    return torch.where(advantages == 0, advantages, advantages / (std + args.advantage_epsilon))
