"""Clip-Cov: stop the gradient of a few high-covariance tokens to keep entropy from collapsing
(The Entropy Mechanism of RL for Reasoning LMs, arXiv:2505.22617).

    Cov_t = (log π_θ(y_t) − mean log π_θ) · (Â_t − mean Â)       means over the masked tokens of the micro-batch
    candidates  = { t : clip_cov_lower < Cov_t < clip_cov_upper, and PPO's clip has not already removed t's gradient }
    I_clip      = max(⌊clip_cov_ratio · N⌋, 1) tokens drawn uniformly from the candidates (all of them if fewer),
                  N = masked tokens in the micro-batch
    loss_t = −min(r_t·Â_t, clip(r_t, 1 − ε_low, 1 + ε_high)·Â_t),  with sg(loss_t) for t ∈ I_clip

The count follows the paper's reference code (verl's `clip_cov`): a fraction of *all* tokens, and at least one
token whenever one qualifies, since ⌊2e-4 · N⌋ is 0 for most micro-batches. The reference code multiplies the
selected terms by 0; detaching them gives the same gradient and keeps the logged loss the PPO objective.
The selection is a stochastic gradient mask, so it applies on-policy too: there the gradient is REINFORCE's
without the selected tokens. `clip_cov/selected_fraction` logs |I_clip| / N.

Tests: tests/test_losses_math.py (covariance, selected counts, the window), tests/test_skip_zero_advantage.py (refused:
it couples rows), tests/test_validation.py.
"""

import torch

from ..registry import LOSSES
from ..specs import PluginField, check_clipped_objective
from .base import PolicyBatch, PolicyTerm, importance_ratio
from .ppo_clip import clipped_surrogate, epsilon_bounds


def token_covariance(batch: PolicyBatch) -> torch.Tensor:
    """Cov_t (B, T), centred over the masked tokens of the micro-batch; no gradient, 0 where masked."""
    valid = batch.mask > 0
    count = batch.mask.sum().clamp(min=1.0)
    logps = torch.where(valid, batch.logps.detach(), 0.0)
    advantages = torch.where(valid, batch.advantages.expand_as(logps), 0.0)
    centred_logps = logps - logps.sum() / count
    centred_advantages = advantages - advantages.sum() / count
    return torch.where(valid, centred_logps * centred_advantages, 0.0)


def first_by_rank(keys: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Boolean, shaped like `keys`: the `count` entries with the largest keys (count a 0-d tensor, so the choice
    stays on the device without a host sync)."""
    order = keys.flatten().argsort(descending=True)
    ranks = torch.empty_like(order)
    ranks[order] = torch.arange(order.numel(), device=order.device)
    return (ranks < count).view_as(keys)


def token_count(mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """⌊fraction · N⌋ as a 0-d tensor on the mask's device (N = masked tokens), in float64 where the device has it,
    so the floor matches Python's."""
    dtype = torch.float32 if mask.device.type == "mps" else torch.float64
    return (fraction * (mask > 0).sum().to(dtype)).floor()


def random_subset(candidates: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """A boolean mask of `count` entries drawn uniformly from the True entries of `candidates` (all if fewer):
    the candidates with the largest i.i.d. uniform keys."""
    keys = torch.rand(candidates.shape, device=candidates.device).masked_fill(~candidates, -1.0)
    return first_by_rank(keys, count) & candidates


FIELDS = (
    PluginField(
        "clip_cov_ratio", float, 2e-4, "Clip-Cov: fraction of tokens whose gradient is detached.", low=0, high=1,
        low_open=True,
    ),
    PluginField("clip_cov_lower", float, 1.0, "Clip-Cov: lower bound of the covariance window for selected tokens."),
    PluginField("clip_cov_upper", float, 5.0, "Clip-Cov: upper bound of the covariance window for selected tokens."),
)


def validate_clip_cov(args) -> None:
    """The PPO clip (`check_clipped_objective`) and the covariance window's order."""
    check_clipped_objective(args)
    if args.clip_cov_lower >= args.clip_cov_upper:
        raise ValueError(f"clip_cov_lower: must be < clip_cov_upper ({args.clip_cov_upper}).")


@LOSSES.register(
    "clip_cov",
    description="PPO clip; detach the gradient of random tokens in a high-covariance window",
    source="The Entropy Mechanism of RL for Reasoning LMs, arXiv:2505.22617",
    aggregation="token_mean_global",
    zero_advantage_is_inert=False,  # Â = 0 rows shift the covariance means and so the selection
    validate=validate_clip_cov,
    fields=FIELDS,
)
def clip_cov_loss(batch: PolicyBatch, args) -> PolicyTerm:
    ratio = importance_ratio(batch.log_ratio)
    advantages = batch.advantages.expand_as(ratio)
    term = clipped_surrogate(ratio, advantages, args)
    eps_low, eps_high = epsilon_bounds(args)
    already_clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * advantages < ratio * advantages
    covariance = token_covariance(batch)
    candidates = (
        (batch.mask > 0) & (covariance > args.clip_cov_lower) & (covariance < args.clip_cov_upper) & ~already_clipped
    )
    count = token_count(batch.mask, args.clip_cov_ratio).clamp(min=1)
    selected = random_subset(candidates, count)
    metrics = dict(term.metrics)
    metrics["clip_cov/selected_fraction"] = selected.float()
    metrics["clip_cov/candidate_fraction"] = candidates.float()
    return PolicyTerm(torch.where(selected, term.loss.detach(), term.loss), metrics)
