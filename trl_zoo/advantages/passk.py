"""Pass@k training (Chen et al., arXiv:2508.10751): the analytical advantage of the pass@k objective.

A group of n completions stands for all its C(n, k) subsets of k; a subset's reward is its best one, max_{i∈S} R_i
(pass@k: one right answer among k is enough). Each completion gets the mean group-normalised reward of the subsets
that hold it:

    R̄ = mean_S max_S R,    σ = std_S max_S R (population, over all C(n, k) subsets)
    Â_i = ( mean_{S ∋ i} max_S R  −  R̄ ) / σ

With pass/fail rewards, N_neg failures among n, this is the paper's closed form (its analytical derivation; the
authors' code: RUCAIBox/Passk_Training, code/passk_adv.py):

    R̄ = 1 − C(N_neg, k) / C(n, k),    σ = sqrt( R̄ (1 − R̄) )
    Â_pos = (1 − R̄) / σ,               Â_neg = ( 1 − R̄ − C(N_neg − 1, k − 1) / C(n − 1, k − 1) ) / σ

k = 1 is GRPO with the population std. Where paper and code differ, this file reads:

- Rewards other than 0 and 1: the closed form is for pass/fail only (the authors' code leaves such a reward as its
  own advantage). Here the subset means above are computed exactly for any rewards, the paper's definition of
  pass@k as the expected maximum reward: with R_(1) ≤ … ≤ R_(n) sorted, rank j is the best of C(j − 1, k − 1)
  subsets, so R̄ = Σ_j C(j−1, k−1) R_(j) / C(n, k), and the subsets holding rank j have the mean best
  ( C(j−1, k−1) R_(j) + Σ_{m>j} C(m−2, k−2) R_(m) ) / C(n−1, k−1). For pass/fail rewards it is the closed form.
- σ: divided as σ + ε (``advantage_epsilon``; the authors' code adds 1e-6, the paper nothing). A group whose subsets
  all have the same best (all rewards equal, or every k-subset holds a success: N_neg < k) has σ = 0 and gets
  Â = 0 exactly, as in the paper's limit and the code. ``scale_rewards`` is not read: σ is the estimator's own.
- Unscorable completions (NaN) are left out: n and N_neg count the scorable ones, their own Â is NaN. k = n leaves
  one subset, so Â = 0 (the config refuses k ≥ num_generations); a group smaller than k (unequal groups, or NaNs)
  takes k = n: Â = 0.

verl's `grpo_passk` is another estimator (only the best completion gets max − second max): `grpo_passk.py`.

Tests: tests/test_passk.py (the closed form, the authors' code, subsets enumerated, NaN and unequal groups, a
training step), tests/test_unequal_groups.py.
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from ..specs import PluginField
from .base import AdvantageInputs

Tensor = torch.Tensor

K = PluginField(
    "passk_k", int, 4,
    "Pass@k training (advantage_estimator='passk'): k of pass@k, the size of the subsets of a group whose best "
    "reward is the reward (1 is GRPO with the population std); below num_generations",
    low=1,
)


def check_k(args) -> None:
    if args.passk_k >= args.num_generations:
        raise ValueError(
            f"passk_k: {args.passk_k} is not below num_generations={args.num_generations}: a group of n completions "
            f"has one subset of k = n (and none of k > n), so every advantage would be 0; set passk_k < "
            f"{args.num_generations} or raise num_generations."
        )


def log_comb(n: Tensor, k: Tensor) -> Tensor:
    """log C(n, k), elementwise; −inf where C(n, k) = 0 (k < 0 or k > n)."""
    valid = (k >= 0) & (k <= n)
    n, k = n.clamp(min=0), k.clamp(min=0)
    value = torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma((n - k).clamp(min=0) + 1)
    return torch.where(valid, value, torch.full_like(value, float("-inf")))


@ADVANTAGES.register(
    "passk",
    description="pass@k training: each completion's mean over the k-subsets holding it of the group-normalised best "
    "reward (the paper's closed form for pass/fail rewards)",
    source="Pass@k Training, arXiv:2508.10751",
    fields=(K,),
    validate=check_k,
)
def passk_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = ( mean_{S ∋ i} max_S R − mean_S max_S R ) / (std_S max_S R + ε) over the k-subsets S of i's group
    (module docstring), in float64."""
    grid = inputs.grouped.double()
    scored = ~torch.isnan(grid)
    n = scored.sum(1, keepdim=True).double()
    k = n.clamp(max=args.passk_k)
    values, order = grid.nan_to_num(nan=float("inf")).sort(dim=1)  # the scorable rewards first, ascending
    rank = torch.arange(1, grid.size(1) + 1, dtype=grid.dtype, device=grid.device).expand_as(grid)
    ranked = rank <= n
    values = values.where(ranked, torch.zeros_like(values))

    best_of = (log_comb(rank - 1, k - 1) - log_comb(n, k)).exp() * ranked  # P(rank j is a k-subset's best)
    mean = (best_of * values).sum(1, keepdim=True)
    std = (best_of * (values - mean) ** 2).sum(1, keepdim=True).sqrt()
    holding = log_comb(n - 1, k - 1)
    as_best = (log_comb(rank - 1, k - 1) - holding).exp()
    below_best = (log_comb(rank - 2, k - 2) - holding).exp() * values  # rank m the best of a subset with j < m
    above = below_best.flip(1).cumsum(1).flip(1) - below_best  # Σ_{m>j}
    held_mean = as_best * values + above
    advantages = (held_mean - mean) / (std + args.advantage_epsilon)

    last = (n - 1).clamp(min=0).long()
    kth = (k - 1).clamp(min=0).long()
    single_best = values.gather(1, kth) == values.gather(1, last)  # every k-subset has the same best: σ = 0
    advantages = torch.where(single_best, torch.zeros_like(advantages), advantages)
    unsorted = torch.empty_like(advantages).scatter_(1, order, advantages)
    unsorted = unsorted.masked_fill(~scored, float("nan"))
    return inputs.ungroup(unsorted).to(inputs.rewards.dtype)
