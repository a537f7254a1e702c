"""KL estimators of KL(π_θ ‖ π_ref) per token, with d = log π_θ − log π_ref (Schulman's k1/k2/k3).

    k1 = d                 unbiased, can be negative
    k2 = d² / 2            biased, low variance, ≥ 0
    k3 = e^{−d} + d − 1    unbiased, ≥ 0 (GRPO's and TRL's)
"""

import torch

from .registry import KL_ESTIMATORS

Tensor = torch.Tensor


@KL_ESTIMATORS.register("k1", description="d = log π_θ − log π_ref (unbiased, may be negative)", source="Schulman 2020")
def k1(logps: Tensor, ref_logps: Tensor) -> Tensor:
    return logps - ref_logps


@KL_ESTIMATORS.register("k2", description="d²/2 (low variance, biased)", source="Schulman 2020")
def k2(logps: Tensor, ref_logps: Tensor) -> Tensor:
    return (logps - ref_logps) ** 2 / 2


@KL_ESTIMATORS.register("k3", description="e^{−d} + d − 1 (unbiased, ≥ 0; GRPO's)", source="Schulman 2020; GRPO")
def k3(logps: Tensor, ref_logps: Tensor) -> Tensor:
    return torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
