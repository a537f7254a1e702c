"""Reward shaping for length: DAPO's soft overlong punishment (arXiv:2503.14476, eq. 13), added to the task reward,
and DLER's truncation penalty (arXiv:2510.15110), which scales it.

Soft overlong punishment. With L_max the overlong max length and L_cache the buffer before it, a completion of |y|
tokens gets

    R_length(y) = 0                                   if |y| ≤ L_max − L_cache
                = ((L_max − L_cache) − |y|) / L_cache  if L_max − L_cache < |y| ≤ L_max
                = −1                                  if |y| > L_max

times `overlong_penalty_factor`, added to the task reward. The ramp reaches −1 exactly at L_max, so the
punishment is continuous. |y| counts every completion token the policy generated, the end-of-sequence token
included (TRL's `completion_ids`). With L_max = max_completion_length (the default) no completion is longer
than L_max, and a truncated completion gets the full −1.

The trainer adds it as one more reward function named `soft_overlong_punishment` (`with_soft_overlong_punishment`,
before TRL's constructor runs), so TRL logs it on its own (`rewards/soft_overlong_punishment/mean`) and sums it with
the task rewards (weight 1). It is not a task reward: dynamic sampling and VAPO's positive examples leave it out.

Truncation penalty (DLER). With L = `truncation_length` (default max_completion_length) and c = `truncation_penalty`,
every task reward of a completion is multiplied by

    s(y) = 1   if y ended within L tokens: its last token is an end-of-sequence (or padding) token and |y| ≤ L
         = c   otherwise (cut at L, or still running past it)

|y| counted as above, so a completion whose end-of-sequence token is its L-th token has ended within L (the tie).
The paper's truncation penalty is c = 0: a completion longer than the budget L gets reward 0, whatever its answer,
and its runs stop generating at L (L = max_completion_length here: truncated = cut). The authors' released recipe
(NVlabs/DLER, `stop_properly_penalty.penalty_coef`) multiplies by c = 0.1 instead, at L = 4000 tokens; both are
this rule. It multiplies the task rewards, not the shaping terms (a soft overlong punishment keeps its value), so
dynamic sampling sees the penalised rewards, as in DLER's recipe; an unscorable (None) reward stays unscorable. The
reward hook applies it to the rewards of every process's completions (`truncation_penalized`).

The rule assumes task rewards ≥ 0 (DLER's are 0/1): a negative reward times c ≤ 1 moves up toward 0, so with
wrong = −1 and c = 0 a cut completion (0) scores above an ended wrong one (−1) and truncation is rewarded. Rewards are
known only once scored, so the first batch in which a penalised completion's task reward is below 0 warns once
(`TRUNCATION_WARNING`), naming the fixes: rewards shifted to ≥ 0, or the soft overlong punishment, which subtracts.

Tests: tests/test_overlong.py, tests/test_sampling.py (not a task reward), tests/test_truncation_penalty.py.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import torch

# One text, so Python's default filter shows it once a process (rewards are known only once scored).
TRUNCATION_WARNING = (
    "truncation_penalty: a completion it penalises has a task reward below 0, which the penalty multiplies by "
    "truncation_penalty ≤ 1 and so raises toward 0: a cut completion then scores above an ended one with that reward, "
    "so truncation is rewarded; shift the task rewards to be ≥ 0 (e.g. 0 for wrong, 1 for right), or penalise length "
    "with overlong_buffer_length (DAPO's soft overlong punishment, which subtracts) instead. Shown once."
)


def soft_overlong_punishment(length: int, max_length: int, buffer_length: int, factor: float = 1.0) -> float:
    """R_length for a completion of `length` tokens (formula in the module docstring), scaled by `factor`."""
    if not 0 < buffer_length <= max_length:
        raise ValueError(
            f"overlong_buffer_length: L_cache={buffer_length} must be in (0, {max_length}] (the overlong max length)."
        )
    safe_length = max_length - buffer_length
    if length <= safe_length:
        penalty = 0.0
    elif length <= max_length:
        penalty = (safe_length - length) / buffer_length
    else:
        penalty = -1.0
    return factor * penalty


class SoftOverlongPunishment:
    """Reward function (TRL's signature) giving each completion its soft overlong punishment."""

    def __init__(self, max_length: int, buffer_length: int, factor: float = 1.0):
        soft_overlong_punishment(0, max_length, buffer_length)  # validates the lengths once, up front
        self.max_length = max_length
        self.buffer_length = buffer_length
        self.factor = factor
        self.__name__ = "soft_overlong_punishment"  # TRL names the reward column after it

    def __call__(self, completions, completion_ids, **kwargs) -> list[float]:
        return [
            soft_overlong_punishment(len(ids), self.max_length, self.buffer_length, self.factor)
            for ids in completion_ids
        ]

    def __repr__(self):
        return (
            f"SoftOverlongPunishment(max_length={self.max_length}, buffer_length={self.buffer_length}, "
            f"factor={self.factor})"
        )


def is_reward_shaping(reward_func) -> bool:
    """True for the shaping terms this module adds to the reward functions (not task rewards)."""
    return isinstance(reward_func, SoftOverlongPunishment)


def with_soft_overlong_punishment(reward_funcs, args, positional: tuple, kwargs: dict):
    """The trainer's constructor arguments with the soft overlong punishment appended to the reward functions (and
    to `reward_weights`, weight 1, and to the reward processing classes) when `overlong_buffer_length` is set."""
    if getattr(args, "overlong_buffer_length", None) is None:
        return reward_funcs, args, positional, kwargs
    max_length = args.overlong_max_length or args.max_completion_length
    punishment = SoftOverlongPunishment(max_length, args.overlong_buffer_length, args.overlong_penalty_factor)
    funcs = [] if reward_funcs is None else list(reward_funcs) if isinstance(reward_funcs, list) else [reward_funcs]
    if any(is_reward_shaping(fn) for fn in funcs):
        return reward_funcs, args, positional, kwargs
    if args.reward_weights is not None:
        args = copy.copy(args)  # the caller's config keeps its own list
        args.reward_weights = [*args.reward_weights, 1.0]
    positional = list(positional)
    processing_index = 3  # (train_dataset, eval_dataset, processing_class, reward_processing_classes, ...)
    classes = (
        positional[processing_index]
        if len(positional) > processing_index
        else kwargs.get("reward_processing_classes")
    )
    if classes is not None:
        classes = [*classes, None] if isinstance(classes, list) else [classes] * len(funcs) + [None]
        if len(positional) > processing_index:
            positional[processing_index] = classes
        else:
            kwargs = {**kwargs, "reward_processing_classes": classes}
    return [*funcs, punishment], args, tuple(positional), kwargs


def truncation_penalty(length: int, ended: bool, max_length: int, factor: float = 0.0) -> float:
    """s(y), the factor of a completion's task rewards (module docstring): 1 when it `ended` (its last token an
    end-of-sequence token) within `max_length` tokens, `factor` otherwise."""
    return 1.0 if ended and length <= max_length else factor


def truncation_penalized(
    rewards_per_func: torch.Tensor, completion_ids, end_ids, reward_funcs, args, gather: Callable
) -> torch.Tensor:
    """The rewards (rows of every process, one column per reward function) with each task reward column multiplied by
    its completion's s(y) when `args.truncation_penalty` is set; the same tensor otherwise. `completion_ids` are this
    process's completions (token ids, the end-of-sequence token included), `end_ids` the token ids that end one, and
    `gather` collects a per-row tensor from every process in the rewards' row order. A penalised completion's task
    reward below 0 warns (`TRUNCATION_WARNING`)."""
    factor = getattr(args, "truncation_penalty", None)
    if factor is None:
        return rewards_per_func
    max_length = args.truncation_length or args.max_completion_length
    device = rewards_per_func.device
    scales = [truncation_penalty(len(ids), len(ids) > 0 and ids[-1] in end_ids, max_length, factor)
              for ids in completion_ids]
    scales = gather(torch.tensor(scales, dtype=rewards_per_func.dtype, device=device))
    task = torch.tensor([not is_reward_shaping(fn) for fn in reward_funcs], device=device)
    if ((scales < 1).unsqueeze(1) & task & (rewards_per_func < 0)).any():
        warnings.warn(TRUNCATION_WARNING, stacklevel=2)
    return torch.where(task, rewards_per_func * scales.unsqueeze(1), rewards_per_func)
