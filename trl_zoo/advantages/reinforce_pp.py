"""REINFORCE++ (arXiv:2501.03262): the per-token return, whitened over the batch's tokens.

    Â_{i,t} = whiten_batch( R_i − β Σ_{s≥t} KL_{i,s} )

The KL terms are there with `kl_placement="reward"`, where R_i already is R_i − β Σ_t KL_{i,t}: the penalty
becomes a return-to-go per token (`reinforce_pp_returns`, also REINFORCE++-baseline's).

Tests: tests/test_advantages.py, tests/test_unequal_groups.py (groups of unequal size).
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from .base import AdvantageInputs, whiten

Tensor = torch.Tensor


def reinforce_pp_returns(inputs: AdvantageInputs, rewards: Tensor) -> Tensor:
    """Per-token return R_i − Σ_{s≥t} p_{i,s} = R'_i + Σ_{s<t} p_{i,s} (R' already carries −Σ_s p_s); (N, T)."""
    if inputs.mask is None:
        return rewards
    returns = rewards.unsqueeze(1).expand(inputs.mask.shape).clone()
    if inputs.token_penalty is not None:
        penalty = inputs.token_penalty * inputs.mask
        returns = returns + (penalty.cumsum(-1) - penalty)
    return returns


@ADVANTAGES.register(
    "reinforce_pp",
    description="REINFORCE++: per-token return R − β Σ_{s≥t} KL_s, whitened over the batch's tokens",
    source="REINFORCE++, arXiv:2501.03262",
    token_level=True,
)
def reinforce_pp_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_{i,t} = whiten_batch(R_i − β Σ_{s≥t} KL_{i,s}); whitened over the batch, so ``group_sizes`` changes
    nothing."""
    returns = reinforce_pp_returns(inputs, inputs.rewards)
    return whiten(returns, inputs.mask, args.advantage_std_unbiased, args.advantage_epsilon)
