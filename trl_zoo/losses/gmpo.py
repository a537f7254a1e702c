"""GMPO: geometric-mean policy optimisation (arXiv:2507.20673).

Per token, clip the log-ratio δ = log π_θ − log π_old in log space, sign-aware (pessimistic like PPO):

    Â > 0:  δ̃ = min(δ, clamp(δ, −ε, ε))        Â < 0:  δ̃ = max(δ, clamp(δ, −ε, ε))
    ρ̄_i = exp( Σ_t m δ̃_t / T_i )                J = (1/G) Σ_i ρ̄_i · Â_i       loss_i = −ρ̄_i · Â_i

Â_i is the sequence's advantage; token advantages (B, T) are reduced to their masked mean (as in GSPO), which also
picks the pessimistic side of every token's clip.

The geometric mean is less sensitive to outlier tokens than GRPO's arithmetic mean: unclipped,
|J_GMPO| ≤ |J_GRPO| by AM–GM. Paper default ε = 0.4 (`gmpo_epsilon`).

Tests: tests/test_losses_math.py (against GRPO), tests/test_rspo.py (RSPO = GMPO when γ ≡ 1),
tests/test_hyperparameter_ranges.py, tests/test_table_fields.py.
"""

import torch

from ..numerics import MAX_LOG_RATIO, importance_ratio
from ..registry import LOSSES
from ..specs import PluginField, check_clip_range, warn_inert_clip
from .base import PolicyBatch, PolicyTerm, ratio_metrics
from .gspo import sequence_advantages


def clipped_log_ratio(batch: PolicyBatch, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Sign-aware log-space clip of δ per token; returns (δ̃, where-clipped as float)."""
    delta = batch.log_ratio
    clamped = torch.clamp(delta, -epsilon, epsilon)
    clipped = torch.where(sequence_advantages(batch) > 0, torch.min(delta, clamped), torch.max(delta, clamped))
    return clipped, (clipped != delta).float()


def geometric_mean_ratio(log_ratio: torch.Tensor, batch: PolicyBatch) -> torch.Tensor:
    """ρ̄_i = exp(Σ_t m·log_ratio / T_i), shape (B, 1), capped as every importance ratio (numerics.py): an unclipped
    side of the sign-aware clip, or a one-token sequence, would otherwise overflow at log-ratios of ±100."""
    return importance_ratio((log_ratio * batch.mask).sum(-1, keepdim=True) / batch.lengths)


# also read by rspo, which declares the same field
EPSILON = PluginField(
    "gmpo_epsilon", float, 0.4, "GMPO's log-space clip range ε: δ is clipped to [−ε, ε] (paper: 0.4).",
    low=0, low_open=True,
)


def validate_gmpo(args) -> None:
    """The shared clip fields (`check_clip_range`); a log-space clip beyond the capped log-ratio warns."""
    check_clip_range(args)
    warn_inert_clip("gmpo_epsilon", args.gmpo_epsilon, MAX_LOG_RATIO, "the log-space clip range ±ε")


@LOSSES.register(
    "gmpo",
    description="geometric mean of token ratios with sign-aware log-space clip (ε = 0.4)",
    source="GMPO, arXiv:2507.20673",
    aggregation="sequence_mean",
    sequence_level=True,
    zero_advantage_is_inert=True,
    validate=validate_gmpo,
    fields=(EPSILON,),
)
def gmpo_loss(batch: PolicyBatch, args) -> PolicyTerm:
    clipped, is_clipped = clipped_log_ratio(batch, args.gmpo_epsilon)
    ratio = geometric_mean_ratio(clipped, batch)
    metrics = {"clip_ratio/region_mean": is_clipped}
    metrics.update(ratio_metrics(ratio, "gmpo/sequence_ratio"))
    return PolicyTerm(-ratio * sequence_advantages(batch), metrics)
