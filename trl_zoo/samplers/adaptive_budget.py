"""adaptive_budget — a per-prompt rollout budget: each prompt is generated in increments along a grid; it stops
once its group is informative, or is given up when it is not after enough completions.

The grid doubles from n_1 = `adaptive_budget_first_size` and ends at G_max = `adaptive_budget_max_size` (None:
`num_generations`): n_1 < 2 n_1 < … < G_max (2, 4, 8 for the defaults with G = 8). After each round, per prompt with
n completions so far (R_1 … R_n its task rewards, NaN ignored as in resample's spread), n_stop =
`adaptive_budget_min_size` (None: n_1), n_give = `adaptive_budget_give_up_size` (None: G_max):

    stop      max R > min R  and  n ≥ n_stop     informative: its group is these n completions
    give up   max R = min R  and  n ≥ n_give     all equal after enough samples
    continue  otherwise                          next round it gets the completions up to the next grid point

Its cost against resample (exact for binary rewards: `expected_counts`): docs/formulas.md, "Adaptive budget".

Rounds. Every round generates exactly one generation batch of B = `generation_batch_size` completions (all
processes), so TRL's batch layout and its split across processes are unchanged: the open prompts first, in the
order they were opened, each up to the next grid point where the rule can act (one that does not fit waits), then
new prompts from the stream (TRL's inputs, then the sampler's own prompts) with n_1 completions each — in the last
allowed round (`dynamic_sampling_max_rounds`) with the first grid point ≥ n_stop, as they are never topped up.
Rounds stop once the informative groups hold ≥ B completions, or at the cap; prompts still open are dropped (they
come round again with the stream), nothing is kept between batches, and every process decides alike.

The batch has exactly B rows: the informative groups in the order they stopped, whole while they fit; the first that
does not fit into the r ≥ 2 slots left is cut to r completions keeping spread; one slot left, or every slot left
when the round cap was hit, takes a *filler*: a completion of a given-up or unfinished prompt with Â = 0 that no
estimator sees (`dynamic_sampling_on_exhausted`: "fill" warns once, "raise" raises). B = Σ_p n'_p + F, n'_p ≤ n_p
the trained sizes, F fillers. The advantages are computed again over the trained groups (`advantage_estimator`,
TRL's grpo when None) with `AdvantageInputs.group_sizes` = (n'_1, …, n'_P); a filler still counts in the loss's
normaliser and in the KL term.

Refused: settings whose per-round state follows TRL's groups of G (an estimator's declared inputs beyond the
rewards: a critic's values, ‖s‖², reference rewards, turns; the teacher's term, a KL penalty in the reward, GDPO's
per-function normalisation, LUFFY's expert traces), and a pass@k estimator whose `passk_k` is not below the smallest
trained group (the first grid point ≥ n_stop: a group of n ≤ k has one k-subset or none, so Â = 0).

Metrics (`dynamic_sampling/`): `generated_per_trained` (generated / trained completions of informative groups),
`informative_share` (of prompts opened), `generation_rounds`, `prompts_opened`, `given_up`, `mean_group_size`,
`filled_rows`.
Tests: tests/test_adaptive_budget.py.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch

from ..registry import ADVANTAGES, SAMPLERS
from ..specs import PluginField
from .base import MAX_ROUNDS, ON_EXHAUSTED, DynamicSamplingExhausted, Regrouped, SampledBatch

# One text, so Python's default filter shows it once a process; the count of every step is the metric.
FILL_WARNING = (
    "dynamic_sampling: a batch reached dynamic_sampling_max_rounds before its informative groups held the batch's "
    "completions, so the rest are zero-weight rows of given-up or unfinished prompts "
    "(dynamic_sampling_on_exhausted='fill'). Shown once; the metric dynamic_sampling/filled_rows counts them at every "
    "step. Raise dynamic_sampling_max_rounds or set dynamic_sampling_on_exhausted='raise' to stop instead."
)
FIRST_SIZE = PluginField(
    "adaptive_budget_first_size", int, 2,
    "adaptive_budget: completions a prompt gets in its first round, n_1; the grid doubles from it up to G_max",
    low=2,
)
MAX_SIZE = PluginField(
    "adaptive_budget_max_size", int, None,
    "adaptive_budget: G_max, the last grid point: no prompt gets more completions (None: num_generations)", low=2,
)
MIN_SIZE = PluginField(
    "adaptive_budget_min_size", int, None,
    "adaptive_budget: n_stop, a prompt with reward spread stops at the first grid point ≥ n_stop (None: "
    "adaptive_budget_first_size, the first spread)",
    low=2,
)
GIVE_UP_SIZE = PluginField(
    "adaptive_budget_give_up_size", int, None,
    "adaptive_budget: n_give, a prompt whose rewards are all equal is given up at the first grid point ≥ n_give "
    "(None: G_max); it is given up with probability p^n_give + (1 − p)^n_give at success rate p",
    low=2,
)


def max_size(args) -> int:
    """G_max: `adaptive_budget_max_size`, else `num_generations`."""
    return args.adaptive_budget_max_size or args.num_generations


def stop_size(args) -> int:
    """n_stop: `adaptive_budget_min_size`, else n_1."""
    return args.adaptive_budget_min_size or args.adaptive_budget_first_size


def give_up_size(args) -> int:
    """n_give: `adaptive_budget_give_up_size`, else G_max."""
    return args.adaptive_budget_give_up_size or max_size(args)


def decision(rewards: list[float], n_stop: int, n_give: int, top: int) -> str:
    """"stop", "give up" or "continue" for a prompt with these task rewards (see the rule above)."""
    size = len(rewards)
    if has_spread(rewards):
        return "stop" if size >= n_stop or size >= top else "continue"
    return "give up" if size >= n_give or size >= top else "continue"


def expected_counts(p: float, grid: list[int], n_stop: int, n_give: int) -> tuple[float, float, float]:
    """(E[completions], E[trained completions], P(informative)) of one prompt of success rate p under the rule,
    exact for binary rewards: an open prompt is all-0, all-1 or spread after n completions (spread stays spread)."""
    zeros = ones = spread = 0.0
    reach, previous = 1.0, 0
    completions = trained = informative = 0.0
    for point in grid:
        step = point - previous
        completions += step * reach
        if previous == 0:
            zeros, ones = (1 - p) ** step, p**step
            spread = 1 - zeros - ones
        else:
            kept_zeros, kept_ones = zeros * (1 - p) ** step, ones * p**step
            spread += zeros - kept_zeros + ones - kept_ones
            zeros, ones = kept_zeros, kept_ones
        last = point == grid[-1]
        if point >= n_stop or last:
            trained += point * spread
            informative += spread
            spread = 0.0
        if point >= n_give or last:
            zeros = ones = 0.0
        reach, previous = zeros + ones + spread, point
    return completions, trained, informative


def budget_grid(first: int, top: int) -> list[int]:
    """n_1 < 2 n_1 < 4 n_1 < … < G_max, ending at G_max: (2, 8) → [2, 4, 8], (2, 6) → [2, 4, 6], (3, 8) → [3, 6, 8]."""
    sizes, size = [], first
    while size < top:
        sizes.append(size)
        size *= 2
    return [*sizes, top]


def all_equal_probability(p: float, n: int) -> float:
    """q(n) = p^n + (1 − p)^n: n Bernoulli(p) rewards all equal."""
    return p**n + (1 - p) ** n


def has_spread(rewards: list[float]) -> bool:
    """max > min over the rewards that are not NaN."""
    scored = [reward for reward in rewards if not math.isnan(reward)]
    return bool(scored) and max(scored) > min(scored)


def kept_rows(rewards: list[float], slots: int) -> list[int]:
    """The rows of an informative group cut to `slots` ≥ 2: its first `slots` when they have spread, else its first
    lowest and first highest reward and then its earliest others, in generation order."""
    if has_spread(rewards[:slots]):
        return list(range(slots))
    scored = [i for i, reward in enumerate(rewards) if not math.isnan(reward)]
    lowest = min(scored, key=lambda i: rewards[i])
    highest = max(scored, key=lambda i: rewards[i])
    others = [i for i in range(len(rewards)) if i not in (lowest, highest)]
    return sorted([lowest, highest, *others[: slots - 2]])


@dataclass
class OpenPrompt:
    """A prompt being generated in increments: its row and, per completion, (round, row) and task reward."""

    row: dict
    rows: list[tuple[int, int]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.rows)


class PromptSource:
    """New prompts in stream order: one row per prompt from the session's candidate batches (G rows per prompt)."""

    def __init__(self, session):
        self.session = session
        self.waiting: list[dict] = []
        self.opened = 0

    def take(self) -> OpenPrompt:
        while not self.waiting:
            self.waiting += self.session.draw_prompts()[:: self.session.group_size]
        self.opened += 1
        return OpenPrompt(dict(self.waiting.pop(0)))


