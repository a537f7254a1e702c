"""What every advantage estimator works with: `AdvantageInputs` (the rewards of a generation batch, its groups and
the extras an estimator declares; `Turns`, the model turns of multi-turn rollouts), the group statistics (NaN-aware
std, the group mean and weighted baselines, exact for groups of equal rewards), batch whitening, and GDPO's
per-reward form of any estimator (`reward_decoupled_advantages`). The table's overview is
`trl_zoo/advantages/__init__.py`.

Tests: tests/test_advantages.py, tests/test_unequal_groups.py (group_sizes), tests/test_numerics.py (extreme rewards),
tests/test_gigpo.py (turns).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

Tensor = torch.Tensor


@dataclass
class Turns:
    """The model turns of multi-turn rollouts (TRL's tool and environment loop): a completion is turn 0, a tool reply,
    turn 1, another reply, … Row i has K_i turns (0 for a row with no trained token); K = max K_i.

    ``states`` says which turns start from the same state: equal ids (within a batch) are identical states, what
    GiGPO calls an anchor state (`components/turns.py` says what a state is in TRL's layout).
    """

    token_turns: Tensor  # (N, T) long: k of the turn a completion token belongs to; −1 for a tool reply or padding
    states: Tensor  # (N, K) long ≥ 0: the state turn k starts from; −1 where row i has no turn k
    rewards: Tensor  # (N, K) the environment's reward of turn k (0 without one); NaN where row i has no turn k

    @property
    def present(self) -> Tensor:
        """(N, K) bool: row i has a turn k."""
        return self.states >= 0

    @property
    def counts(self) -> Tensor:
        """K_i, (N,) long."""
        return self.present.sum(-1)


@dataclass
class AdvantageInputs:
    """Rewards of a generation batch plus the per-completion extras an estimator may declare (``needs=``).

    Groups are G = ``num_generations`` consecutive rows, or, with ``group_sizes`` (P,), P groups of n_1, …, n_P
    consecutive rows (Σ n_p = N; G is then not used to split). ``grouped`` lays the rewards out as a (P, G_max) grid,
    a group's missing slots NaN (which every estimator already leaves out, as an unscorable reward), and
    ``ungroup`` drops those slots again; with ``group_sizes=None`` they are ``view(-1, G)`` and ``reshape(-1)``.
    """

    rewards: Tensor  # (N,) R_i, NaN = unscorable; minus β Σ_t KL_t when kl_placement="reward"
    num_generations: int  # G: groups are G consecutive entries (unless group_sizes)
    mask: Tensor | None = None  # (N, T) completion tokens
    token_penalty: Tensor | None = None  # (N, T) β·KL_t per token, masked, when kl_placement="reward"
    score_sq_norms: Tensor | None = None  # (N,) ‖s_i‖² in logit space (needs="score_sq_norms")
    values: Tensor | None = None  # (N, T) critic V(s_t) at generation time (needs="values"; trl_zoo.value_function)
    group_sizes: Tensor | None = None  # (P,) long n_p ≥ 1, Σ n_p = N: groups of unequal size; None = all G
    reference_rewards: Tensor | None = None  # (N, K) rewards of K reference samples of each row's prompt (a column)
    turns: Turns | None = None  # the rollouts' model turns (needs="turns"); None: every completion is one turn

    def __post_init__(self):
        if self.rewards.dim() != 1:
            raise ValueError(f"rewards: expected shape (N,), got {tuple(self.rewards.shape)}.")
        if self.group_sizes is not None:
            self._check_group_sizes()
        elif self.num_generations < 1 or self.rewards.numel() % self.num_generations:
            raise ValueError(
                f"num_generations: {self.rewards.numel()} rewards do not split into groups of {self.num_generations}."
            )

    def _check_group_sizes(self):
        sizes, count = self.group_sizes, self.rewards.numel()
        if not isinstance(sizes, Tensor):
            got = type(sizes).__name__
        else:
            shown = sizes.tolist() if sizes.numel() <= 16 else f"{sizes.numel()} sizes"
            got = f"{shown} ({str(sizes.dtype).removeprefix('torch.')}, shape {tuple(sizes.shape)})"
        integer = isinstance(sizes, Tensor) and not (sizes.dtype.is_floating_point or sizes.is_complex())
        if not (
            integer
            and sizes.dtype != torch.bool
            and sizes.dim() == 1
            and sizes.numel() > 0
            and bool((sizes >= 1).all())
            and int(sizes.sum()) == count
        ):
            raise ValueError(
                f"group_sizes: expected a (P,) integer tensor of sizes ≥ 1 summing to the {count} rewards; got {got}."
            )
        self.group_sizes = sizes.to(device=self.rewards.device, dtype=torch.long)

    @property
    def sizes(self) -> Tensor:
        """n_p, the size of each group, (P,) long (all G without ``group_sizes``)."""
        if self.group_sizes is not None:
            return self.group_sizes
        count = self.rewards.numel() // self.num_generations
        return torch.full((count,), self.num_generations, dtype=torch.long, device=self.rewards.device)

    @property
    def row_group_sizes(self) -> Tensor:
        """n_p of each row's group, (N,) long."""
        return self.sizes.repeat_interleave(self.sizes)

    def _slots(self) -> tuple[int, Tensor]:
        """(G_max, the flat index of each row in the (P·G_max) grid, (N,))."""
        sizes = self.group_sizes
        width = int(sizes.max())
        starts = torch.cumsum(sizes, 0) - sizes
        rows = torch.arange(sizes.numel(), device=sizes.device).repeat_interleave(sizes)
        columns = torch.arange(self.rewards.numel(), device=sizes.device) - starts.repeat_interleave(sizes)
        return width, rows * width + columns

    def group(self, values: Tensor, fill: float = float("nan")) -> Tensor:
        """A per-row tensor (N, …) as the (P, G_max, …) grid of groups, a group's missing slots ``fill``."""
        if self.group_sizes is None:
            return values.view(-1, self.num_generations, *values.shape[1:])
        width, slots = self._slots()
        grid = values.new_full((self.group_sizes.numel() * width, *values.shape[1:]), fill)
        grid[slots] = values
        return grid.view(-1, width, *values.shape[1:])

    def ungroup(self, grid: Tensor) -> Tensor:
        """The (P, G_max, …) grid back to (N, …), a group's missing slots dropped; ``reshape`` for equal groups."""
        if self.group_sizes is None:
            return grid.reshape(-1, *grid.shape[2:])
        _, slots = self._slots()
        return grid.reshape(-1, *grid.shape[2:])[slots]

    @property
    def grouped(self) -> Tensor:
        """Rewards as (P, G), or (P, G_max) with NaN in a smaller group's missing slots."""
        return self.group(self.rewards)

    @property
    def lengths(self) -> Tensor:
        """l_i = number of completion tokens, (N,)."""
        if self.mask is None:
            raise ValueError("This estimator needs the completion mask (completion lengths); pass mask=.")
        return self.mask.sum(-1).to(self.rewards.dtype)


def nan_std(values: Tensor, dim=None, unbiased: bool = True, keepdim: bool = False) -> Tensor:
    """Standard deviation ignoring NaNs; unbiased (N−1) or population (N). NaN where fewer than 2 (1) values."""
    mean = torch.nanmean(values, dim=dim, keepdim=True)
    count = (~torch.isnan(values)).sum(dim=dim, keepdim=True).to(values.dtype)
    squares = torch.nansum((values - mean) ** 2, dim=dim, keepdim=True)
    divisor = count - 1 if unbiased else count
    std = torch.sqrt(squares / divisor.where(divisor > 0, torch.full_like(divisor, float("nan"))))
    return std if keepdim or dim is None else std.squeeze(dim)


def constant_groups(grouped: Tensor) -> tuple[Tensor, Tensor]:
    """((P, 1) bool: the group's scorable rewards are all equal, (P, 1) their largest value), NaNs ignored."""
    scored = ~torch.isnan(grouped)
    highest = torch.where(scored, grouped, float("-inf")).amax(dim=1, keepdim=True)
    lowest = torch.where(scored, grouped, float("inf")).amin(dim=1, keepdim=True)
    return highest == lowest, highest


def exact_for_constant_groups(baseline: Tensor, grouped: Tensor) -> Tensor:
    """The (P, 1) or (P, G) baseline, replaced by the rewards themselves in groups whose rewards are all equal.

    The float mean of G equal values can miss them by an ulp (for |R| ~ 1e6 in float32, 0.06); divided by a std of
    the same size, that would give every completion of a zero-signal group an advantage of order 1, all of one sign.
    """
    constant, _ = constant_groups(grouped)
    return torch.where(constant, grouped, baseline)


def group_mean(inputs: AdvantageInputs) -> Tensor:
    """mean over each group (NaN-aware), broadcast back to (N,); exactly the rewards in a group of equal rewards."""
    grouped = inputs.grouped
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    return inputs.ungroup(exact_for_constant_groups(mean.expand_as(grouped), grouped))


def weighted_group_baseline(inputs: AdvantageInputs, weights: Tensor) -> Tensor:
    """b = Σ_j w_j R_j / Σ_j w_j per group over scorable completions, (N,). Falls back to the mean where Σ w = 0."""
    rewards = inputs.grouped
    weights = inputs.group(weights.to(rewards.dtype)).masked_fill(torch.isnan(rewards), 0.0)
    total = weights.sum(1, keepdim=True)
    safe_total = total.where(total > 0, torch.ones_like(total))
    weighted = (weights * rewards.nan_to_num(0.0)).sum(1, keepdim=True) / safe_total
    baseline = torch.where(total > 0, weighted, torch.nanmean(rewards, dim=1, keepdim=True))
    return inputs.ungroup(exact_for_constant_groups(baseline.expand_as(rewards), rewards))


def group_centred(inputs: AdvantageInputs, values: Tensor, scaled: bool, args) -> Tensor:
    """(x_i − mean x) over i's group, divided by (std x + ε) when `scaled` (``advantage_std_unbiased``,
    ``advantage_epsilon``), (N,); NaN values left out of the statistics; exactly 0 in a group of equal values."""
    grouped = inputs.group(values)
    centred = grouped - torch.nanmean(grouped, dim=1, keepdim=True)
    if scaled:
        centred = centred / (nan_std(grouped, dim=1, unbiased=args.advantage_std_unbiased, keepdim=True)
                             + args.advantage_epsilon)
    constant, _ = constant_groups(grouped)
    return inputs.ungroup(torch.where(constant, grouped - grouped, centred))


def refuse_per_function_and_sampling(args, summed: str, sampled: str) -> None:
    """For an estimator that reads more of a completion than its summed reward: refuse GDPO's per-reward-function
    runs (`summed` says why the sum matters) and dynamic sampling (`sampled` says what its kept or regrouped groups
    lose), each in one line naming the setting and the fix."""
    if getattr(args, "multi_objective_aggregation", None) == "normalize_then_sum":
        raise ValueError(
            f"multi_objective_aggregation: 'normalize_then_sum' runs the estimator on each reward function, but "
            f"{summed}; use 'sum_then_normalize'."
        )
    if getattr(args, "dynamic_sampling", None) is not None:
        raise ValueError(f"dynamic_sampling: {args.dynamic_sampling!r} {sampled}; set dynamic_sampling=None.")


def whiten(values: Tensor, mask: Tensor | None, unbiased: bool, epsilon: float) -> Tensor:
    """(x − mean) / (std + ε) over the masked entries of the batch (NaN rows excluded); 0 if they are all equal."""
    selected = values if mask is None else values.masked_fill(mask == 0, float("nan"))
    constant, common = constant_groups(selected.reshape(1, -1))
    mean = torch.where(constant.squeeze(), common.squeeze(), torch.nanmean(selected))  # see exact_for_constant_groups
    return (values - mean) / (nan_std(selected, unbiased=unbiased) + epsilon)


def reward_decoupled_advantages(estimator, inputs: AdvantageInputs, rewards_per_func: Tensor, weights: Tensor, args):
    """GDPO's `multi_objective_aggregation="normalize_then_sum"` (arXiv:2601.05242, TRL's implementation) with any
    estimator: the estimator on each reward function's own rewards, their weighted sum, whitened over the batch,

        Â_i = whiten_batch( Σ_k w_k Â_k(R_{·,k})_i )

    (per token for a token-level estimator). GDPO normalises each reward within its group so that a reward of
    large scale or spread does not drown the others in the sum, and whitens the sum to keep its range; the
    estimator takes the place of that per-reward normalisation. With `grpo` (scale_rewards="group") this is TRL's
    normalize_then_sum. A NaN reward of one function drops out of the sum (nansum, as TRL); a completion with no
    scorable reward stays NaN. `inputs` carries the extras (mask, ‖s‖²); its rewards are replaced per function.
    """
    per_reward = [
        estimator.fn(replace(inputs, rewards=rewards_per_func[:, k].to(inputs.rewards.dtype)), args)
        for k in range(rewards_per_func.size(1))
    ]
    stacked = torch.stack(per_reward, dim=-1)
    weights = weights.to(stacked)
    summed = (stacked * weights).nansum(dim=-1).masked_fill(torch.isnan(stacked).all(dim=-1), float("nan"))
    mask = inputs.mask if estimator.spec.token_level else None
    return whiten(summed, mask, args.advantage_std_unbiased, args.advantage_epsilon)
