"""SAPO: a soft sigmoid gate instead of the hard clip (arXiv:2511.20347).

    f(r) = (4/τ)·σ(τ(r − 1)),  τ = τ_pos if Â > 0 else τ_neg      loss = −f(r)·Â
    ∂f/∂r = 4σ(1 − σ) = sech²(τ(r − 1)/2) ∈ (0, 1], equal to 1 at r = 1.

Aggregated like GRPO.

Tests: tests/test_losses_math.py (the sigmoid gate's gradient), tests/test_parity.py (against TRL's sapo),
tests/test_validation.py (temperatures).
"""

import warnings

import torch

from ..registry import LOSSES
from ..specs import check_clip_range
from .base import PolicyBatch, PolicyTerm, importance_log_weights, importance_ratio, ratio_metrics


def validate_sapo(args) -> None:
    check_clip_range(args)
    if args.sapo_temperature_pos <= 0 or args.sapo_temperature_neg <= 0:
        raise ValueError("sapo_temperature_pos / sapo_temperature_neg: temperatures τ must be > 0.")
    if args.sapo_temperature_neg < args.sapo_temperature_pos:
        warnings.warn(
            f"sapo_temperature_neg: τ_neg={args.sapo_temperature_neg} < τ_pos={args.sapo_temperature_pos}; SAPO uses "
            f"τ_neg > τ_pos (a sharper gate for negative advantages, which destabilise more); set τ_neg > τ_pos "
            f"(TRL: 1.05 and 1.0).",
            stacklevel=2,
        )


@LOSSES.register(
    "sapo",
    description="soft sigmoid gate (4/τ)σ(τ(r−1)) with τ_pos/τ_neg, GRPO aggregation",
    source="SAPO, arXiv:2511.20347",
    aggregation="sequence_mean",
    zero_advantage_is_inert=True,
    validate=validate_sapo,
)
def sapo_loss(batch: PolicyBatch, args) -> PolicyTerm:
    ratio = importance_ratio(importance_log_weights(batch, getattr(args, "importance_sampling_level", "token")))
    tau = torch.where(batch.advantages > 0, args.sapo_temperature_pos, args.sapo_temperature_neg)
    gate = torch.sigmoid(tau * (ratio - 1)) * 4 / tau
    slope = torch.sigmoid(tau * (ratio - 1))
    metrics = {"sapo/gate_mean": gate.detach(), "sapo/gate_slope_mean": (4 * slope * (1 - slope)).detach()}
    metrics.update(ratio_metrics(ratio))
    return PolicyTerm(-gate * batch.advantages, metrics)
