"""GSPO-token: GSPO's sequence ratio with per-token advantages (arXiv:2507.18071).

    log s_{i,t} = sg(log s_i) + log π_θ(y_{i,t}) − sg(log π_θ(y_{i,t}))      (value s_i, gradient s_i·∇log π_t)
    ℓ_{i,t} = min( s_{i,t}·Â_{i,t}, clip(s_{i,t}, 1 − ε_low, 1 + ε_high)·Â_{i,t} )    loss = −ℓ   (B, T)
    J = (1/G) Σ_i (1/T_i) Σ_t ℓ_{i,t}

s_i = exp(Σ_t m δ_t / T_i) as in GSPO. With Â_{i,t} = Â_i for every token this equals GSPO in value and gradient;
token advantages (B, T) let each token carry its own credit while the clip still acts on the whole sequence.

Tests: tests/test_losses_math.py (= GSPO with equal token advantages; per-token advantages), tests/test_numerics.py.
"""


from ..registry import LOSSES
from ..specs import check_clipped_objective
from .base import PolicyBatch, PolicyTerm, importance_log_weights, importance_ratio
from .ppo_clip import clipped_surrogate


@LOSSES.register(
    "gspo_token",
    description="GSPO's sequence ratio carried per token, for token-level advantages",
    source="GSPO, arXiv:2507.18071",
    aggregation="sequence_mean",
    zero_advantage_is_inert=True,
    sequence_level=True,
    validate=check_clipped_objective,
)
def gspo_token_loss(batch: PolicyBatch, args) -> PolicyTerm:
    log_sequence_ratio = importance_log_weights(batch, "sequence").detach()
    token_ratio = importance_ratio(log_sequence_ratio + batch.logps - batch.logps.detach())
    return clipped_surrogate(token_ratio, batch.advantages, args)