def next_decision(grid: list[int], rewards: list[float], n_stop: int, n_give: int) -> int:
    """The next grid point where the rule can act on an open prompt: with spread, the first ≥ n_stop (where it
    stops); without, the first above its size that is ≥ min(n_stop, n_give) (below both nothing can happen)."""
    size = len(rewards)
    floor = n_stop if has_spread(rewards) else min(n_stop, n_give)
    return next(point for point in grid if point > size and (point >= floor or point == grid[-1]))


def plan_round(active: list[OpenPrompt], source: PromptSource, grid: list[int], capacity: int, n_stop: int,
               n_give: int, last: bool = False):
    """[(prompt, k)] filling `capacity` rows: the open prompts' increments to their next decision in order while
    they fit, then new prompts with n_1 (fewer in the last slots), or in the `last` allowed round with the first grid
    point ≥ n_stop, where a spread can still be trained; and the open prompts that wait."""
    plan, space = [], capacity
    for prompt in active:
        increment = next_decision(grid, prompt.rewards, n_stop, n_give) - prompt.size
        if increment > space:
            break
        plan.append((prompt, increment))
        space -= increment
    waiting = active[len(plan) :]
    opening = next(point for point in grid if point >= n_stop) if last else grid[0]
    while space:
        increment = min(opening, space)
        plan.append((source.take(), increment))
        space -= increment
    return plan, waiting


