"""Advantage estimators: the baseline (and scale) that turns rewards into advantages.

An estimator is a pure function ``estimator(inputs: AdvantageInputs, args) -> Tensor`` of the rewards of a
whole generation batch (all processes). Rewards come as N = P·G values, P groups of G = num_generations
consecutive completions of the same prompt. It returns per-completion advantages (N,) or per-token advantages
(N, T). ``args`` is the trainer's config (any object with ``advantage_std_unbiased``, ``advantage_epsilon`` and
``scale_rewards``). A NaN reward marks an unscorable completion: it is left out of every baseline and its
advantage comes back NaN (the trainer turns it into 0).

With R_i the rewards of one group, mean and std over that group (std unbiased or population per
``advantage_std_unbiased``), ε = ``advantage_epsilon``, l_i the completion lengths:

========================  ===============================================================  ==========================
name                      Â_i                                                              source
========================  ===============================================================  ==========================
grpo                      (R_i − mean R) / (std R + ε); `scale_rewards` "batch" takes the  GRPO, arXiv:2402.03300
                          std over the batch, "none" skips it (TRL's behaviour)
dr_grpo                   R_i − mean R                                                     Dr. GRPO, arXiv:2503.20783
rloo                      R_i − mean_{j≠i} R_j  =  G/(G−1) · (R_i − mean R)                RLOO, arXiv:2402.14740
reinforce                 R_i  (no baseline)                                               Williams 1992
reinforce_batch_baseline  R_i − mean over the whole batch of R                             Williams 1992
reinforce_pp              Â_{i,t} = whiten_batch( R_i − β Σ_{s≥t} KL_{i,s} )               REINFORCE++, 2501.03262
reinforce_pp_baseline     Â_{i,t} = whiten_batch( R_i − mean R − β Σ_{s≥t} KL_{i,s} )      REINFORCE++, 2501.03262
opo                       R_i − Σ_j l_j R_j / Σ_j l_j                                      OPO, arXiv:2505.23585
maxrl                     (R_i − mean R) / mean R where mean R > 0, else 0 (R ≥ 0)         MaxRL, arXiv:2602.02710
optimal_baseline          R_i − Σ_j ‖s_j‖² R_j / Σ_j ‖s_j‖²                                Greensmith et al. 2004
========================  ===============================================================  ==========================

Groups of unequal size: with ``AdvantageInputs.group_sizes`` = (n_1, …, n_P), group p is n_p consecutive rows and
"the group" above is i's own group: its mean and std are over its n_p rows (GRPO's unbiased std ÷ (n_p − 1)),
RLOO leaves one out of n_p, the weighted baselines sum over n_p. A group of one has Â = 0 (GRPO: std 0, as TRL
for num_generations=1), except for RLOO, which has no other completion: NaN, zeroed by the trainer. The batch-level
estimators (reinforce, reinforce_batch_baseline, reinforce_pp, grpo with scale_rewards="batch") do not see groups
and are unchanged. Every estimator of the table takes ``group_sizes``; none refuses it.

whiten_batch(x) = (x − mean x) / (std x + ε) over every completion token of the batch (REINFORCE++'s global
normalisation), or over the completions when no mask is given. The KL terms are only there with
``kl_placement="reward"``; there ``R_i`` already is R_i − β Σ_t KL_{i,t} for every estimator (the penalty passes
through the baseline), and REINFORCE++ distributes it as a return-to-go per token.

‖s_j‖² is the squared norm of the score ∇ log π(y_j) taken in logit space: for the logits z_t of step t,
∇_{z_t} log π(y_t) = e_{y_t} − π_t, so ‖s_j‖² = Σ_t ‖e_{y_t} − π_t‖² = Σ_t (1 − 2π_t(y_t) + Σ_v π_t(v)²).
b* = E[R ‖s‖²] / E[‖s‖²] is the variance-minimising baseline (Greensmith et al. 2004); in logit space it needs no
gradient pass, only Σ_v π(v)² per token, which TRL's fused LM head computes without the full logits. OPO's
length-weighted baseline is the same b* under the approximation ‖s_j‖² ∝ l_j.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .registry import ADVANTAGES

Tensor = torch.Tensor


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
    values: Tensor | None = None  # (N, T) critic V(s_t) at generation time (needs="values"; trl_zoo.critic)
    group_sizes: Tensor | None = None  # (P,) long n_p ≥ 1, Σ n_p = N: groups of unequal size; None = all G

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


# ---------------------------------------------------------------------------------------------------- helpers
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


def whiten(values: Tensor, mask: Tensor | None, unbiased: bool, epsilon: float) -> Tensor:
    """(x − mean) / (std + ε) over the masked entries of the batch (NaN rows excluded); 0 if they are all equal."""
    selected = values if mask is None else values.masked_fill(mask == 0, float("nan"))
    constant, common = constant_groups(selected.reshape(1, -1))
    mean = torch.where(constant.squeeze(), common.squeeze(), torch.nanmean(selected))  # see exact_for_constant_groups
    return (values - mean) / (nan_std(selected, unbiased=unbiased) + epsilon)


def _reinforce_pp_returns(inputs: AdvantageInputs, rewards: Tensor) -> Tensor:
    """Per-token return R_i − Σ_{s≥t} p_{i,s} = R'_i + Σ_{s<t} p_{i,s} (R' already carries −Σ_s p_s); (N, T)."""
    if inputs.mask is None:
        return rewards
    returns = rewards.unsqueeze(1).expand(inputs.mask.shape).clone()
    if inputs.token_penalty is not None:
        penalty = inputs.token_penalty * inputs.mask
        returns = returns + (penalty.cumsum(-1) - penalty)
    return returns


# ---------------------------------------------------------------------------------------------------- estimators
@ADVANTAGES.register(
    "grpo",
    description="(R − group mean) / (group std + ε); TRL's default (scale_rewards picks group/batch/none)",
    source="GRPO, arXiv:2402.03300",
)
def grpo_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = (R_i − mean R) / (std R + ε), mean and std over the group of i (``scale_rewards="group"``).

    Groups of unequal size (``group_sizes``): Â_i = (R_i − mean_p R) / (std_p R + ε) with mean_p and std_p over the
    n_p rows of i's own group (std unbiased, ÷ (n_p − 1), or population, ÷ n_p, per ``advantage_std_unbiased``). A
    group of one row has std 0 as TRL's num_generations=1: its Â = R_i − R_i = 0 exactly, even with ε = 0 (NaN for
    a NaN reward). ``scale_rewards="batch"`` divides by the std over all N rewards and ``"none"`` by nothing, as
    for equal groups.
    """
    centred = inputs.rewards - group_mean(inputs)
    scale = getattr(args, "scale_rewards", "group")
    if scale == "none":
        return centred
    unbiased = args.advantage_std_unbiased
    if scale == "group":
        if inputs.group_sizes is None and inputs.num_generations == 1:
            return centred  # TRL: std 0 for singleton groups (eval with num_generations_eval=1)
        grouped = inputs.grouped
        std = inputs.ungroup(nan_std(grouped, dim=1, unbiased=unbiased, keepdim=True).expand_as(grouped))
        if inputs.group_sizes is not None:  # a group of one: std 0, as above
            return torch.where(inputs.row_group_sizes == 1, centred, centred / (std + args.advantage_epsilon))
    elif scale == "batch":
        std = nan_std(inputs.rewards, unbiased=unbiased).expand_as(inputs.rewards)
    else:
        raise ValueError(f"scale_rewards: got {scale!r}; use 'group', 'batch' or 'none'.")
    return centred / (std + args.advantage_epsilon)


