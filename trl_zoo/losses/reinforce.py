"""REINFORCE: the plain policy gradient, no ratio and no clip (Williams 1992; GPG, arXiv:2504.02546).

    loss_{i,t} = −Â_{i,t} · log π_θ(y_{i,t})        ∇J = (1/G) Σ_i (1/T_i) Σ_t Â_{i,t} ∇log π_θ(y_{i,t})

Aggregated like GRPO (sequence_mean) on purpose: every ratio-based loss here reduces to exactly this gradient
on-policy (r = 1), so `reinforce` is the no-ratio, no-clip baseline to compare GRPO-family losses against on the
same normalisation. The textbook Σ_t form (the sequence log-probability times Â) is
`loss_aggregation="sequence_sum"`. It ignores π_old, so it is an on-policy method: with `num_iterations > 1` the
later iterations follow a biased (off-policy) gradient.

Tests: tests/test_losses_math.py and tests/test_numerics.py (the on-policy law, whose reference it is),
tests/test_losses_train.py (a LoRA run), tests/test_teacher.py (per-token advantages).
"""

from ..registry import LOSSES
from .base import PolicyBatch, PolicyTerm


@LOSSES.register(
    "reinforce",
    description="plain policy gradient −Â·log π (no ratio, no clip), GRPO aggregation",
    source="Williams 1992; GPG, arXiv:2504.02546",
    aggregation="sequence_mean",
    zero_advantage_is_inert=True,
)
def reinforce_loss(batch: PolicyBatch, args) -> PolicyTerm:
    return PolicyTerm(-batch.advantages * batch.logps, {"reinforce/logp_mean": batch.logps.detach()})
