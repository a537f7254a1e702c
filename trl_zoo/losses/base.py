"""The loss contract: what the trainer hands a loss, and what a loss hands back.

A loss is a pure function ``loss(batch: PolicyBatch, args) -> PolicyTerm`` of tensors. It never touches the
model and never writes ``batch.state``: a loss with state to update declares ``on_optimizer_step`` in its
``LossSpec`` (``trl_zoo/specs.py``), which the trainer calls once per optimizer step. ``args`` is the trainer's
config (any object with the hyperparameter attributes the loss reads), so a loss can be called in a test with a
``SimpleNamespace``.

The returned ``PolicyTerm.loss`` is the per-token (B, T) or per-sequence (B, 1) quantity to *minimise*
(the negative objective). The trainer then applies TRL's masks (off-policy, entropy, vLLM importance-sampling
correction), adds the KL term and aggregates with the loss's aggregation (see ``aggregation.py``).

Tests: tests/test_losses_math.py and tests/test_numerics.py (every loss on hand-built batches),
tests/test_losses_extreme.py, tests/test_plugin_package.py (a third party's loss).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..numerics import MAX_LOG_RATIO, importance_ratio  # noqa: F401  (re-exported for the losses)

Tensor = torch.Tensor


@dataclass
class PolicyBatch:
    """Tensors for one micro-batch. Shapes: B sequences, T completion tokens."""

    logps: Tensor  # (B, T) log π_θ(y_t), with grad
    old_logps: Tensor  # (B, T) log π_old(y_t), no grad
    advantages: Tensor  # (B, 1) per sequence or (B, T) per token
    mask: Tensor  # (B, T) 1 for completion tokens in the loss
    ref_logps: Tensor | None = None  # (B, T) log π_ref(y_t) when a reference is used
    entropies: Tensor | None = None  # (B, T) per-token entropy of π_θ
    sampling_ratio: Tensor | None = None  # (B, T) or (B, 1) vLLM importance-sampling correction, if any
    extras: dict[str, Any] = field(default_factory=dict)  # declared extra inputs (router statistics, ...)
    state: dict[str, Any] = field(default_factory=dict)  # persistent trainer state (adaptive coefficients), read-only

    @property
    def log_ratio(self) -> Tensor:
        """δ_t = log π_θ(y_t) − log π_old(y_t)."""
        return self.logps - self.old_logps

    @property
    def lengths(self) -> Tensor:
        """T_i as (B, 1), at least 1 so empty rows never divide by zero."""
        return self.mask.sum(-1, keepdim=True).clamp(min=1.0)


@dataclass
class PolicyTerm:
    """What a loss returns.

    ``loss``: (B, T) or (B, 1), the term to minimise before masking and aggregation.
    ``metrics``: name -> (B, T) or (B, 1) tensor averaged over the mask across processes, or a
    ``(reduction, tensor)`` pair with reduction in {"mean", "min", "max", "min_seq", "max_seq"} (the last two:
    extreme over sequences of the per-sequence token mean).
    """

    loss: Tensor
    metrics: dict[str, Any] = field(default_factory=dict)


def importance_log_weights(batch: PolicyBatch, level: str = "token") -> Tensor:
    """log importance weight: token δ_t (B, T), or sequence log s_i = Σ_t m δ_t / T_i (B, 1)."""
    if level == "token":
        return batch.log_ratio
    if level == "sequence":
        return (batch.log_ratio * batch.mask).sum(-1, keepdim=True) / batch.lengths
    raise ValueError(f"importance_sampling_level: unknown value {level!r}; use 'token' or 'sequence'.")


def clip_fraction_metrics(ratio: Tensor, advantages: Tensor, low: float, high: float) -> dict[str, Any]:
    """PPO-style clip diagnostics (TRL's metric names): where the clip removed the gradient."""
    is_low = ((ratio < low) & (advantages < 0)).float()
    is_high = ((ratio > high) & (advantages > 0)).float()
    return {
        "clip_ratio/low_mean": is_low,
        "clip_ratio/high_mean": is_high,
        "clip_ratio/region_mean": torch.maximum(is_low, is_high),
        "clip_ratio/low_min": ("min_seq", is_low),
        "clip_ratio/high_max": ("max_seq", is_high),
    }


def masked_ratio_term(batch: PolicyBatch, masked: Tensor, kl_coef: float) -> tuple[Tensor, Tensor, Tensor]:
    """The per-token term of a trust region by masking (DPPO, IPO), with r = π_θ/π_old:

        ℓ_t = −r_t·Â_t where the token is inside (`masked` False), 0 where it is masked; + c·(log r_t)² on every token

    Returns (ℓ, r, (log r)²)."""
    log_ratio = batch.log_ratio
    ratio = importance_ratio(log_ratio)
    squared_log_ratio = log_ratio**2
    return -torch.where(masked, 0.0, ratio * batch.advantages) + kl_coef * squared_log_ratio, ratio, squared_log_ratio


def ratio_metrics(ratio: Tensor, prefix: str = "ratio") -> dict[str, Any]:
    """Mean, min and max of an importance ratio over the masked tokens."""
    ratio = ratio.detach()
    return {f"{prefix}/mean": ratio, f"{prefix}/min": ("min", ratio), f"{prefix}/max": ("max", ratio)}