@ADVANTAGES.register("dr_grpo", description="R − group mean (no std scaling)", source="Dr. GRPO, arXiv:2503.20783")
def dr_grpo_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = R_i − mean R over i's group; with ``group_sizes``, the mean over the n_p rows of i's own group (a group
    of one gets Â = 0)."""
    return inputs.rewards - group_mean(inputs)


@ADVANTAGES.register(
    "rloo", description="leave-one-out: R_i − mean_{j≠i} R_j", source="RLOO (Ahmadian et al.), arXiv:2402.14740"
)
def rloo_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = R_i − Σ_{j≠i} R_j / (n − 1) over the scorable others j of i's group.

    With ``group_sizes``, n = n_p, i's own group's size: Â_i = n_p/(n_p − 1) · (R_i − mean_p R). A group of one
    row has no other completion, hence no baseline: Â = NaN, which the trainer turns into 0 (the rule for a
    completion whose siblings are all unscorable, and for num_generations=1).
    """
    rewards = inputs.grouped
    scorable = (~torch.isnan(rewards)).sum(1, keepdim=True).to(rewards.dtype)
    others = torch.nansum(rewards, 1, keepdim=True) - rewards
    # a completion with no scorable sibling has no baseline: NaN, zeroed by the trainer
    baseline = others / (scorable - 1).where(scorable > 1, torch.full_like(scorable, float("nan")))
    baseline = torch.where(scorable > 1, exact_for_constant_groups(baseline, rewards), baseline)
    return inputs.ungroup(rewards - baseline)


