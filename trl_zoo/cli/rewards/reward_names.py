"""Reward names of `trl-zoo train --reward_funcs`, resolved as `trl grpo` resolves them, plus trl_zoo's own.

    exact_match, final_number,           trl_zoo's answer checks (`tasks/rewards.py`)
    final_answer
    majority_vote                        TTRL's label-free reward: agreement with the majority answer of the prompt's
                                         completions (`tasks/majority_vote.py`); never the held-out scorer
    a name in TRL's reward registry      `trl.rewards.__all__`: a reward function is used as is; a factory
                                         (`get_...`, which returns the reward function) is called with the
                                         arguments `trl grpo` gives it, else with its own defaults when every
                                         argument has one, else refused with one line saying how to pass it
    package.module.function              imported from the working directory or the installed packages (runs user
                                         code, as in TRL); a builtin (builtins.eval, os.system) or a function of
                                         Python's standard library is refused: it is no reward function

`trl grpo` configures one factory, `get_soft_overlong_punishment`, with fixed arguments (L_max = 1280 and
L_cache = 256 tokens, DAPO arXiv:2503.14476 eq. 13); trl_zoo calls TRL's factory with the same ones, so a TRL YAML
means the same reward here. For a punishment tied to this run's lengths use `overlong_buffer_length` (and
`overlong_max_length`), trl_zoo's own soft overlong punishment.

Tests: tests/test_reward_paths.py (reward functions by name and by path), tests/test_trl_grpo_fields.py,
tests/test_error_lines.py (a builtin or standard-library path refused).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys

from ...numerics import short_repr
from ...tasks.majority_vote import majority_vote_reward
from ...tasks.rewards import REWARDS as ANSWER_CHECKS
from ..errors import ConfigError, one_line

REWARDS = {**ANSWER_CHECKS, "majority_vote": majority_vote_reward}

# The factories `trl grpo` (trl/scripts/grpo.py) builds, with the keyword arguments it passes them.
TRL_GRPO_FACTORY_ARGUMENTS = {"get_soft_overlong_punishment": {"max_completion_len": 1280, "soft_punish_cache": 256}}


def trl_reward_names() -> list[str]:
    """The reward functions and factories TRL exports from `trl.rewards` (its submodules left out)."""
    import trl.rewards

    return [name for name in trl.rewards.__all__ if not name.endswith("_rewards")]


def is_factory(function) -> bool:
    """A reward factory takes its settings and returns the reward; a reward function takes the completions."""
    parameters = inspect.signature(function).parameters
    return not ({"completions", "completion_ids"} & set(parameters))


def trl_reward(name: str, max_completion_length: int | None = None, log=print):
    """TRL's registered reward `name`, built the way `trl grpo` builds it."""
    import trl.rewards

    function = getattr(trl.rewards, name)
    if not is_factory(function):
        return function
    signature = inspect.signature(function)
    if name not in TRL_GRPO_FACTORY_ARGUMENTS:
        if all(parameter.default is not parameter.empty for parameter in signature.parameters.values()):
            return function()
        raise ConfigError(
            f"reward_funcs: {name} is a TRL reward factory{signature} that `trl grpo` does not configure; build the "
            f"reward in a module of yours (e.g. my_rewards.py: `reward = {name}(...)`) and pass --reward_funcs "
            f"my_rewards.reward."
        )
    arguments = TRL_GRPO_FACTORY_ARGUMENTS[name]
    if name == "get_soft_overlong_punishment" and max_completion_length is not None:
        start = arguments["max_completion_len"] - arguments["soft_punish_cache"]
        if max_completion_length <= start:
            settings = ", ".join(f"{key}={value}" for key, value in arguments.items())
            log(
                f"reward_funcs: {name} as `trl grpo` builds it ({settings}) "
                f"punishes completions longer than {start} tokens, so with max_completion_length "
                f"{max_completion_length} it is always 0; overlong_buffer_length sets a punishment for this run's "
                f"lengths."
            )
    return function(**arguments)


def reads_completions(function) -> bool:
    """Whether a reward function scores the completions' text (answer checks do; length and repetition penalties
    read only the token ids)."""
    try:
        return "completions" in inspect.signature(function).parameters
    except (TypeError, ValueError):  # a callable without a signature Python can read
        return False


