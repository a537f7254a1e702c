"""OPO (arXiv:2505.23585): the length-weighted group mean as baseline, l_j the completion lengths.

    Â_i = R_i − Σ_j l_j R_j / Σ_j l_j        j over i's group

It is the optimal baseline (`optimal_baseline.py`) under the approximation ‖s_j‖² ∝ l_j.

Tests: tests/test_advantages.py, tests/test_unequal_groups.py (groups of unequal size).
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from .base import AdvantageInputs, weighted_group_baseline

Tensor = torch.Tensor


@ADVANTAGES.register(
    "opo",
    description="R − length-weighted group mean Σ l_j R_j / Σ l_j",
    source="OPO, arXiv:2505.23585",
)
def opo_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = R_i − Σ_j l_j R_j / Σ_j l_j over i's group; with ``group_sizes`` j runs over the n_p rows of i's own
    group (a group of one gets Â = 0)."""
    return inputs.rewards - weighted_group_baseline(inputs, inputs.lengths)
