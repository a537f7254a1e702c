"""KL estimators of KL(π_θ ‖ π_ref) per token, with d = log π_θ − log π_ref (Schulman's k1/k2/k3), and the
adaptive KL coefficient.

    k1 = d                 unbiased, can be negative
    k2 = d² / 2            biased, low variance, ≥ 0
    k3 = e^{−d} + d − 1    unbiased, ≥ 0 (GRPO's and TRL's)

Adaptive β, after each optimizer step with the measured per-token KL, by one of two rules:

    doubling (PPO's adaptive KL penalty, arXiv:1707.06347 §4):
        KL > 1.5·target → β ← 2β;  KL < target/1.5 → β ← β/2;  otherwise β is kept
    proportional (Ziegler et al., arXiv:1909.08593 §2.2, a log-space proportional controller):
        e = clip(KL/target − 1, −0.2, 0.2);  β ← β·(1 + K_β·e),  K_β = 0.1 in the paper

`kl_target` (the KL to the reference) uses the rule `kl_controller` names; `ppo_kl` (the KL to the sampling
policy) uses the doubling rule, as its paper does.

Where the KL goes (`kl_placement`): "loss" adds β·KL_t to every token's loss (GRPO); "reward" subtracts
β Σ_t KL_t from the completion's reward before the advantage estimator (classic RLHF, RLOO), see
`components/kl_control.py`.
"""

import torch

from .numerics import importance_ratio
from .registry import KL_ESTIMATORS

Tensor = torch.Tensor


@KL_ESTIMATORS.register(
    "k1", description="d = log π_θ − log π_ref (unbiased, may be negative)", source="Schulman 2020"
)
def k1(logps: Tensor, ref_logps: Tensor) -> Tensor:
    return logps - ref_logps


@KL_ESTIMATORS.register("k2", description="d²/2 (low variance, biased)", source="Schulman 2020")
def k2(logps: Tensor, ref_logps: Tensor) -> Tensor:
    return (logps - ref_logps) ** 2 / 2


@KL_ESTIMATORS.register("k3", description="e^{−d} + d − 1 (unbiased, ≥ 0; GRPO's)", source="Schulman 2020; GRPO")
def k3(logps: Tensor, ref_logps: Tensor) -> Tensor:
    return importance_ratio(ref_logps - logps) - (ref_logps - logps) - 1


def adaptive_kl_coefficient(beta: float, observed_kl: float, target: float) -> float:
    """β after one step of the doubling/halving controller: 2β above 1.5·target, β/2 below target/1.5."""
    if observed_kl > 1.5 * target:
        return beta * 2.0
    if observed_kl < target / 1.5:
        return beta / 2.0
    return beta


def proportional_kl_coefficient(beta: float, observed_kl: float, target: float, gain: float = 0.1) -> float:
    """β after one step of Ziegler et al.'s controller: β·(1 + gain·clip(KL/target − 1, −0.2, 0.2))."""
    error = min(max(observed_kl / target - 1.0, -0.2), 0.2)
    return beta * (1.0 + gain * error)

