"""PPO-clip policy term: GRPO, BNPO, Dr. GRPO, DAPO and LUSPO share it and differ only in aggregation.

    r = π_θ / π_old  (token, or the sequence's geometric mean with importance_sampling_level="sequence")
    ℓ = min( r·Â, clip(r, 1 − ε_low, 1 + ε_high)·Â )            loss = −ℓ
    dual clip (c > 1, Â < 0):  ℓ = max(ℓ, c·Â)
    two-sided (INTELLECT-2, TRL's `delta`): the unclipped r is capped at δ first.

GRPO (DeepSeekMath, arXiv:2402.03300) aggregates (1/G)Σ_i (1/T_i)Σ_t; BNPO a local token mean; DAPO
(arXiv:2503.14476) a token mean over the generation batch; Dr. GRPO (arXiv:2503.20783) Σ/(G·T_max); LUSPO
(arXiv:2602.05261) the per-sequence sum.

Tests: tests/test_parity.py (grpo, bnpo, dr_grpo, dapo, luspo against TRL), tests/test_losses_math.py,
tests/test_validation.py and tests/test_hyperparameter_ranges.py (clip ranges, dual_clip).
"""

import warnings

import torch

from ..registry import LOSSES
from ..specs import check_clipped_objective
from .base import (
    PolicyBatch,
    PolicyTerm,
    clip_fraction_metrics,
    importance_log_weights,
    importance_ratio,
    ratio_metrics,
)


def epsilon_bounds(args) -> tuple[float, float]:
    """(ε_low, ε_high) with TRL's rule: epsilon_high defaults to epsilon."""
    high = args.epsilon_high if getattr(args, "epsilon_high", None) is not None else args.epsilon
    return args.epsilon, high


def ppo_clip_loss(batch: PolicyBatch, args) -> PolicyTerm:
    ratio = importance_ratio(importance_log_weights(batch, getattr(args, "importance_sampling_level", "token")))
    return clipped_surrogate(ratio, batch.advantages, args)


def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, args) -> PolicyTerm:
    """−min(r·Â, clip(r)·Â) (with `delta` and `dual_clip`) for any ratio: token (B, T) or sequence (B, 1)."""
    eps_low, eps_high = epsilon_bounds(args)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    unclipped = ratio if getattr(args, "delta", None) is None else torch.clamp(ratio, max=args.delta)
    objective = torch.min(unclipped * advantages, clipped * advantages)
    dual_clip = getattr(args, "dual_clip", None)
    if dual_clip is not None:
        objective = torch.where(advantages < 0, torch.max(objective, dual_clip * advantages), objective)
    metrics = clip_fraction_metrics(ratio, advantages, 1 - eps_low, 1 + eps_high)
    metrics.update(ratio_metrics(ratio))
    return PolicyTerm(-objective, metrics)


def validate_dapo(args) -> None:
    check_clipped_objective(args)
    if args.epsilon_high is not None and args.epsilon_high < args.epsilon:
        warnings.warn(
            f"epsilon_high: {args.epsilon_high} < epsilon={args.epsilon} clips the upside tighter than the downside, "
            f"the opposite of DAPO's clip-higher; use epsilon_high ≥ epsilon (DAPO: ε=0.2, ε_high=0.28).",
            stacklevel=2,
        )


_SOURCES = {
    "grpo": ("sequence_mean", "DeepSeekMath, arXiv:2402.03300", "PPO clip, mean of per-sequence token means"),
    "bnpo": ("token_mean_local", "TRL's loss_type, no paper", "PPO clip, token mean over the local micro-batch"),
    "dr_grpo": (
        "token_sum_over_max_length", "Dr. GRPO, arXiv:2503.20783", "PPO clip, token sum / (G · max_completion_length)",
    ),
    "dapo": (
        "token_mean_global", "DAPO, arXiv:2503.14476",
        "PPO clip, token mean over the batch; clip-higher needs epsilon_high 0.28 (configs/dapo.yaml)",
    ),
    "luspo": ("sequence_sum", "LUSPO, arXiv:2602.05261", "PPO clip, per-sequence sum (length-unbiased GSPO)"),
}

for _name, (_aggregation, _source, _description) in _SOURCES.items():
    LOSSES.add(
        _name,
        ppo_clip_loss,
        description=_description,
        source=_source,
        aggregation=_aggregation,
        zero_advantage_is_inert=True,
        validate=validate_dapo if _name == "dapo" else check_clipped_objective,
    )
