"""Finite-safe exponentials of log-ratios, shared by the losses and the KL estimators; `nonfinite_names`, which of
named tensors hold NaN or ±inf; `short_repr`, a value as one-line messages show it (cut when large).

Tests: tests/test_numerics.py, tests/test_error_lines.py (short_repr), tests/test_bad_input_more.py and
tests/test_resume_refusals.py (nonfinite_names, through the weight and checkpoint checks).
"""

import reprlib

import torch

MAX_LOG_RATIO = 20.0  # e^20 ≈ 4.9e8: r·Â, r² and their sums stay finite in float32


def importance_ratio(log_weights: torch.Tensor) -> torch.Tensor:
    """exp(δ), exact in value and gradient for |δ| ≤ MAX_LOG_RATIO; beyond, the value is capped at e^{±MAX_LOG_RATIO}
    and the gradient passes straight through (that of the capped ratio), so log-ratios of ±100 stay finite."""
    capped = log_weights + (log_weights.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO) - log_weights).detach()
    return torch.exp(capped)


def nonfinite_names(named_tensors) -> list[str]:
    """The names of the floating-point tensors that hold NaN or ±inf, with one host sync: per tensor Σ x in float32,
    which is finite iff every x is, for any values short of float32's range (weights, optimizer moments). A sharded
    tensor (FSDP's DTensor) is checked on this process's shard."""
    named = []
    for name, tensor in named_tensors:
        tensor = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        if tensor.numel() and tensor.is_floating_point():
            named.append((name, tensor))
    if not named:
        return []
    device = named[0][1].device
    with torch.no_grad():
        sums = torch.stack([tensor.detach().sum(dtype=torch.float32).to(device) for _, tensor in named])
    return [name for (name, _), finite in zip(named, torch.isfinite(sums).tolist()) if not finite]


def short_repr(value, limit: int = 80) -> str:
    """`repr(value)` on one line (whitespace runs collapsed), cut to `limit` characters with "…": a value inside an
    error message must not turn the one line into many, or into megabytes."""
    shorter = reprlib.Repr()
    shorter.maxlevel, shorter.maxstring, shorter.maxother = 3, limit, limit
    shorter.maxlist = shorter.maxtuple = shorter.maxdict = shorter.maxset = 16
    text = " ".join(shorter.repr(value).split())  # containers are shortened before their repr is built
    return text if len(text) <= limit else text[: limit - 1] + "…"
