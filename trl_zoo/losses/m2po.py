"""M2PO: a trust region on the second moment of the log importance weights (Zheng et al., arXiv:2510.01161).

Built for many updates per rollout (stale data): instead of clipping each ratio, mask only the outliers. Over the
micro-batch's completion tokens, with δ = log π_θ − log π_old:

    M̂₂ = (1/N) Σ_{i,t} m·δ²_{i,t}
    M_{i,t} = 0 for the k tokens of largest δ², k the smallest number for which the mean δ² of the N − k tokens
              left is below τ (`m2po_threshold`, paper and AReaL: 0.04); M = 1 for the others
    J = Σ_{i,t} M_{i,t} · r_{i,t} · Â_{i,t} / Σ_i T_i        loss = −M·r·Â   (no clip)
    ∇J = Σ M r Â ∇log π / Σ_i T_i                             (M is a constant of the step: sg)

Whose reading: AReaL's. The mask is chosen once per call, over every completion token of the micro-batch regardless
of its advantage (one pool, not per sequence), as in AReaL's `_apply_m2po_masking`; the kept tokens get the full,
unclipped importance-weighted gradient, the masked ones none. The paper's Algorithm 1 chooses the masked tokens
among its trust-region tokens only, and the authors' verl code (below) restricts its pool too. On-policy δ = 0, so
M̂₂ = 0 < τ, nothing is masked and the gradient is REINFORCE's: the mask only ever acts on stale tokens.

Where this follows or departs from AReaL (`areal/trainer/ppo/actor.py`):
- The threshold test is strict (mean < τ) and, when even the smallest δ² is ≥ τ, every token but that one is
  masked (AReaL's guard against an empty loss), as there.
- AReaL measures δ between the behaviour policy and its proximal policy (the policy at the start of the training
  step, in its asynchronous, decoupled-PPO setting), one mask for the step. TRL has one old policy, the one that
  generated the batch, so here δ = log π_θ − log π_old with the current π_θ (the paper's (log π_θ/π_behav)²),
  evaluated again at every update of the batch.
- The authors' own verl code (Infini-AI-Lab/M2PO, `compute_m2po_policy_loss`) is a clipped variant: only tokens
  whose ratio moved in the direction of their advantage (Â > 0, r > 1 or Â < 0, r < 1) enter the mean, their δ²
  are capped at a τ² chosen so that the capped mean meets the budget, and exp(±τ) becomes a PPO clip range (so the
  tokens beyond it lose their gradient in that direction only). This file does not restrict the pool to those
  tokens: it is AReaL's reading of the masking, not Algorithm 1's nor the authors' code.
- Because the selection spans the whole micro-batch, rows with Â = 0 still move the mean: the entry declares
  `zero_advantage_is_inert=False`, and the masked set depends on how a generation batch is cut into micro-batches.

Tests: tests/test_losses_math.py (the second-moment mask), tests/test_losses_train.py (the mask on the trainer's
off-policy batch), tests/test_validation.py.
"""

import torch

from ..registry import LOSSES
from ..specs import PluginField, no_checks
from .base import PolicyBatch, PolicyTerm, importance_ratio, ratio_metrics


def second_moment_mask(log_ratio: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """M (float, shaped like `mask`): 0 for the largest δ² until the mean δ² of the kept tokens is below τ."""
    selected = mask.bool()
    values = log_ratio.detach()[selected].double() ** 2
    count = values.numel()
    keep = mask.clone()
    if count == 0:
        return keep
    order = torch.argsort(values, descending=True, stable=True)
    kept_counts = torch.arange(count, 0, -1, dtype=values.dtype, device=values.device)
    suffix_means = values[order].flip(0).cumsum(0).flip(0) / kept_counts  # mean δ² left after dropping the first k
    below = suffix_means < threshold
    dropped = torch.where(below.any(), below.int().argmax(), count - 1)  # the first k that qualifies, no host sync
    rank = torch.empty_like(order)
    rank[order] = torch.arange(count, device=order.device)
    keep[selected] = (rank >= dropped).to(keep.dtype)
    return keep


THRESHOLD = PluginField(
    "m2po_threshold", float, 0.04,
    "M2PO: τ of the second-moment trust region; the tokens of largest (log π_θ − log π_old)² are masked until the "
    "mean over the rest of the micro-batch is below τ (paper and AReaL: 0.04).",
    low=0, low_open=True,
)


@LOSSES.register(
    "m2po",
    description="mask the tokens of largest (log r)² until their mean is < τ; unclipped r·Â on the rest",
    source="M2PO, arXiv:2510.01161",
    aggregation="token_mean_global",
    zero_advantage_is_inert=False,
    validate=no_checks,  # no clip range read; τ's range is its field's
    fields=(THRESHOLD,),
)
def m2po_loss(batch: PolicyBatch, args) -> PolicyTerm:
    keep = second_moment_mask(batch.log_ratio, batch.mask, args.m2po_threshold)
    ratio = importance_ratio(batch.log_ratio)
    metrics = {
        "m2po/masked_fraction": batch.mask - keep,
        "m2po/second_moment": batch.log_ratio.detach() ** 2,  # M̂₂ before masking
    }
    metrics.update(ratio_metrics(ratio))
    return PolicyTerm(-keep * ratio * batch.advantages, metrics)
