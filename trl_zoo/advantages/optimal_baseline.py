"""The variance-minimising baseline (Weaver & Tao 2001; Greensmith et al. 2004), the score norm in logit space.

    Â_i = R_i − b*,   b* = Σ_j ‖s_j‖² R_j / Σ_j ‖s_j‖²        j over i's group

‖s_j‖² is the squared norm of the score ∇ log π(y_j) taken in logit space: for the logits z_t of step t,
∇_{z_t} log π(y_t) = e_{y_t} − π_t, so ‖s_j‖² = Σ_t ‖e_{y_t} − π_t‖² = Σ_t (1 − 2π_t(y_t) + Σ_v π_t(v)²).
b* = E[R ‖s‖²] / E[‖s‖²] is the variance-minimising baseline; in logit space it needs no gradient pass, only
Σ_v π(v)² per token, which TRL's fused LM head computes without the full logits (`score_sq_norms`, from the
trainer's ‖s‖² pass, components/advantages.py).

Tests: tests/test_advantages.py, tests/test_unequal_groups.py (groups of unequal size).
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from .base import AdvantageInputs, weighted_group_baseline

Tensor = torch.Tensor


@ADVANTAGES.register(
    "optimal_baseline",
    description="R − b*, b* = Σ ‖s_j‖² R_j / Σ ‖s_j‖² (variance-minimising, score norm in logit space)",
    source="Weaver & Tao 2001; Greensmith et al. 2004",
    needs=("score_sq_norms",),
)
def optimal_baseline_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = R_i − Σ_j ‖s_j‖² R_j / Σ_j ‖s_j‖² over i's group; with ``group_sizes`` j runs over the n_p rows of i's
    own group (a group of one gets Â = 0)."""
    if inputs.score_sq_norms is None:
        raise ValueError("optimal_baseline needs score_sq_norms (‖s‖² per completion); pass score_sq_norms=.")
    return inputs.rewards - weighted_group_baseline(inputs, inputs.score_sq_norms)


def score_sq_norms(logps: Tensor, log_sum_sq_probs: Tensor, mask: Tensor) -> Tensor:
    """‖s_i‖² = Σ_t m_t (1 − 2π_t(y_t) + Σ_v π_t(v)²) from log π(y_t) and log Σ_v π(v)², (N,)."""
    per_token = 1.0 - 2.0 * logps.exp() + log_sum_sq_probs.exp()
    return (per_token.clamp(min=0.0) * mask).sum(-1)
