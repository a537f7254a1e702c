"""CISPO: clip the importance-sampling weight, never the gradient (MiniMax-M1, arXiv:2506.13585).

    J = Σ_{i,t} sg( clip(r_{i,t}, 1 − ε_low^IS, ε_max) ) · Â_{i,t} · log π_θ(y_{i,t}) / Σ_i T_i

Every token keeps the gradient Â·w·∇log π with w > 0, whatever its ratio. By default the weight is only capped
above at the absolute value `epsilon_high`, as in the paper's §3 (no lower bound) and TRL; TRL recommends a cap of
5.0 (ScaleRL, arXiv:2510.13786, found 4, 5 and 8 alike). `cispo_epsilon_low` adds a floor, the two-sided clip
[1 − ε_low^IS, ε_high] of docs/formulas.md.

Tests: tests/test_losses_math.py (the capped IS weight, with and without a floor), tests/test_parity.py (against TRL's
cispo), tests/test_validation.py (the cap).
"""

import math
import warnings

import torch

from ..numerics import MAX_LOG_RATIO
from ..registry import LOSSES
from ..specs import PluginField, warn_inert_clip
from .base import PolicyBatch, PolicyTerm, importance_log_weights, importance_ratio, ratio_metrics
from .ppo_clip import epsilon_bounds

EPSILON_LOW = PluginField(
    "cispo_epsilon_low", float, None,
    "CISPO lower IS-weight clip: the weight is clipped to [1 − cispo_epsilon_low, epsilon_high]. None keeps TRL's "
    "one-sided cap (weights capped above at the absolute value epsilon_high).",
    low=0, high=1, high_open=True,
)


def validate_cispo(args) -> None:
    """ε_high (or ε) is CISPO's absolute cap on the IS weight, not the clip range 1 ± ε."""
    _, cap = epsilon_bounds(args)
    if cap <= 0:
        raise ValueError(
            f"epsilon_high: CISPO caps the IS weight at the absolute value epsilon_high (or epsilon), got {cap}, "
            f"which zeroes every weight; use a cap > 0 (TRL recommends 5.0)."
        )
    if cap < 1:
        warnings.warn(
            f"loss_type='cispo' caps the IS weight at the absolute value epsilon_high={cap} (TRL falls back to "
            f"epsilon when epsilon_high is unset): below 1, even on-policy tokens (ratio 1) get weight {cap}, which "
            f"only scales the gradient down. Set epsilon_high ≥ 1 (TRL recommends 5.0), e.g. via configs/cispo.yaml.",
            stacklevel=2,  # GRPOConfig.validate: one place however often a config is validated, so it shows once
        )
    if args.cispo_epsilon_low is not None and cap < 1 - args.cispo_epsilon_low:
        raise ValueError(
            f"cispo_epsilon_low: the IS-weight range [1 − {args.cispo_epsilon_low}, {cap}] is inverted "
            f"(epsilon_high is CISPO's absolute cap); raise epsilon_high to ≥ {1 - args.cispo_epsilon_low}."
        )
    warn_inert_clip("epsilon_high", cap, math.exp(MAX_LOG_RATIO), "CISPO's cap on the IS weight")


@LOSSES.register(
    "cispo",
    description="clipped IS-weight (stop-grad) × Â × log π; no token loses its gradient",
    source="MiniMax-M1, arXiv:2506.13585",
    aggregation="token_mean_global",
    zero_advantage_is_inert=True,
    validate=validate_cispo,
    fields=(EPSILON_LOW,),
)
def cispo_loss(batch: PolicyBatch, args) -> PolicyTerm:
    _, cap = epsilon_bounds(args)
    ratio = importance_ratio(importance_log_weights(batch, getattr(args, "importance_sampling_level", "token")))
    floor = None if getattr(args, "cispo_epsilon_low", None) is None else 1 - args.cispo_epsilon_low
    weight = torch.clamp(ratio, min=floor, max=cap).detach()
    metrics = {"cispo_clip_ratio": ((ratio > cap) & (batch.advantages > 0)).float()}
    if floor is not None:
        metrics["cispo_clip_ratio_low"] = ((ratio < floor) & (batch.advantages < 0)).float()
    metrics.update(ratio_metrics(ratio))
    return PolicyTerm(-weight * batch.advantages * batch.logps, metrics)
