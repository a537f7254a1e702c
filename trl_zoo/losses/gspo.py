"""GSPO: the importance ratio and the clip at the level of the whole sequence (arXiv:2507.18071).

    s_i = exp( (1/T_i) Σ_t m_{i,t} (log π_θ(y_{i,t}) − log π_old(y_{i,t})) )      (geometric mean of token ratios)
    ℓ_i = min( s_i·Â_i, clip(s_i, 1 − ε_low, 1 + ε_high)·Â_i )                      loss_i = −ℓ_i   (B, 1)
    J = (1/G) Σ_i ℓ_i          ∇J = (1/G) Σ_i s_i·Â_i·(1/T_i) Σ_t ∇log π_θ(y_{i,t})   (unclipped sequences)

Every token of a sequence gets the same gradient weight s_i·Â_i/T_i; a clipped sequence gets none. This is
TRL's `grpo` with `importance_sampling_level="sequence"` (so `importance_sampling_level` is not read here).
Token advantages (B, T) are reduced to their masked per-sequence mean. `delta` and `dual_clip` apply as in `grpo`.
The paper's clip ranges are tiny (ε_low = 3e-4, ε_high = 4e-4) because s_i is a per-token geometric mean; that
is the GSPO preset, not a default here.

Tests: tests/test_losses_math.py (weight s·Â/T, = sequence-level GRPO), tests/test_losses_train.py (against TRL's
sequence-level GRPO).
"""

import torch

from ..registry import LOSSES
from ..specs import check_clipped_objective
from .base import PolicyBatch, PolicyTerm, importance_log_weights, importance_ratio
from .ppo_clip import clipped_surrogate


def sequence_advantages(batch: PolicyBatch) -> torch.Tensor:
    """Â_i as (B, 1): the advantage itself, or the masked mean of token advantages."""
    if batch.advantages.shape[-1] == 1:
        return batch.advantages
    return (batch.advantages * batch.mask).sum(-1, keepdim=True) / batch.lengths


@LOSSES.register(
    "gspo",
    description="sequence ratio s_i (geometric mean) with PPO clip, one term per sequence",
    source="GSPO, arXiv:2507.18071",
    aggregation="sequence_mean",
    zero_advantage_is_inert=True,
    sequence_level=True,
    validate=check_clipped_objective,
)
def gspo_loss(batch: PolicyBatch, args) -> PolicyTerm:
    sequence_ratio = importance_ratio(importance_log_weights(batch, "sequence"))
    return clipped_surrogate(sequence_ratio, sequence_advantages(batch), args)
