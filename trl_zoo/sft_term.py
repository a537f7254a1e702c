"""CHORD (arXiv:2508.11408): supervised fine-tuning on expert demonstrations inside the RL step, as pure functions —
the schedule of the global weight μ and the SFT term of a micro-batch. The trainer's component is
`trl_zoo/components/expert_sft.py`, its fields `trl_zoo/config/expert_sft.py`.

    L = (1 − μ(s)) · L_RL + μ(s) · L_SFT

μ at optimizer step s (CHORD-μ), with warm-up W, decay D, peak μ_p and valley μ_v, a linear warm-up then a cosine
decay:

    μ(s) = μ_p · s / W                                           s < W
         = μ_v + (μ_p − μ_v) · ½ (1 + cos(π (s − W) / D))        W ≤ s < W + D
         = μ_v                                                   s ≥ W + D

L_SFT is the token mean over the expert tokens y*_t (weights w_t ≥ 0: the expert mask, times how many of the
micro-batch's rows carry that demonstration) of

    −log p_t                      plain SFT (CHORD-μ)
    −sg(φ(p_t)) · log p_t         CHORD-φ, φ(p) = p (1 − p)

with p_t = π_θ(y*_t | x, y*_<t): φ weights the tokens the policy is unsure of, and leaves those it already predicts
(p → 1) and those far from it (p → 0) nearly alone. φ carries no gradient (sg), as in the authors' code.

Tests: tests/test_expert_sft.py (against transcriptions of the authors' code).
"""

from __future__ import annotations

import math

import torch


def mu_schedule(step: int, warmup_steps: int, decay_steps: int, peak: float, valley: float) -> float:
    """μ at optimizer step `step` (module docstring)."""
    if step < warmup_steps:
        return peak * step / warmup_steps
    if step >= warmup_steps + decay_steps:
        return valley
    cosine = 0.5 * (1.0 + math.cos(math.pi * (step - warmup_steps) / decay_steps))
    return valley + (peak - valley) * cosine


def phi(probs: torch.Tensor) -> torch.Tensor:
    """φ(p) = p (1 − p): 0 at p = 0 and p = 1, largest (¼) at p = ½."""
    return probs * (1.0 - probs)


def sft_loss(logps: torch.Tensor, weights: torch.Tensor, use_phi: bool) -> torch.Tensor:
    """L_SFT of (B, T) log-probs `logps` of the expert tokens with (B, T) token weights `weights` (module docstring):
    −Σ w · [sg(φ(p))] · log p / Σ w; 0 (in the graph) where every weight is 0."""
    weights = weights.to(logps.dtype)
    per_token = -logps * phi(logps.detach().exp()) if use_phi else -logps
    return (per_token * weights).sum() / weights.sum().clamp(min=1.0)