@ADVANTAGES.register("reinforce", description="R (no baseline)", source="Williams 1992")
def reinforce_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = R_i; no group enters, so ``group_sizes`` changes nothing."""
    return inputs.rewards.clone()


@ADVANTAGES.register(
    "reinforce_batch_baseline", description="R − mean of R over the whole batch", source="Williams 1992"
)
def reinforce_batch_baseline_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = R_i − mean of the N rewards; the baseline is the batch's, so ``group_sizes`` changes nothing."""
    return inputs.rewards - torch.nanmean(inputs.rewards)


@ADVANTAGES.register(
    "reinforce_pp",
    description="REINFORCE++: per-token return R − β Σ_{s≥t} KL_s, whitened over the batch's tokens",
    source="REINFORCE++, arXiv:2501.03262",
    token_level=True,
)
def reinforce_pp_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_{i,t} = whiten_batch(R_i − β Σ_{s≥t} KL_{i,s}); whitened over the batch, so ``group_sizes`` changes
    nothing."""
    returns = _reinforce_pp_returns(inputs, inputs.rewards)
    return whiten(returns, inputs.mask, args.advantage_std_unbiased, args.advantage_epsilon)


@ADVANTAGES.register(
    "reinforce_pp_baseline",
    description="REINFORCE++-baseline: R − group mean, then per-token return, whitened over the batch's tokens",
    source="REINFORCE++, arXiv:2501.03262",
    token_level=True,
)
def reinforce_pp_baseline_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_{i,t} = whiten_batch(R_i − mean R − β Σ_{s≥t} KL_{i,s}); with ``group_sizes`` the mean is over the n_p rows
    of i's own group (a group of one contributes R_i − mean R = 0 before the whitening), the whitening stays over
    the batch's tokens."""
    returns = _reinforce_pp_returns(inputs, inputs.rewards - group_mean(inputs))
    return whiten(returns, inputs.mask, args.advantage_std_unbiased, args.advantage_epsilon)