def validate_adaptive_budget(args) -> None:
    """The grid fits a generation batch; settings whose per-round state follows groups of G are refused."""
    top = max_size(args)
    first = args.adaptive_budget_first_size
    if first > top:
        raise ValueError(
            f"adaptive_budget_first_size: must be ≤ G_max = {top} (adaptive_budget_max_size, else num_generations), "
            f"got {first}; e.g. 2."
        )
    for name in ("adaptive_budget_min_size", "adaptive_budget_give_up_size"):
        value = getattr(args, name)
        if value is not None and not first <= value <= top:
            raise ValueError(
                f"{name}: must be in [adaptive_budget_first_size, G_max] = [{first}, {top}], got {value}; or None."
            )
    batch = getattr(args, "generation_batch_size", None)
    if batch is not None and top > batch:
        raise ValueError(
            f"adaptive_budget_max_size: G_max = {top} must be ≤ generation_batch_size = {batch}, one group must fit "
            f"a batch; lower adaptive_budget_max_size."
        )
    refusals = [
        (getattr(args, "kl_placement", "loss") == "reward", "kl_placement='reward'", "use kl_placement='loss'"),
        (getattr(args, "teacher_model", None) is not None, "teacher_model", "unset teacher_model"),
        (
            getattr(args, "loss_type", None) == "luffy",
            "loss_type='luffy' (its traces fill the first slots of groups of num_generations rows in a row)",
            "use another loss",
        ),
        (
            getattr(args, "multi_objective_aggregation", None) == "normalize_then_sum",
            "multi_objective_aggregation='normalize_then_sum'",
            "use 'sum_then_normalize'",
        ),
    ]
    estimator = getattr(args, "advantage_estimator", None)
    if estimator is not None:
        # the regrouped batch's estimator sees the rewards, the groups and the mask alone
        # (components/dynamic_sampling.py)
        needs = ADVANTAGES.get(estimator).spec.needs
        refusals.append((bool(needs), f"advantage_estimator='{estimator}'", "use an estimator of the rewards alone"))
    for refused, setting, fix in refusals:
        if refused:
            raise ValueError(
                f"dynamic_sampling: 'adaptive_budget' regroups completions across rounds and cannot carry the "
                f"per-round state of {setting}; {fix} or use dynamic_sampling='resample'."
            )
    if estimator is not None and "passk_k" in {item.name for item in ADVANTAGES.get(estimator).spec.fields}:
        check_passk_groups(args)


def smallest_group(args) -> int:
    """The fewest completions of a trained informative group: the first grid point ≥ n_stop (only a group cut to
    fit the batch's last slots has fewer)."""
    top = max_size(args)
    return next(point for point in budget_grid(args.adaptive_budget_first_size, top) if point >= stop_size(args))


def check_passk_groups(args) -> None:
    """An estimator of pass@k (`passk_k`) needs groups of more than k: a group of n ≤ k completions has one k-subset
    or none, so each of its advantages is 0."""
    k, smallest = args.passk_k, smallest_group(args)
    if k < smallest:
        return
    top = max_size(args)
    fix = f"set adaptive_budget_min_size ≥ {k + 1}" if k < top else f"raise adaptive_budget_max_size above {k}"
    raise ValueError(
        f"passk_k: {k} is not below {smallest}, the smallest group dynamic_sampling='adaptive_budget' trains (the "
        f"first grid point ≥ adaptive_budget_min_size, else adaptive_budget_first_size), and a group of n ≤ k "
        f"completions has one k-subset or none, so all its advantages are 0; {fix}, or set passk_k below {smallest}."
    )


