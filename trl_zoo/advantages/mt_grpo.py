"""MT-GRPO, Multi-Turn GRPO (Zeng et al., arXiv:2505.11821): turn-level credit for a two-turn tool rollout (a turn
that calls a tool, then the answer after its reply) from two GRPO-normalised rewards, no critic. The outcome
advantage goes to every token, the turn advantage to the first turn's:

    Â^O_i   = (R_i − mean R) / (std R + ε)                   outcome: the trajectory's reward
    Â^T_i   = (r_i − mean r) / (std r + ε)                   turn: the reward of the tool-calling turn
    Â^C_i   = (R_i + r_i − mean(R + r)) / (std(R + r) + ε)   both: for a rollout that called no tool
    Â_{i,t} = Â^O_i + λ · [t in turn 0] · Â^T_i              rollout i called a tool (two turns)
    Â_{i,t} = Â^C_i                                          rollout i answered at once (one turn)

means and stds over i's group (every rollout of the prompt, of either kind; std unbiased or not per
`advantage_std_unbiased`, ε = `advantage_epsilon`), λ = `mt_grpo_turn_advantage_coef` (the reference's
`turn_advantage_coef`, 1). The turns come from TRL's multi-turn layout (`AdvantageInputs.turns`,
`components/turns.py`): turn 0 is the model's reply before the tool reply (every tool reply counts, an error reply
included), turn 1 the one after it; tool replies and padding get 0. R_i is the trajectory's reward (the reward
functions' weighted sum, as every estimator's); r_i is the environment's reward of turn 0, the first entry of its
`turn_rewards` list (0 without the list, for a rollout that called no tool and whose environment listed nothing, or for
a row with no trained token, as in gigpo).

A group whose values are all equal (a group of one included) gets exactly 0; an unscorable reward (NaN R_i, or a
None turn reward) is left out of every mean, and the tokens whose advantage it enters are NaN (the trainer turns them
into 0). Without turn rewards (every r_i = 0) Â^T = 0 and Â^C = Â^O: MT-GRPO is GRPO. Without tool replies every
rollout is one turn: Â = Â^C.

Refused, in one line each: a rollout of more than two turns (naming TRL's `max_tool_calling_iterations=1`, which
bounds a rollout to one round of tool calls), and an environment that gives the answer's turn a reward of its own
(a second `turn_rewards` entry other than 0: MT-GRPO's answer is scored by the reward functions alone). How this
reads the reference code (SiliangZeng/Multi-Turn-RL-Agent) where the paper leaves a choice: docs/algorithms.md,
"Two-turn tool use".

Tests: tests/test_mt_grpo.py (a transcription of the reference's advantage assignment on random batches, the closed
form of a two-turn environment through the trainer, the refused settings and rollouts).
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from ..specs import PluginField
from .base import AdvantageInputs, group_centred, refuse_per_function_and_sampling

Tensor = torch.Tensor

FIELDS = (
    PluginField("mt_grpo_turn_advantage_coef", float, 1.0,
                "MT-GRPO: weight λ of the turn advantage added to the outcome one on the tool-calling turn's tokens "
                "(the reference's turn_advantage_coef: 1).", low=0),
)


def group_normalised(inputs: AdvantageInputs, values: Tensor, args) -> Tensor:
    """(x_i − mean x) / (std x + ε) over i's group, (N,); exactly 0 in a group of equal values."""
    return group_centred(inputs, values, True, args)


def check_mt_grpo(args) -> None:
    """What MT-GRPO's turn reward cannot be combined with."""
    refuse_per_function_and_sampling(
        args,
        "mt_grpo normalises the environment's turn reward beside the summed reward",
        "keeps or regroups rows by their trajectory's reward, which drops mt_grpo's turn signal (groups whose turn "
        "rewards differ under an all-equal outcome)",
    )


def first_turn_rewards(turns, count: int, device, dtype) -> tuple[Tensor, Tensor]:
    """((N,) r_i, the environment's reward of turn 0; (N,) bool: row i has a tool reply), refusing rollouts of more
    than two turns and a reward of the answer's turn."""
    if turns is None:
        return torch.zeros(count, device=device, dtype=dtype), torch.zeros(count, dtype=torch.bool, device=device)
    counts = turns.counts
    if bool((counts > 2).any()):
        i = int((counts > 2).nonzero()[0])
        raise ValueError(
            f"mt_grpo: rollout {i} has {int(counts[i])} turns; MT-GRPO credits a tool-calling turn and the answer "
            f"after its reply (two turns), so set max_tool_calling_iterations=1 or use advantage_estimator='gigpo'."
        )
    rewards = turns.rewards.to(dtype).masked_fill(~turns.present, 0.0)
    if rewards.size(1) > 1 and bool((rewards[:, 1] != 0).any()):
        i = int((rewards[:, 1] != 0).nonzero()[0])
        raise ValueError(
            f"turn_rewards: rollout {i}'s environment gives its answer's turn (turn 1) the reward "
            f"{float(rewards[i, 1])}; mt_grpo scores the answer by the reward functions, so list the tool-calling "
            f"turn's reward only."
        )
    return rewards[:, 0], counts == 2


@ADVANTAGES.register(
    "mt_grpo",
    description="outcome group advantage on every token + λ · the tool-calling turn's group advantage on its tokens",
    source="MT-GRPO, arXiv:2505.11821",
    token_level=True,
    needs=("turns",),
    validate=check_mt_grpo,
    fields=FIELDS,
)
def mt_grpo_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_{i,t} = Â^O_i + λ Â^T_i on turn 0 of a two-turn row, Â^O_i on its turn 1, Â^C_i on a one-turn row; 0 on
    tool replies and padding (N, T)."""
    if inputs.mask is None:
        raise ValueError("mt_grpo needs the completion mask (its advantages are per token); pass mask=.")
    rewards = inputs.rewards
    turn_reward, called = first_turn_rewards(inputs.turns, rewards.numel(), rewards.device, rewards.dtype)
    outcome = group_normalised(inputs, rewards, args)
    turn = group_normalised(inputs, turn_reward, args)
    combined = group_normalised(inputs, rewards + turn_reward, args)
    weight = getattr(args, "mt_grpo_turn_advantage_coef", 1.0)
    first = outcome + weight * turn if weight else outcome
    per_turn = torch.stack([torch.where(called, first, combined), outcome], dim=1)  # (N, 2): turn 0, turn 1
    if inputs.turns is None:  # every completion one turn from its prompt
        token_turns = inputs.mask.new_zeros(inputs.mask.shape, dtype=torch.long).masked_fill(inputs.mask == 0, -1)
    else:
        token_turns = inputs.turns.token_turns
    on_turn = token_turns >= 0
    advantages = per_turn.gather(1, token_turns.clamp(min=0))
    return torch.where(on_turn, advantages, advantages.new_zeros(()))
