"""A*-PO's optimal advantage (Brantley et al., arXiv:2505.20686; TRL's experimental `A2POTrainer`): the reward minus
the optimal value V*(x) of the KL-regularised objective, estimated offline from the reference policy's samples.

    V*(x) = β₁ · ln( (1/K) Σ_k exp(r_k / β₁) )          r_1 … r_K: rewards of K samples y_k ~ π_ref(·|x)
    Â_i  = R_i − V*(x_i)

V* is the value of the optimal policy π* ∝ π_ref · exp(r/β₁), E_{π_ref}[exp(r/β₁)] estimated by its sample mean; β₁ → ∞
gives the mean reward of π_ref, β₁ → 0 its best sample. The K rewards of each prompt come from the dataset column
`reference_rewards` (`dataset_values.REFERENCE_REWARDS`), written once before training by
`trl_zoo.sample_reference_rewards` (`io/reference_rewards.py`), so β₁ can change without sampling again; the
advantage uses no group (a prompt's other completions do not enter it). The `a2po` loss (`losses/a2po.py`) regresses
β₂·ln(π/π_ref) onto it.

Where the sources differ, this reads:
- V* over the K rewards as above (the paper, TRL's `_estimate_optimal_values`, the authors' `RLHFDataset`); the
  authors' loader reads β₁ = 0 as the plain mean and β₁ < 0 as V* = 0: here β₁ must be > 0. A reference sample
  whose reward is None (NaN) is left out of its prompt's mean; a prompt with none scorable gets Â = NaN, which the
  trainer turns into 0.
- `a2po_beta1` = β₁ = 0.5 (the paper, TRL's `beta1`, the authors' scripts); K is the column's length (8 in all three,
  `sample_reference_rewards`' default).
- R_i is the weighted sum of the reward functions (TRL's `reward_weights`), as TRL's A2PO; the paper's rewards are
  0/1 and none of the three enforces it.

Tests: tests/test_a2po.py (the closed form, a transcription of TRL's V* estimate, the dataset column through the
trainer, the refused settings).
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from ..specs import PluginField
from .base import AdvantageInputs, refuse_per_function_and_sampling

Tensor = torch.Tensor

FIELDS = (
    PluginField(
        "a2po_beta1", float, 0.5,
        "A*-PO: temperature β₁ of the optimal value V*(x) = β₁ ln mean_k exp(r_k/β₁) over the reference samples' "
        "rewards (column reference_rewards); large: their mean, small: their best (paper, TRL: 0.5).",
        low=0, low_open=True,
    ),
)


def optimal_values(reference_rewards: Tensor, beta1: float) -> Tensor:
    """V*(x) = β₁ (logsumexp_k(r_k/β₁) − ln K) per row of the (N, K) rewards, NaNs left out of the sum and K; (N,)."""
    scored = ~torch.isnan(reference_rewards)
    scaled = (reference_rewards / beta1).masked_fill(~scored, float("-inf"))
    count = scored.sum(-1).to(reference_rewards.dtype)
    return beta1 * (torch.logsumexp(scaled, dim=-1) - count.log())


def check_a2po_advantages(args) -> None:
    """What r − V*(x) cannot be combined with: a per-reward-function form, and dynamic sampling's groups."""
    refuse_per_function_and_sampling(
        args,
        "a2po's V*(x) is the value of the summed reward",
        "keeps groups with reward spread, but a2po's R − V*(x) is a signal in every completion, spread or not",
    )


@ADVANTAGES.register(
    "a2po",
    description="R − V*(x), V* = β₁ ln mean exp(r_ref/β₁) over reference samples' rewards (a dataset column)",
    source="A*-PO, arXiv:2505.20686",
    needs=("reference_rewards",),
    validate=check_a2po_advantages,
    fields=FIELDS,
)
def a2po_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = R_i − V*(x_i) from the (N, K) `reference_rewards` of each row's prompt."""
    if inputs.reference_rewards is None:
        raise ValueError("a2po needs reference_rewards ((N, K) rewards of reference samples): pass reference_rewards.")
    reference = inputs.reference_rewards.to(inputs.rewards)
    return inputs.rewards - optimal_values(reference, args.a2po_beta1)
