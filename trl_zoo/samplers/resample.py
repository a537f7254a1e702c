"""resample — DAPO's dynamic sampling (arXiv:2503.14476): drop the groups without reward spread, generate more
prompts until the batch is full (`trl_zoo/samplers/__init__.py` has the details).
Tests: tests/test_sampling.py (full batches of groups with spread), tests/test_numerics.py (scripted rounds),
tests/test_sampling_multiprocess.py (two processes), tests/test_vllm_paths.py."""

from __future__ import annotations

from ..registry import SAMPLERS
from .base import MAX_ROUNDS, ON_EXHAUSTED, SampledBatch, SamplingSession, fill_batch, informative_groups


@SAMPLERS.register(
    "resample",
    description="drop groups whose rewards are all equal, generate more prompts until the batch is full",
    source="DAPO, arXiv:2503.14476",
    fields=(MAX_ROUNDS, ON_EXHAUSTED),
)
def resample(session: SamplingSession, args) -> SampledBatch:
    informative: list[tuple[int, int]] = []
    for index in range(len(session.rounds)):
        informative += informative_groups(session, index)
    while len(informative) < session.num_groups and len(session.rounds) < args.dynamic_sampling_max_rounds:
        session.generate_round()
        informative += informative_groups(session, len(session.rounds) - 1)
    return fill_batch(session, args, informative)
