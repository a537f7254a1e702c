"""Dynamic sampling: which prompt groups of a generation batch are trained on (the sampler table).

A group is the G completions of one prompt. When its task rewards are all equal (binary rewards: #correct is 0
or G) every group-relative advantage is 0 and the group carries no learning signal. A group has *spread* when

    max_i R_i > min_i R_i          over the group's scorable completions (rewards that are not NaN)

R is the weighted sum of the task reward functions; the soft overlong punishment is left out, as DAPO's
reference filters on accuracy alone.

resample — DAPO (arXiv:2503.14476, "dynamic sampling")
    Drop the groups without spread, generate more prompts from the training data (whole generation batches,
    each scored like the first) until `num_groups` groups with spread are collected, and train on the first
    `num_groups` of them: the trained batch has exactly the configured size and no zero-spread group. At most
    `dynamic_sampling_max_rounds` generation rounds (the first included); when the cap is hit,
    `dynamic_sampling_on_exhausted="fill"` completes the batch with the earliest zero-spread groups and warns,
    "raise" raises `DynamicSamplingExhausted`.

reweight — filter and reweight (docs/formulas.md)
    No extra generation. With p the fraction of groups without spread,

        Â_i ← 0                  for the completions of a group without spread
        Â_i ← Â_i / (1 − p)      for the others                                   (p = 1: every Â is 0)

    The zero-spread rows stay in the batch with Â = 0, so every process keeps its batch size, whole groups and
    TRL's split into micro-batches; they contribute no gradient (set `skip_zero_advantage=True` to also skip their
    forward/backward). For losses positively homogeneous in Â (term(c·Â) = c·term(Â) for c > 0: the PPO-clip
    family, CISPO, SAPO, GMPO, GSPO, VESPO, REINFORCE) and per-sequence normalisers (sequence_mean, sequence_sum,
    token_sum_over_max_length) the generation batch's loss then equals the loss over the kept groups alone; for token means
    (dapo, bnpo) 1/(1 − p) stands in for the ratio of all tokens to kept tokens, exact when kept and dropped
    completions have the same mean length.

A sampler is `fn(session: SamplingSession, args) -> SampledBatch`; the trainer's mixin provides the session
(generation, scoring, moving rows between processes). Metrics (all logged under `dynamic_sampling/`):
`kept_fraction` (groups with spread / groups generated), `generation_rounds`, `samples_generated_per_sample_trained`
(samples generated / samples of groups with spread trained on; not logged for a batch with no such group) and, for
resample, `filled_groups`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from .registry import SAMPLERS

Tensor = torch.Tensor


class DynamicSamplingExhausted(RuntimeError):
    """resample hit `dynamic_sampling_max_rounds` before the batch was full, with on_exhausted='raise'."""


@dataclass
class Round:
    """One scored generation batch."""

    batch: dict[str, Any]  # this process's rows, as TRL's `_generate_and_score_completions` returns them
    group_spread: Tensor  # (num_groups,) bool, same on every process: the group's task rewards are not all equal
    local_groups: Tensor  # (local rows,) long: the group of each of this process's rows


@dataclass
class SampledBatch:
    batch: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)


class SamplingSession(Protocol):
    num_groups: int  # prompt groups in one generation batch, all processes together
    group_size: int  # G, completions per prompt
    rounds: list[Round]  # the rounds scored so far; the first is there when the sampler is called

    def generate_round(self) -> Round:
        """Generate and score one more generation batch from the training data; append it to `rounds`."""

    def assemble(self, picks: list[tuple[int, int]]) -> dict[str, Any]:
        """This process's share of the batch made of the groups `picks` = [(round index, group index), ...]."""


def group_reward_spread(rewards: Tensor, group_size: int) -> Tensor:
    """(N,) rewards, groups of `group_size` consecutive rows -> (N / group_size,) bool: max > min, NaNs ignored."""
    grouped = rewards.view(-1, group_size)
    scored = ~torch.isnan(grouped)
    highest = torch.where(scored, grouped, float("-inf")).amax(dim=1)
    lowest = torch.where(scored, grouped, float("inf")).amin(dim=1)
    return highest > lowest


def _metrics(generated_groups: int, informative_groups: int, trained_informative: int, rounds: int, group_size: int):
    generated = generated_groups * group_size
    trained = trained_informative * group_size
    metrics = {
        "dynamic_sampling/kept_fraction": informative_groups / generated_groups,
        "dynamic_sampling/generation_rounds": float(rounds),
    }
    if trained:  # a batch with no group of spread has no ratio; a NaN would be logged as None
        metrics["dynamic_sampling/samples_generated_per_sample_trained"] = generated / trained
    return metrics


@SAMPLERS.register(
    "resample",
    description="drop groups whose rewards are all equal, generate more prompts until the batch is full",
    source="DAPO, arXiv:2503.14476",
)
def resample(session: SamplingSession, args) -> SampledBatch:
    target = session.num_groups
    informative: list[tuple[int, int]] = []
    for index, scored in enumerate(session.rounds):
        informative += [(index, group) for group in scored.group_spread.nonzero().flatten().tolist()]
    while len(informative) < target and len(session.rounds) < args.dynamic_sampling_max_rounds:
        scored = session.generate_round()
        index = len(session.rounds) - 1
        informative += [(index, group) for group in scored.group_spread.nonzero().flatten().tolist()]

    picks = informative[:target]
    missing = target - len(picks)
    if missing:
        message = (
            f"after {len(session.rounds)} generation rounds only {len(informative)} of the {target} prompt groups "
            f"of a batch had reward spread (in the others every completion scored the same)"
        )
        if args.dynamic_sampling_on_exhausted == "raise":
            raise DynamicSamplingExhausted(
                f"dynamic_sampling_max_rounds: {message}; raise dynamic_sampling_max_rounds, use an easier or "
                f"harder task, or set dynamic_sampling_on_exhausted='fill'."
            )
        zero_spread = [
            (index, group)
            for index, scored in enumerate(session.rounds)
            for group in (~scored.group_spread).nonzero().flatten().tolist()
        ]
        picks += zero_spread[:missing]
        warnings.warn(
            f"dynamic_sampling: {message}; filling the batch with {missing} zero-spread groups "
            f"(dynamic_sampling_on_exhausted='fill').",
            stacklevel=2,
        )

    batch = session.assemble(picks)
    generated_groups = len(session.rounds) * target
    metrics = _metrics(generated_groups, len(informative), target - missing, len(session.rounds), session.group_size)
    metrics["dynamic_sampling/filled_groups"] = float(missing)
    return SampledBatch(batch, metrics)


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
    return SampledBatch(batch, _metrics(total, kept, kept, 1, session.group_size))
