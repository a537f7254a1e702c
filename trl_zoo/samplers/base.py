"""What every sampler works with: the session (`SamplingSession`, its `Round`s), the result (`SampledBatch`), group
spread and the sampling metrics, the batch filling of the samplers that generate more rounds (`fill_batch`) and
their declared fields (`MAX_ROUNDS`, `ON_EXHAUSTED`). The sampler table's overview is `trl_zoo/samplers/__init__.py`.
Tests: tests/test_sampling.py (group spread, fill or raise when exhausted), tests/test_numerics.py (the group filter,
scripted sessions), tests/test_greso.py.
"""


from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..specs import PluginField

Tensor = torch.Tensor


class DynamicSamplingExhausted(RuntimeError):
    """resample hit `dynamic_sampling_max_rounds` before the batch was full, with on_exhausted='raise'."""


@dataclass
class Round:
    """One scored generation batch."""

    batch: dict[str, Any]  # this process's rows, as TRL's `_generate_and_score_completions` returns them
    group_spread: Tensor  # (num_groups,) bool, same on every process: the group's task rewards are not all equal
    local_groups: Tensor  # (local rows,) long: the group of each of this process's rows
    group_reward: Tensor | None = None  # (num_groups,) mean task reward of each group's scorable completions
    mean_reward: float | None = None  # mean task reward of the round's scorable completions (all processes)
    task_rewards: Tensor | None = None  # (rows,) every row's task reward, all processes in process order (NaN: none)
    total_rewards: Tensor | None = None  # (rows,) the rewards the estimator sees (shaping included), all processes


@dataclass
class Regrouped:
    """The group structure of a batch assembled row by row (all processes, in batch order): `trained` rows form
    groups of `group_sizes` consecutive rows, estimated on `rewards`; the other rows (`trained` False) are fillers
    whose advantage is 0 and which no estimator sees."""

    group_sizes: Tensor  # (P,) long, Σ = trained.sum()
    rewards: Tensor  # (N,) the estimator's rewards of every row of the batch (a filler's is not read)
    trained: Tensor  # (N,) bool


@dataclass
class SampledBatch:
    batch: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)
    # A batch regrouped row by row (adaptive_budget): its advantages are computed again over these groups.
    regrouped: Regrouped | None = None


class SamplingSession(Protocol):
    num_groups: int  # prompt groups in one generation batch, all processes together
    group_size: int  # G, completions per prompt
    state: dict  # the trainer's algorithm state, saved with checkpoints (plain Python values only)
    rounds: list[Round]  # the rounds scored so far; reading it first generates the inputs TRL handed over

    def draw_prompts(self) -> list:
        """The next generation batch of prompt rows, all processes' rows in process order (G consecutive rows per
        prompt), not generated: first the inputs TRL handed over, then the sampler's own prompt stream."""

    def generate_round(self, rows: list | None = None) -> Round:
        """Generate and score one more generation batch (`rows`: all processes' rows, as `draw_prompts` returns
        them; None: the next one from the training data); append it to `rounds`."""

    def assemble(self, picks: list[tuple[int, int]]) -> dict[str, Any]:
        """This process's share of the batch made of the groups `picks` = [(round index, group index), ...]."""

    def assemble_rows(self, order: list[tuple[int, int]]) -> dict[str, Any]:
        """This process's share of the batch made of the rows `order` = [(round index, row of all processes), ...]
        (`num_groups · group_size` of them, the batch's rows in order)."""


def group_reward_spread(rewards: Tensor, group_size: int) -> Tensor:
    """(N,) rewards, groups of `group_size` consecutive rows -> (N / group_size,) bool: max > min, NaNs ignored."""
    grouped = rewards.view(-1, group_size)
    scored = ~torch.isnan(grouped)
    highest = torch.where(scored, grouped, float("-inf")).amax(dim=1)
    lowest = torch.where(scored, grouped, float("inf")).amin(dim=1)
    return highest > lowest


def sampling_metrics(generated_groups: int, informative_groups: int, trained_informative: int, group_size: int):
    """informative_share and generated_per_trained (the latter only when a group with spread is trained on)."""
    generated = generated_groups * group_size
    trained = trained_informative * group_size
    metrics = {"dynamic_sampling/informative_share": informative_groups / generated_groups}
    if trained:  # a batch with no group of spread has no ratio; a NaN would be logged as None
        metrics["dynamic_sampling/generated_per_trained"] = generated / trained
    return metrics


def round_metrics(
    generated_groups: int, informative_groups: int, trained_informative: int, rounds: int, group_size: int
):
    metrics = sampling_metrics(generated_groups, informative_groups, trained_informative, group_size)
    metrics["dynamic_sampling/generation_rounds"] = float(rounds)
    return metrics


def informative_groups(session: SamplingSession, index: int) -> list[tuple[int, int]]:
    """[(index, group)] for the groups with spread of round `index`."""
    return [(index, group) for group in session.rounds[index].group_spread.nonzero().flatten().tolist()]


# One text, so Python's default filter shows it once a process rather than at every step of a task where the cap is
# often hit; the count of every step is the metric.
FILL_WARNING = (
    "dynamic_sampling: a batch reached dynamic_sampling_max_rounds with fewer prompt groups with reward spread than "
    "it trains on, so it is filled with zero-spread groups (dynamic_sampling_on_exhausted='fill'). Shown once; the "
    "metric dynamic_sampling/filled_groups counts them at every step. Raise dynamic_sampling_max_rounds or set "
    "dynamic_sampling_on_exhausted='raise' to stop instead."
)


def fill_batch(session: SamplingSession, args, informative: list[tuple[int, int]]) -> SampledBatch:
    """The batch of the first `num_groups` groups with spread; when there are fewer (the round cap was hit), fill
    with the earliest zero-spread groups and warn (`FILL_WARNING`, once a process under Python's default filter),
    or raise, per `dynamic_sampling_on_exhausted`."""
    target = session.num_groups
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
        warnings.warn(FILL_WARNING, stacklevel=3)

    batch = session.assemble(picks)
    generated_groups = len(session.rounds) * target
    metrics = round_metrics(
        generated_groups, len(informative), target - missing, len(session.rounds), session.group_size
    )
    metrics["dynamic_sampling/filled_groups"] = float(missing)
    return SampledBatch(batch, metrics)


# the round cap of the samplers that generate more rounds (resample, greso, adaptive_budget: the same declarations)
MAX_ROUNDS = PluginField(
    "dynamic_sampling_max_rounds", int, 8,
    "resample, greso, adaptive_budget: maximum generation rounds per generation batch", low=1,
)
ON_EXHAUSTED = PluginField(
    "dynamic_sampling_on_exhausted", str, "fill",
    "resample, greso, adaptive_budget: when the cap is hit, 'fill' (pad with the collected zero-spread groups, "
    "adaptive_budget with zero-weight rows, and warn) or 'raise'",
    choices=("fill", "raise"),
)
