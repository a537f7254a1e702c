"""REINFORCE++-baseline (arXiv:2501.03262): the group mean subtracted first, then
REINFORCE++'s per-token return, whitened over the batch's tokens.

    Â_{i,t} = whiten_batch( R_i − mean R − β Σ_{s≥t} KL_{i,s} )        mean over i's group

Tests: tests/test_advantages.py, tests/test_unequal_groups.py (groups of unequal size).
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from .base import AdvantageInputs, group_mean, whiten
from .reinforce_pp import reinforce_pp_returns

Tensor = torch.Tensor


@ADVANTAGES.register(
    "reinforce_pp_baseline",
    description="REINFORCE++-baseline: R − group mean, then per-token return, whitened over the batch's tokens",
    source="REINFORCE++, arXiv:2501.03262",
    token_level=True,
)
def reinforce_pp_baseline_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_{i,t} = whiten_batch(R_i − mean R − β Σ_{s≥t} KL_{i,s}); with ``group_sizes`` the mean is over the n_p rows
    of i's own group (a group of one contributes R_i − mean R = 0 before the whitening), the whitening stays over
    the batch's tokens."""
    returns = reinforce_pp_returns(inputs, inputs.rewards - group_mean(inputs))
    return whiten(returns, inputs.mask, args.advantage_std_unbiased, args.advantage_epsilon)
