"""TRL's multi-turn rollouts read as turns (`advantages.Turns`), for an estimator that declares `needs=("turns",)`.

TRL 1.16 lays a rollout with tool calls (`tools`, `environment_factory`) out as one completion: the model's first
turn, then each tool reply (the tool messages as the chat template renders them, with the next generation prompt)
followed by the model's next turn; its `tool_mask` is 0 on the reply's tokens. Turn 0 is the completion's tokens
before the first reply, turn k those after the k-th reply (a turn the length budget cut to nothing still counts: its
reply was given). A row with no trained token (TRL's `mask_truncated_completions`) has no turn.

The state a turn starts from is what the environment last showed the model: the prompt (with the environment's
`reset()` observation) for turn 0, the tokens of the k-th tool reply for turn k. Two turns start from the same state
when those token sequences are equal, as GiGPO's reference code compares its observations.

Turn rewards: an environment may keep `turn_rewards`, a list of its rewards of the rollout's turns in order, one per
turn (a turn's tool calls share one; None is an unscorable reward); an attribute, not a method, since TRL offers
every public method of an environment to the model as a tool. It is read once per rollout, after the rollout's
rewards; turns past the list's end get 0, so an environment that cannot judge the last turn (the reward functions
do) lists those of the turns it answered. A list longer than the rollout's turns is refused. Without the attribute
every turn reward is 0. What is not such a list is refused at the round that reads it, in one line naming
`turn_rewards`, the rollout (its row in TRL's gathered batch) and the environment's class: another type (a number, a
string, a dict), an entry that is not a number or None, NaN or ±inf (None is the unscorable reward), or a reward
beyond ±`MAX_ABS_REWARD` (1e15), as a reward function's would be.

Tests: tests/test_gigpo.py, tests/test_mt_grpo.py (a two-turn environment through the trainer).
"""

from __future__ import annotations

import math
from numbers import Real

import torch

from ..advantages import Turns
from ..numerics import short_repr
from .rewards import MAX_ABS_REWARD

TURN_REWARDS = "turn_rewards"  # the environment's attribute


def gathered_turns(trainer, batch: dict) -> Turns:
    """The turns of a generation round's rows over every process (the estimator's global batch)."""
    accelerator = trainer.accelerator

    def gathered(values: torch.Tensor, pad) -> torch.Tensor:
        return accelerator.gather(accelerator.pad_across_processes(values, dim=1, pad_index=pad))

    completion_mask = batch["completion_mask"]
    tool_mask = batch.get("tool_mask")
    tool_mask = torch.ones_like(completion_mask) if tool_mask is None else tool_mask
    rows = completion_mask.size(0)
    first = accelerator.process_index * rows  # TRL's gathered order: process-major
    given, counts = environment_turn_rewards(trainer.environments, rows, completion_mask.device, first)
    return turns_of(
        gathered(batch["prompt_ids"], 0), gathered(batch["prompt_mask"], 0), gathered(batch["completion_ids"], 0),
        gathered(completion_mask, 0), gathered(tool_mask, 1), gathered(given, 0.0), accelerator.gather(counts),
    )


def environment_turn_rewards(environments, rows: int, device, first_row: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """((rows, L) the rewards each rollout's environment gave its turns, zero-padded; (rows,) how many it gave);
    `first_row`, this process's first row in TRL's gathered batch, numbers the rollouts in an error."""
    lists = [[] for _ in range(rows)]
    for i, environment in enumerate(environments or ()):
        values = getattr(environment, TURN_REWARDS, None)
        if values is not None:
            lists[i] = checked_turn_rewards(values, first_row + i, environment)
    counts = torch.tensor([len(values) for values in lists], dtype=torch.long, device=device)
    given = torch.zeros(rows, max(1, int(counts.max()) if rows else 1), device=device)
    for i, values in enumerate(lists):
        given[i, : len(values)] = torch.tensor(values)
    return given, counts


def checked_turn_rewards(values, rollout: int, environment) -> list[float]:
    """An environment's `turn_rewards` as floats (None: NaN, unscorable); a one-line ValueError naming the rollout
    and the environment's class for anything else (the module docstring)."""
    who = f"{TURN_REWARDS}: rollout {rollout}'s environment ({type(environment).__name__})"
    fix = "keep a list of one number per turn (None: a turn it cannot score), e.g. [1.0]"
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"{who} holds {short_repr(values)} ({type(values).__name__}), not a list; {fix}.")
    rewards = []
    for turn, value in enumerate(values):
        if value is None:
            rewards.append(float("nan"))
            continue
        if not isinstance(value, Real):
            raise ValueError(
                f"{who} gives turn {turn} {short_repr(value)} ({type(value).__name__}), not a number; {fix}."
            )
        reward = float(value)
        if not math.isfinite(reward):
            raise ValueError(
                f"{who} gives turn {turn} the reward {reward}; give a finite number, or None for a turn it cannot "
                f"score."
            )
        if abs(reward) > MAX_ABS_REWARD:
            raise ValueError(
                f"{who} gives turn {turn} the reward {reward:.3g}; rewards beyond ±{MAX_ABS_REWARD:.0e} overflow the "
                f"group std in float32 and nothing is learned; rescale the environment's rewards."
            )
        rewards.append(reward)
    return rewards


def turns_of(prompt_ids, prompt_mask, completion_ids, completion_mask, tool_mask, given, given_counts) -> Turns:
    """`Turns` from TRL's tensors (the docstring above) and the environments' turn rewards (`given`, (N, L), of which
    the first `given_counts` are real)."""
    real = completion_mask.bool()
    model = real & tool_mask.bool()
    reply = real & ~tool_mask.bool()
    reply_starts = reply & ~torch.nn.functional.pad(reply[:, :-1], (1, 0), value=False)
    token_turns = torch.where(model, reply_starts.long().cumsum(-1), -1)
    counts = torch.where(model.any(-1), reply_starts.sum(-1) + 1, 0)
    width = max(1, int(counts.max()) if counts.numel() else 1)

    ids: dict[tuple, int] = {}
    states = torch.full((counts.numel(), width), -1, dtype=torch.long)
    for i, count in enumerate(counts.tolist()):
        if count == 0:
            continue
        keys = [("prompt", *prompt_ids[i][prompt_mask[i].bool()].tolist())]
        tokens, replies = completion_ids[i].tolist(), reply[i].tolist()
        for start in reply_starts[i].nonzero().flatten().tolist():
            end = start
            while end < len(replies) and replies[end]:
                end += 1
            keys.append(("reply", *tokens[start:end]))
        states[i, :count] = torch.tensor([ids.setdefault(key, len(ids)) for key in keys])

    too_many = (given_counts > counts) & (counts > 0)
    if bool(too_many.any()):
        i = int(too_many.nonzero()[0])
        raise ValueError(
            f"{TURN_REWARDS}: rollout {i} has {int(counts[i])} turns but its environment lists "
            f"{int(given_counts[i])} rewards; list one reward per turn (a turn's tool calls share one)."
        )
    positions = torch.arange(width, device=given.device)
    padded = torch.nn.functional.pad(given, (0, max(0, width - given.size(1))))[:, :width]
    rewards = torch.where(positions < given_counts.unsqueeze(1), padded, 0.0)
    rewards = rewards.masked_fill(positions >= counts.unsqueeze(1), float("nan"))
    return Turns(token_turns=token_turns, states=states.to(completion_ids.device), rewards=rewards)