# What TRL passes every reward function besides the dataset's columns (other than `prompt`).
TRL_REWARD_ARGUMENTS = {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"}


def read_columns(function) -> list[str]:
    """The dataset columns a reward function needs: its required arguments besides what TRL passes every reward."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [
        p.name for p in parameters if p.kind in kinds and p.default is p.empty and p.name not in TRL_REWARD_ARGUMENTS
    ]


def check_reward_columns(name: str, function, columns) -> None:
    """A one-line ConfigError when `function` needs a dataset column the dataset lacks (TRL would raise a TypeError
    at the first batch)."""
    missing = [column for column in read_columns(function) if column not in columns]
    if missing:
        raise ConfigError(
            f"reward_funcs: {name} reads the dataset column {missing[0]!r}, which the dataset lacks (its columns: "
            f"{', '.join(columns)}); rename a column to {missing[0]!r} (answer_column renames to 'answer') or choose "
            f"another reward."
        )


def heldout_scorer(functions):
    """The reward that scores the greedy held-out evaluation: the first that reads the completions and is not
    label-free (majority_vote scores agreement, not correctness), else exact_match."""
    checks = (f for f in functions if reads_completions(f) and not getattr(f, "label_free", False))
    return next(checks, REWARDS["exact_match"])


def dotted_reward(path: str):
    """The reward function a dotted path names; a one-line ConfigError when it cannot be imported or names anything
    but a reward function (TRL would take a string for a reward model's name, and call a class or a factory with
    the completions)."""
    module_name, attribute = path.rsplit(".", 1)
    sys.path.insert(0, os.getcwd())
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except Exception as error:  # a missing module or attribute, an empty name, or the module failing on import
        raise ConfigError(
            f"reward_funcs: cannot import {path!r} ({type(error).__name__}: {one_line(error)})."
        ) from None
    fix = "give the path of a function fn(completions, **kwargs) -> list[float | None]"
    if inspect.isclass(target):
        raise ConfigError(
            f"reward_funcs: {path!r} is a class; {fix}, or build the reward in your module "
            f"(reward = {attribute}(...)) and give that path."
        )
    if not callable(target):
        what = "None" if target is None else f"{type(target).__name__} {short_repr(target, 60)}"
        raise ConfigError(f"reward_funcs: {path!r} is {what}, not callable; {fix}.")
    not_yours = _not_a_users_function(module_name, target)
    if not_yours:
        raise ConfigError(
            f"reward_funcs: {path!r} is not a reward function ({not_yours}); write one in a module of yours, e.g. "
            f"my_rewards.py: `def reward(completions, **kwargs): return [...]`, and pass --reward_funcs "
            f"my_rewards.reward."
        )
    if inspect.isfunction(target) and is_factory(target) and not _takes_any_keyword(target):
        raise ConfigError(
            f"reward_funcs: {path!r} looks like a reward factory{inspect.signature(target)} (it takes no "
            f"completions); build the reward in your module (reward = {attribute}(...)) and give that path."
        )
    return target


def _not_a_users_function(module_name: str, target) -> str | None:
    """Why `target` cannot be a reward function the user wrote: a builtin (`builtins.eval`, `os.system`: C code,
    which TRL would call with the completions), or anything of Python's standard library (`shutil.rmtree`); None
    when it may be one."""
    if inspect.isbuiltin(target):
        return "a builtin"
    top = module_name.split(".")[0]
    file = getattr(sys.modules.get(module_name), "__file__", None)
    yours = file is not None and os.path.realpath(file).startswith(os.path.realpath(os.getcwd()) + os.sep)
    if top in sys.stdlib_module_names and not yours:  # a module of the working directory named like one stays
        return f"{top} is Python's standard library"
    return None


def _takes_any_keyword(function) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(function).parameters.values())


def resolve_reward(name: str, max_completion_length: int | None = None, log=print):
    """The reward function a `--reward_funcs` entry names; a one-line ConfigError when there is none."""
    if name in REWARDS:
        return REWARDS[name]
    if name in trl_reward_names():
        return trl_reward(name, max_completion_length, log)
    if "." in name:
        return dotted_reward(name)
    raise ConfigError(
        f"reward_funcs: unknown reward {name!r}; use one of {', '.join(REWARDS)}, a TRL reward "
        f"({', '.join(trl_reward_names())}), or a dotted import path."
    )
