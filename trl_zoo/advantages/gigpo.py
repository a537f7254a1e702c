"""GiGPO, Group-in-Group Policy Optimization (Feng et al., arXiv:2505.10978): turn-level credit for multi-turn
rollouts, from two levels of groups and no critic. The episode level is GRPO's group of a prompt's trajectories; the
step level groups the turns, across the group's trajectories, that start from the same environment state (an
anchor state), and compares their discounted returns:

    Â^E_i     = (R(τ_i) − mean_j R(τ_j)) / F                  j over i's group (Eq. 3)
    G_{i,k}   = Σ_{k' ≥ k} γ^{k'−k} r_{i,k'}                  the return of row i's turn k (Eq. 5)
    Â^S_{i,k} = (G_{i,k} − mean_{S(i,k)} G) / F               S(i,k): the turns of i's group that start from the
                                                              state turn k of row i starts from (Eq. 6, 7)
    Â_{i,t}   = Â^E_i + ω · Â^S_{i,k(t)}                      token t of turn k(t) (Eq. 8)

F = 1 (`gigpo_mode="mean_norm"`) or the std of the same values + ε ("mean_std_norm"; std unbiased or not per
`advantage_std_unbiased`, ε = `advantage_epsilon`). The turns, their states and their rewards come from TRL's
multi-turn layout (`AdvantageInputs.turns`, `components/turns.py`): turn k is the model's reply after k tool replies.
The turn rewards are r_{i,k} = e_{i,k} + [k is i's last turn] · R_i, with e the environment's rewards of the turns
(its `turn_rewards`, 0 without) and R_i the trajectory's reward (the reward functions' weighted sum, as every
estimator's); the episode's R(τ_i) = Σ_k r_{i,k}, verl-agent's episode reward (the sum of its step rewards). Without
turn rewards r_i is (0, …, 0, R_i), the sparse setting of the paper's ALFWorld and WebShop runs, and R(τ_i) = R_i.
Without tool replies every completion is one turn from its prompt: Â = (1 + ω) · Â^E.

Where the paper and the reference code (verl-agent's `gigpo/core_gigpo.py`) differ or leave a choice, this reads:
- the episode group's mean (and std) over its trajectories, one value each: the paper's Eq. 3, not the reference.
  The reference's `episode_norm_reward` has a flag for that (`compute_mean_std_cross_steps=False`), but
  `compute_gigpo_outcome_advantage` never passes it, so the reference always weighs a trajectory by its number of
  turns (a batch row there is one turn). The two agree when every trajectory has the same number of turns and F = 1
  ("mean_norm"); with "mean_std_norm" the std of K copies of each value is not the std of the values (unbiased: the
  count n·K − 1 against n − 1), so even then they differ.
- F: "mean_norm" by default, the default of the reference's `compute_gigpo_outcome_advantage`; the authors' ALFWorld
  scripts run "mean_std_norm" (mean and std), and the paper allows both.
- γ = 0.95 and ω = 1, the paper's and the reference scripts' values.
- anchor states compared exactly (the reference's default; its similarity-based grouping is not offered).
- a group (or anchor group) whose values are all equal, a group of one included, gets exactly 0 (the reference
  divides the float residue by ε, and gives a lone trajectory's episode advantage R − 0); an unscorable reward (NaN)
  is left out of every mean, and its row's advantage is NaN (the trainer turns it into 0).

Tests: tests/test_gigpo.py (a transcription of the reference's step-level advantage on random batches, the closed
form of a two-turn environment through the trainer, the refused settings).
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from ..specs import PluginField
from .base import AdvantageInputs, group_centred, refuse_per_function_and_sampling

Tensor = torch.Tensor

FIELDS = (
    PluginField("gigpo_step_weight", float, 1.0,
                "GiGPO: weight ω of the step-level (anchor-state) advantage added to the episode one (paper: 1).",
                low=0),
    PluginField("gigpo_gamma", float, 0.95,
                "GiGPO: discount γ of the turn returns G_k = Σ γ^(k'−k) r_k' (paper: 0.95).", low=0, high=1),
    PluginField("gigpo_mode", str, "mean_norm",
                "GiGPO: 'mean_norm' subtracts the group's (and anchor group's) mean; 'mean_std_norm' also divides by "
                "the std + advantage_epsilon (the reference's two modes; its function's default: mean_norm, its "
                "ALFWorld scripts': mean_std_norm).",
                choices=("mean_norm", "mean_std_norm")),
)


def turn_returns(rewards: Tensor, present: Tensor, gamma: float) -> Tensor:
    """G_{i,k} = Σ_{k' ≥ k} γ^{k'−k} r_{i,k'} over row i's turns, (N, K); NaN where there is no turn k."""
    returns = torch.full_like(rewards, float("nan"))
    running = rewards.new_zeros(rewards.size(0))
    for k in reversed(range(rewards.size(1))):
        running = torch.where(present[:, k], rewards[:, k] + gamma * running, running.new_zeros(()))
        returns[:, k] = running
    return returns.masked_fill(~present, float("nan"))


def normalised_in_clusters(values: Tensor, cluster: Tensor, scaled: bool, unbiased: bool, epsilon: float) -> Tensor:
    """(x − mean_c) / F per entry of the flat `values`, over the entries of its `cluster` (ids 0 … C−1), NaNs left
    out; exactly 0 in a cluster whose scorable values are all equal (one value included)."""
    count = int(cluster.max()) + 1 if cluster.numel() else 0
    scored = ~torch.isnan(values)
    number = values.new_zeros(count).index_add_(0, cluster, scored.to(values.dtype))
    total = values.new_zeros(count).index_add_(0, cluster, values.nan_to_num(0.0))
    highest = values.new_full((count,), float("-inf")).scatter_reduce(
        0, cluster, values.masked_fill(~scored, float("-inf")), "amax")
    lowest = values.new_full((count,), float("inf")).scatter_reduce(
        0, cluster, values.masked_fill(~scored, float("inf")), "amin")
    centred = values - (total / number)[cluster]
    constant = (highest == lowest)[cluster]
    if scaled:
        squares = values.new_zeros(count).index_add_(0, cluster, (centred**2).nan_to_num(0.0))
        divisor = number - 1 if unbiased else number
        std = torch.sqrt(squares / divisor.clamp(min=1))[cluster]
        centred = centred / (std + epsilon)
    return torch.where(constant, values - values, centred)


def anchor_clusters(states: Tensor, groups: Tensor) -> Tensor:
    """The anchor group of each present turn, flat over `states >= 0` in row-major order: turns of one prompt's group
    (`groups`, (N,)) that start from the same state share an id 0 … C−1."""
    present = states >= 0
    rows = groups.unsqueeze(1).expand_as(states)[present]
    keys = rows * (int(states.max()) + 1) + states[present]
    return torch.unique(keys, return_inverse=True)[1]


def check_gigpo(args) -> None:
    """What GiGPO's two levels of groups cannot be combined with."""
    refuse_per_function_and_sampling(
        args,
        "gigpo's turn returns add the environment's turn rewards to the summed reward",
        "keeps or regroups rows by their trajectory's reward, which drops gigpo's anchor groups (turns with a signal "
        "under an all-equal episode reward)",
    )


@ADVANTAGES.register(
    "gigpo",
    description="episode group advantage + ω · anchor-state group advantage of each turn's discounted return",
    source="GiGPO, arXiv:2505.10978",
    token_level=True,
    needs=("turns",),
    validate=check_gigpo,
    fields=FIELDS,
)
def gigpo_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_{i,t} = Â^E_i + ω Â^S_{i,k(t)} on the tokens of row i's turns, 0 on tool replies and padding (N, T)."""
    if inputs.mask is None:
        raise ValueError("gigpo needs the completion mask (its advantages are per token); pass mask=.")
    turns = inputs.turns
    if turns is None:  # every completion one turn from its prompt
        count = inputs.rewards.numel()
        token_turns = inputs.mask.new_zeros(inputs.mask.shape, dtype=torch.long)
        states = token_turns.new_zeros((count, 1))
        turn_rewards = inputs.rewards.new_zeros((count, 1))
    else:
        token_turns, states, turn_rewards = turns.token_turns, turns.states, turns.rewards
    scaled = getattr(args, "gigpo_mode", "mean_norm") == "mean_std_norm"
    present = states >= 0
    last = present & (present.cumsum(-1) == present.sum(-1, keepdim=True))
    environment = turn_rewards.masked_fill(~present, 0.0)  # e_{i,k}
    step_rewards = environment + torch.where(last, inputs.rewards.unsqueeze(1), 0.0)  # r_{i,k}
    episode = group_centred(inputs, inputs.rewards + environment.sum(-1), scaled, args)  # R(τ_i) = Σ_k r_{i,k}

    returns = turn_returns(step_rewards, present, getattr(args, "gigpo_gamma", 0.95))
    groups = torch.arange(inputs.sizes.numel(), device=states.device).repeat_interleave(inputs.sizes)
    step = torch.full_like(returns, float("nan"))
    if bool(present.any()):
        step[present] = normalised_in_clusters(
            returns[present], anchor_clusters(states, groups), scaled, args.advantage_std_unbiased,
            args.advantage_epsilon,
        )
    weight = getattr(args, "gigpo_step_weight", 1.0)
    per_turn = episode.unsqueeze(1) + weight * step
    on_turn = token_turns >= 0
    advantages = per_turn.gather(1, token_turns.clamp(min=0))
    return torch.where(on_turn, advantages, advantages.new_zeros(()))
