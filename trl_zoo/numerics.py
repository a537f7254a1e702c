"""Finite-safe exponentials of log-ratios, shared by the losses and the KL estimators."""

import torch

MAX_LOG_RATIO = 20.0  # e^20 ≈ 4.9e8: r·Â, r² and their sums stay finite in float32


def importance_ratio(log_weights: torch.Tensor) -> torch.Tensor:
    """exp(δ), exact in value and gradient for |δ| ≤ MAX_LOG_RATIO; beyond, the value is capped at e^{±MAX_LOG_RATIO}
    and the gradient passes straight through (that of the capped ratio), so log-ratios of ±100 stay finite."""
    capped = log_weights + (log_weights.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO) - log_weights).detach()
    return torch.exp(capped)