@SAMPLERS.register(
    "adaptive_budget",
    description="generate each prompt in increments 2, 4, … G_max, stop at reward spread, give up when all equal "
    "at n_give; train on informative groups of unequal sizes",
    source="fixed-grid rule; C-GRPO (trl-cgrpo, huggingface/trl#7402) calibrates it by conformal prediction",
    validate=validate_adaptive_budget,
    fields=(MAX_ROUNDS, ON_EXHAUSTED, FIRST_SIZE, MAX_SIZE, MIN_SIZE, GIVE_UP_SIZE),
)
def adaptive_budget(session, args) -> SampledBatch:
    grid = budget_grid(args.adaptive_budget_first_size, max_size(args))
    n_stop, n_give = stop_size(args), give_up_size(args)
    capacity = session.num_groups * session.group_size
    source = PromptSource(session)
    active: list[OpenPrompt] = []
    informative: list[OpenPrompt] = []
    given_up: list[OpenPrompt] = []
    rounds = 0
    while sum(p.size for p in informative) < capacity and rounds < args.dynamic_sampling_max_rounds:
        last = rounds + 1 == args.dynamic_sampling_max_rounds
        plan, waiting = plan_round(active, source, grid, capacity, n_stop, n_give, last)
        scored = session.generate_round([dict(prompt.row) for prompt, k in plan for _ in range(k)])
        rounds += 1
        index, position, continuing = len(session.rounds) - 1, 0, []
        for prompt, increment in plan:
            prompt.rows += [(index, row) for row in range(position, position + increment)]
            prompt.rewards += scored.task_rewards[position : position + increment].tolist()
            position += increment
            outcome = decision(prompt.rewards, n_stop, n_give, grid[-1])
            if outcome == "stop":
                informative.append(prompt)
            elif outcome == "give up":
                given_up.append(prompt)
            else:
                continuing.append(prompt)
        active = waiting + continuing
    return packed_batch(session, args, informative, given_up, active, rounds, source.opened)


def packed_batch(session, args, informative, given_up, active, rounds: int, opened: int) -> SampledBatch:
    """Exactly `num_groups · group_size` rows: the informative groups (the last cut), then fillers (see above)."""
    capacity = session.num_groups * session.group_size
    order: list[tuple[int, int]] = []
    sizes: list[int] = []
    spare: list[tuple[int, int]] = []  # rows no group trains on, fillers in this order
    for prompt in informative:
        space = capacity - len(order)
        if space < 2:
            spare += prompt.rows
            continue
        keep = range(prompt.size) if prompt.size <= space else kept_rows(prompt.rewards, space)
        order += [prompt.rows[i] for i in keep]
        sizes.append(len(keep))
        spare += [row for i, row in enumerate(prompt.rows) if i not in set(keep)]
    trained = len(order)
    missing = capacity - trained
    exhausted = sum(p.size for p in informative) < capacity
    if exhausted:
        message = (
            f"after {rounds} generation rounds the informative groups held {trained} of the {capacity} completions "
            f"of a batch"
        )
        if args.dynamic_sampling_on_exhausted == "raise":
            raise DynamicSamplingExhausted(
                f"dynamic_sampling_max_rounds: {message}; raise dynamic_sampling_max_rounds or "
                f"adaptive_budget_max_size, or set dynamic_sampling_on_exhausted='fill'."
            )
        warnings.warn(FILL_WARNING, stacklevel=3)
    fillers = [row for prompt in given_up + active for row in prompt.rows] + spare
    order += fillers[:missing]

    totals = torch.stack([session.rounds[index].total_rewards[row] for index, row in order])
    flags = torch.zeros(capacity, dtype=torch.bool)
    flags[:trained] = True
    regrouped = Regrouped(torch.tensor(sizes, dtype=torch.long), totals, flags)
    generated = rounds * capacity
    metrics = {
        "dynamic_sampling/informative_share": len(informative) / max(opened, 1),
        "dynamic_sampling/generation_rounds": float(rounds),
        "dynamic_sampling/prompts_opened": float(opened),
        "dynamic_sampling/given_up": float(len(given_up)),
        "dynamic_sampling/filled_rows": float(missing),
    }
    if trained:
        metrics["dynamic_sampling/generated_per_trained"] = generated / trained
        metrics["dynamic_sampling/mean_group_size"] = trained / len(sizes)
    return SampledBatch(session.assemble_rows(order), metrics, regrouped)
