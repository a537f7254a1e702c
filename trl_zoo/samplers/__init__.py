"""Dynamic sampling: which prompt groups of a generation batch are trained on (the sampler table; what the samplers
share is in `base.py`). Every module here registers its samplers on import: adding a sampler is adding one file here
(and its test); the table lists its entries wherever it is read (`trl-zoo list`, `dynamic_sampling`, `--help`).

A group is the G completions of one prompt. When its task rewards are all equal (binary rewards: #correct is 0
or G) every group-relative advantage is 0 and the group carries no learning signal. A group has *spread* when

    max_i R_i > min_i R_i          over the group's scorable completions (rewards that are not NaN), R the weighted
                                   sum of the task rewards (no overlong punishment: DAPO filters on accuracy)

resample — DAPO (arXiv:2503.14476, "dynamic sampling")
    Drop the groups without spread and generate more prompts (whole generation batches, each scored like the first)
    until `num_groups` groups with spread are collected; train on the first `num_groups`: exactly the configured
    size, no zero-spread group. At most `dynamic_sampling_max_rounds` rounds (the first included); at the cap
    `dynamic_sampling_on_exhausted="fill"` fills with the earliest zero-spread groups and warns, "raise" raises
    `DynamicSamplingExhausted`.

reweight — filter and reweight (docs/formulas.md)
    No extra generation. With p the fraction of groups without spread:

        Â_i ← 0                  for the completions of a group without spread
        Â_i ← Â_i / (1 − p)      for the others                                   (p = 1: every Â is 0)

    The zero-spread rows stay in the batch with Â = 0, so every process keeps its batch size, whole groups and
    TRL's split into micro-batches; they contribute no gradient (`skip_zero_advantage=True` also skips their
    forward/backward). When this equals training on the kept groups alone: docs/formulas.md, "Filter and reweight".

greso — pre-rollout prompt filtering (GRESO, arXiv:2506.02177), `greso.py`
    resample's batch filling, with prompts that had no spread on their recent visits skipped before generation.

adaptive_budget — a per-prompt rollout budget, `adaptive_budget.py`
    each prompt generated in increments along a grid (2, 4, …, G_max): stop at the first reward spread, give up when
    all G_max rewards are equal; exactly the configured number of completions, in informative groups of unequal sizes.

A sampler is `fn(session: SamplingSession, args) -> SampledBatch`; the trainer's mixin provides the session
(generation, scoring, moving rows between processes). Metrics, under `dynamic_sampling/`: `informative_share`
(groups with spread / groups generated), `generation_rounds`, `generated_per_trained` (completions generated /
completions of groups with spread trained on; not logged for a batch with none), for resample and greso
`filled_groups`; without a sampler `informative_share` and `generated_per_trained` (= 1 / informative_share).
"""

import importlib
import pkgutil

from .base import DynamicSamplingExhausted, Round, SampledBatch, SamplingSession

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["DynamicSamplingExhausted", "Round", "SampledBatch", "SamplingSession"]
