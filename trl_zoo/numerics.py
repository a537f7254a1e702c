"""Finite-safe exponentials of log-ratios, shared by the losses and the KL estimators; `short_repr`, a value as
one-line messages show it (cut when large).

Tests: tests/test_numerics.py, tests/test_error_lines.py (short_repr).
"""

import reprlib

import torch

MAX_LOG_RATIO = 20.0  # e^20 ≈ 4.9e8: r·Â, r² and their sums stay finite in float32


def importance_ratio(log_weights: torch.Tensor) -> torch.Tensor:
    """exp(δ), exact in value and gradient for |δ| ≤ MAX_LOG_RATIO; beyond, the value is capped at e^{±MAX_LOG_RATIO}
    and the gradient passes straight through (that of the capped ratio), so log-ratios of ±100 stay finite."""
    capped = log_weights + (log_weights.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO) - log_weights).detach()
    return torch.exp(capped)


def short_repr(value, limit: int = 80) -> str:
    """`repr(value)` on one line (whitespace runs collapsed), cut to `limit` characters with "…": a value inside an
    error message must not turn the one line into many, or into megabytes."""
    shorter = reprlib.Repr()
    shorter.maxlevel, shorter.maxstring, shorter.maxother = 3, limit, limit
    shorter.maxlist = shorter.maxtuple = shorter.maxdict = shorter.maxset = 16
    text = " ".join(shorter.repr(value).split())  # containers are shortened before their repr is built
    return text if len(text) <= limit else text[: limit - 1] + "…"
