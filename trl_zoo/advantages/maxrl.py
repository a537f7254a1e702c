"""MaxRL (arXiv:2602.02710): the log pass rate's gradient; rewards ≥ 0 (a pass rate).

    Â_i = (R_i − mean R) / mean R   where mean R > 0, else 0        mean over i's group

Tests: tests/test_advantages.py, tests/test_unequal_groups.py (groups of unequal size).
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from .base import AdvantageInputs, group_mean

Tensor = torch.Tensor


@ADVANTAGES.register(
    "maxrl",
    description="(R − group mean) / group mean, 0 without success: log pass rate, a prompt weighted 1/p (R ≥ 0)",
    source="MaxRL, arXiv:2602.02710",
    nonnegative_rewards=True,
)
def maxrl_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """MaxRL (Tajwar et al., arXiv:2602.02710): maximise log p(x), p the pass rate, instead of p.

    With K successes among the N = G completions of a prompt and binary rewards, the paper's estimator of the
    order-N truncated maximum-likelihood gradient (its Theorems 1 and 2) averages the score over the successes and
    subtracts the zero-mean control variate (1/N) Σ_i S_i:

        ĝ = (1/K) Σ_i r_i S_i − (1/N) Σ_i S_i = (1/N) Σ_i (r_i − r̄)/r̄ · S_i,    r̄ = K/N,   ĝ = 0 if K = 0

    so Â_i = (R_i − mean R) / mean R: the plain group mean (not leave-one-out), divided by the mean instead of
    GRPO's std, which weights a prompt by 1/p (hard prompts count more). A group with mean 0 (no success) carries
    no signal, Â = 0, as in the paper (ĝ = 0 for K = 0) and prime-rl. The authors' code (verl's
    `compute_maxrl_outcome_advantage`) divides by mean + 1e-6; here the division is exact where mean > 0, and a
    group of equal rewards gets exactly 0. S_i is the whole sequence's score: the paper's ĝ is
    `loss_aggregation="sequence_sum"` with a ratio-free loss; its own runs keep verl's PPO loss with a token mean.

    Groups of unequal size (``group_sizes``): mean R is over the n_p rows of i's own group, N = n_p in ĝ; a group of
    one gets Â = 0 (R = mean R).

    Rewards must be ≥ 0 (a pass rate: canonically 1 pass, 0 fail); with negative rewards the mean no longer bounds
    |Â| (≤ G − 1 for R ≥ 0) and the estimator raises. NaN rewards are left out of the mean and come back NaN.
    """
    scorable = inputs.rewards[~torch.isnan(inputs.rewards)]
    if scorable.numel() and bool((scorable < 0).any()):
        raise ValueError(
            f"advantage_estimator: 'maxrl' divides by the group's mean reward, a pass rate, and needs rewards ≥ 0; "
            f"got {scorable.min().item():.4g}. Use rewards in [0, 1] (1 = pass), or another estimator (e.g. 'grpo')."
        )
    mean = group_mean(inputs)
    centred = inputs.rewards - mean
    has_success = mean > 0
    return torch.where(has_success, centred / mean.where(has_success, torch.ones_like(mean)), centred * 0.0)
