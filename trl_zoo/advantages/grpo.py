"""GRPO (DeepSeekMath, arXiv:2402.03300), TRL's default estimator:

    Â_i = (R_i − mean R) / (std R + ε)        mean and std over i's group (scale_rewards="group")

`scale_rewards="batch"` takes the std over the whole batch, `"none"` divides by nothing (TRL's behaviour).

Tests: tests/test_advantages.py, tests/test_unequal_groups.py (groups of unequal size).
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from .base import AdvantageInputs, group_mean, nan_std

Tensor = torch.Tensor


@ADVANTAGES.register(
    "grpo",
    description="(R − group mean) / (group std + ε); TRL's default (scale_rewards picks group/batch/none)",
    source="GRPO, arXiv:2402.03300",
)
def grpo_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = (R_i − mean R) / (std R + ε), mean and std over the group of i (``scale_rewards="group"``).

    Groups of unequal size (``group_sizes``): Â_i = (R_i − mean_p R) / (std_p R + ε) with mean_p and std_p over the
    n_p rows of i's own group (std unbiased, ÷ (n_p − 1), or population, ÷ n_p, per ``advantage_std_unbiased``). A
    group of one row has std 0 as TRL's num_generations=1: its Â = R_i − R_i = 0 exactly, even with ε = 0 (NaN for
    a NaN reward). ``scale_rewards="batch"`` divides by the std over all N rewards and ``"none"`` by nothing, as
    for equal groups.
    """
    centred = inputs.rewards - group_mean(inputs)
    scale = getattr(args, "scale_rewards", "group")
    if scale == "none":
        return centred
    unbiased = args.advantage_std_unbiased
    if scale == "group":
        if inputs.group_sizes is None and inputs.num_generations == 1:
            return centred  # TRL: std 0 for singleton groups (eval with num_generations_eval=1)
        grouped = inputs.grouped
        std = inputs.ungroup(nan_std(grouped, dim=1, unbiased=unbiased, keepdim=True).expand_as(grouped))
        if inputs.group_sizes is not None:  # a group of one: std 0, as above
            return torch.where(inputs.row_group_sizes == 1, centred, centred / (std + args.advantage_epsilon))
    elif scale == "batch":
        std = nan_std(inputs.rewards, unbiased=unbiased).expand_as(inputs.rewards)
    else:
        raise ValueError(f"scale_rewards: got {scale!r}; use 'group', 'batch' or 'none'.")
    return centred / (std + args.advantage_epsilon)
