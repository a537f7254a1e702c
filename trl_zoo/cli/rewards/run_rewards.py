"""The rewards of a `trl-zoo train` run: the reward model and functions it trains on, and the one that scores its
greedy held-out evaluation.

    run_rewards(task_args, max_completion_length)  ->  RunRewards

As `trl grpo`: the reward model (if any) first, then the reward functions (`--reward_funcs`, resolved by
`reward_names.py`; by default the built-in task's reward, or exact_match with a dataset). The held-out scorer is the
first function that reads the completions (never a label-free one, majority_vote), else exact_match; with
`num_heldout 0` there is no held-out evaluation and no scorer, so a label-free run (TTRL's majority_vote) needs no
`answer` column. A function that reads a column the dataset lacks is refused in one line (`check_columns`); the
null-reward control shuffles the training rewards (`shuffled`).

Tests: tests/test_trl_grpo_fields.py (a reward reading a missing column), tests/test_chat_arithmetic.py (the
null-reward control), tests/test_model_card.py (the held-out scorer named), tests/test_reward_paths.py,
tests/test_majority_vote.py (a label-free run on prompts alone).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from ...tasks import get_task
from .null_reward_control import permuted_reward
from .reward_names import check_reward_columns, heldout_scorer, read_columns, resolve_reward


@dataclass(frozen=True)
class RunRewards:
    """A run's rewards: the functions by name, the held-out scorer and the reward model."""

    names: tuple[str, ...]  # the reward functions' names, as given (the reward model's is `model`)
    functions: tuple[Callable, ...]  # what the trainer calls, in the order of `names`
    scorer: Callable | None  # scores the greedy held-out evaluation; None: there is none (num_heldout 0)
    model: str | None  # reward_model_name_or_path

    @property
    def reads(self) -> dict[str, str]:
        """The dataset columns the rewards read, each with the first reward that reads it (the values checked)."""
        readers = [*zip(self.names, self.functions)]
        if self.scorer is not None:
            readers.append(("exact_match (the held-out evaluation's scorer)", self.scorer))
        return {column: name for name, function in reversed(readers) for column in read_columns(function)}

    def check_columns(self, columns) -> None:
        """A one-line ConfigError when a reward (or the held-out scorer) reads a column the dataset lacks."""
        for name, function in zip(self.names, self.functions):
            check_reward_columns(name, function, columns)
        if self.scorer is not None and self.scorer not in self.functions:
            scorer = "exact_match (the greedy held-out evaluation's scorer; --num_heldout 0 evaluates none)"
            check_reward_columns(scorer, self.scorer, columns)

    def shuffled(self, seed: int, log=print) -> RunRewards:
        """The null-reward control's rewards: each function's outputs permuted across each batch; the held-out
        evaluation keeps the real scorer."""
        log("null_reward_control: training rewards are shuffled across each batch (a control run); the held-out "
            "evaluation scores with the real reward.")
        functions = tuple(permuted_reward(function, seed + k) for k, function in enumerate(self.functions))
        return dataclasses.replace(self, functions=functions)

    @property
    def for_trainer(self) -> list:
        """The trainer's `reward_funcs`: the reward model's name first, then the functions."""
        return [*filter(None, [self.model]), *self.functions]

    @property
    def listed(self) -> tuple[str, ...]:
        """The rewards by name, as summary.json lists them."""
        return tuple(filter(None, [self.model, *self.names]))

    @property
    def heldout_reward(self) -> str | None:
        """The name of the function that scores the held-out evaluation; None without one."""
        if self.scorer is None:
            return None
        return self.names[self.functions.index(self.scorer)] if self.scorer in self.functions else "exact_match"


def run_rewards(task_args, max_completion_length: int | None, log=print) -> RunRewards:
    """The run's rewards as its arguments name them (module docstring)."""
    builtin = task_args.dataset_name is None and not task_args.datasets
    default_reward = get_task(task_args.task).reward_name if builtin else "exact_match"
    names = task_args.reward_funcs or ([] if task_args.reward_model_name_or_path else [default_reward])
    functions = tuple(resolve_reward(name, max_completion_length, log) for name in names)
    scorer = None if task_args.num_heldout == 0 else heldout_scorer(functions)
    return RunRewards(tuple(names), functions, scorer, task_args.reward_model_name_or_path)
