"""TOPR: tapered off-policy REINFORCE (Le Roux et al., arXiv:2503.14286, eq. 8).

Positive examples get plain REINFORCE (the SFT-like update, no importance weight); negative ones are pushed down
only as far as their truncated sequence importance weight allows:

    w_i = 1                                    if Â_i ≥ 0
    w_i = sg( clip( π_θ(y_i)/π_old(y_i), 0, 1 ) ) = sg( exp( min(Σ_t m δ_{i,t}, 0) ) )   if Â_i < 0
    loss_{i,t} = −w_i · Â_i · log π_θ(y_{i,t})          ∇J = (1/B) Σ_i w_i Â_i Σ_t ∇log π_θ(y_{i,t})

The ratio is the full sequence ratio π(τ)/μ(τ) = exp(Σ_t δ_t) of the paper (a product of token ratios, not GSPO's
geometric mean), with the behaviour policy μ = π_old. Once a negative example's probability has fallen below its
probability under μ its push-down tapers off, which keeps the objective bounded (the paper proves it) and the run
stable without a KL term; a positive example is never weighted, so it keeps its full gradient however far the
policy has moved. On-policy (π_θ = π_old) every w_i = 1: plain REINFORCE.

Where this departs from its sources:
- The paper splits the examples by the sign of the reward R(τ) (with ±1 rewards and a constant baseline c, |c| < 1,
  R − c has the sign of R). Here they split by the sign of the advantage Â: the taper applies to exactly the
  terms that push a completion down, whatever baseline made Â. ROLL's implementation splits by reward > 0, so
  there a positive-reward completion with a negative advantage is pushed down untapered.
- ROLL tapers each token by its own ratio clip(r_t, 0, 1); here, as in the paper, by the sequence ratio.
- Token advantages (B, T) are split token by token (w_{i,t} = 1 where Â_{i,t} ≥ 0), tapered by the sequence ratio.

The paper's gradient is the sequence log-likelihood Σ_t ∇log π per example, so the default aggregation is
`sequence_sum` (mean over sequences of the token sum); `loss_aggregation` picks another.

Tests: tests/test_losses_math.py (tapered negative sequences), tests/test_skip_zero_advantage.py (row-local),
tests/test_losses_train.py (a LoRA run).
"""

import torch

from ..registry import LOSSES
from .base import PolicyBatch, PolicyTerm, ratio_metrics


def tapered_weights(batch: PolicyBatch) -> torch.Tensor:
    """w = 1 where Â ≥ 0, else clip(π(y)/μ(y), 0, 1) of the whole sequence; detached, shaped like Â."""
    sequence_log_ratio = (batch.log_ratio * batch.mask).sum(-1, keepdim=True).detach()
    truncated_ratio = torch.exp(sequence_log_ratio.clamp(max=0.0))  # exp(min(log s, 0)) = min(s, 1) ∈ (0, 1]
    return torch.where(batch.advantages >= 0, torch.ones_like(truncated_ratio), truncated_ratio)


def validate_topr(args) -> None:
    """Nothing to check: TOPR has no hyperparameter of its own and reads no clip range (ε, δ)."""


@LOSSES.register(
    "topr",
    description="REINFORCE on Â ≥ 0, negatives tapered by sg(clip(π(y)/μ(y), 0, 1)) of the sequence; no KL needed",
    source="TOPR, arXiv:2503.14286",
    aggregation="sequence_sum",
    zero_advantage_is_inert=True,
    validate=validate_topr,
)
def topr_loss(batch: PolicyBatch, args) -> PolicyTerm:
    weights = tapered_weights(batch)
    metrics = {"topr/negative_fraction": (batch.advantages < 0).float()}  # share in the tapered set (Â < 0)
    metrics.update(ratio_metrics(weights, "topr/weight"))
    return PolicyTerm(-weights * batch.advantages * batch.logps, metrics)