@ADVANTAGES.register(
    "opo",
    description="R − length-weighted group mean Σ l_j R_j / Σ l_j",
    source="OPO, arXiv:2505.23585",
)
def opo_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = R_i − Σ_j l_j R_j / Σ_j l_j over i's group; with ``group_sizes`` j runs over the n_p rows of i's own
    group (a group of one gets Â = 0)."""
    return inputs.rewards - weighted_group_baseline(inputs, inputs.lengths)


@ADVANTAGES.register(
    "maxrl",
    description="(R − group mean) / group mean, 0 without success: log pass rate, a prompt weighted 1/p (R ≥ 0)",
    source="MaxRL, arXiv:2602.02710",
    nonnegative_rewards=True,
)
def maxrl_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """MaxRL (Tajwar et al., arXiv:2602.02710): maximise log p(x), p the pass rate, instead of p.

    With K successes among the N = G completions of a prompt and binary rewards, the paper's estimator of the
    order-N truncated maximum-likelihood gradient (its Theorems 1 and 2) averages the score over the successes and
    subtracts the zero-mean control variate (1/N) Σ_i S_i:

        ĝ = (1/K) Σ_i r_i S_i − (1/N) Σ_i S_i = (1/N) Σ_i (r_i − r̄)/r̄ · S_i,    r̄ = K/N,   ĝ = 0 if K = 0

    so Â_i = (R_i − mean R) / mean R: the plain group mean (not leave-one-out), divided by the mean instead of
    GRPO's std, which weights a prompt by 1/p (hard prompts count more). A group with mean 0 (no success) carries
    no signal, Â = 0, as in the paper (ĝ = 0 for K = 0) and prime-rl. The authors' code (verl's
    `compute_maxrl_outcome_advantage`) divides by mean + 1e-6; here the division is exact where mean > 0, and a
    group of equal rewards gets exactly 0. S_i is the whole sequence's score: the paper's ĝ is
    `loss_aggregation="sequence_sum"` with a ratio-free loss; its own runs keep verl's PPO loss with a token mean.

    Groups of unequal size (``group_sizes``): mean R is over the n_p rows of i's own group, N = n_p in ĝ; a group of
    one gets Â = 0 (R = mean R).

    Rewards must be ≥ 0 (a pass rate: canonically 1 pass, 0 fail); with negative rewards the mean no longer bounds
    |Â| (≤ G − 1 for R ≥ 0) and the estimator raises. NaN rewards are left out of the mean and come back NaN.
    """
    scorable = inputs.rewards[~torch.isnan(inputs.rewards)]
    if scorable.numel() and bool((scorable < 0).any()):
        raise ValueError(
            f"advantage_estimator: 'maxrl' divides by the group's mean reward, a pass rate, and needs rewards ≥ 0; "
            f"got {scorable.min().item():.4g}. Use rewards in [0, 1] (1 = pass), or another estimator (e.g. 'grpo')."
        )
    mean = group_mean(inputs)
    centred = inputs.rewards - mean
    has_success = mean > 0
    return torch.where(has_success, centred / mean.where(has_success, torch.ones_like(mean)), centred * 0.0)


@ADVANTAGES.register(
    "optimal_baseline",
    description="R − b*, b* = Σ ‖s_j‖² R_j / Σ ‖s_j‖² (variance-minimising, score norm in logit space)",
    source="Weaver & Tao 2001; Greensmith et al. 2004",
    needs=("score_sq_norms",),
)
def optimal_baseline_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_i = R_i − Σ_j ‖s_j‖² R_j / Σ_j ‖s_j‖² over i's group; with ``group_sizes`` j runs over the n_p rows of i's
    own group (a group of one gets Â = 0)."""
    if inputs.score_sq_norms is None:
        raise ValueError("optimal_baseline needs score_sq_norms (‖s‖² per completion); pass score_sq_norms=.")
    return inputs.rewards - weighted_group_baseline(inputs, inputs.score_sq_norms)


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


def score_sq_norms(logps: Tensor, log_sum_sq_probs: Tensor, mask: Tensor) -> Tensor:
    """‖s_i‖² = Σ_t m_t (1 − 2π_t(y_t) + Σ_v π_t(v)²) from log π(y_t) and log Σ_v π(v)², (N,)."""
    per_token = 1.0 - 2.0 * logps.exp() + log_sum_sq_probs.exp()
    return (per_token.clamp(min=0.0) * mask).sum(-1)
