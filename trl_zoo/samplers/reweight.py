"""reweight — filter and reweight: zero the advantages of the groups without reward spread, scale the rest by
1/(1 − p), no extra generation (`trl_zoo/samplers/__init__.py` has the details).
Tests: tests/test_sampling.py (zeroed groups, 1/(1 − p) scaling), tests/test_numerics.py (scripted sessions)."""

from __future__ import annotations

from ..registry import SAMPLERS
from .base import SampledBatch, SamplingSession, round_metrics


@SAMPLERS.register(
    "reweight",
    description="zero the advantages of groups whose rewards are all equal, scale the rest by 1/(1−p)",
    source="filter-and-reweight alternative to DAPO's dynamic sampling, docs/formulas.md",
)
def reweight(session: SamplingSession, args) -> SampledBatch:
    scored = session.rounds[0]
    spread = scored.group_spread
    kept = int(spread.sum())
    total = spread.numel()
    group_weights = spread.float() * (total / kept if kept else 0.0)  # 1/(1 − p) = total / kept
    batch = dict(scored.batch)
    advantages = batch["advantages"]
    row_weights = group_weights.to(advantages.device)[scored.local_groups.to(advantages.device)]
    batch["advantages"] = advantages * row_weights.view(-1, *([1] * (advantages.dim() - 1))).to(advantages.dtype)
    return SampledBatch(batch, round_metrics(total, kept, kept, 1, session.group_size))
