"""Component: the reward seam, the pipeline's `scored_rewards` hook point (TRL's `_calculate_rewards`).

- Reward shaping: the soft overlong punishment (`trl_zoo/reward_shaping.py`) is appended to the reward functions
  before TRL's constructor runs; DLER's truncation penalty scales the task rewards after TRL's reward call.
- Checks: a reward function that returns NaN or ±inf is an error (or, on request, its completions drop out); below.
- Own inputs: each plain reward function gets its own deep copy of the lists TRL's reward call hands every function
  (prompts, completions, completion_ids, the dataset's columns; `environments` are shared, live objects), so one
  that changes them in place changes neither what the next function scores nor what TRL logs (TRL shares them).
- The checked rewards, (rows of the generation batch on all processes, reward functions), reach the layers above in
  the round's `ScoredRound` (`hooks/generation.py`), with their weighted sums `total_rewards()` (every function,
  what the advantages use) and `task_rewards()` (without reward shaping, what dynamic sampling and VAPO's positive
  examples use).

TRL's reward contract has one way to say "I cannot score this completion": return ``None`` (TRL turns it into NaN;
a completion every function returned None for is unscorable: left out of the baselines, advantage 0). A
``float('nan')``, ``±inf`` or a number beyond float32 (±inf in TRL's float32 tensor) is almost always a bug, and an
inf poisons its group's mean and std; TRL cannot tell them from None after its conversion, so while TRL's
`_calculate_rewards` runs every plain (sync or async) reward function is called through a wrapper that records
which of its values are not finite float32 numbers and passes them on unchanged. Reward models (``nn.Module``)
cannot return None, so a non-finite value in their column is checked afterwards.

With ``nan_rewards="raise"`` (default) the first such batch raises a one-line ``ValueError`` naming the functions.
With ``nan_rewards="drop"`` every reward of such a completion becomes NaN, so it is unscorable exactly like an
all-None completion: left out of every baseline, advantage 0; a warning names the functions and the count is logged
as ``rewards/nonfinite_dropped``. The findings are gathered over processes, so every process decides alike. A
generation batch in which every function returned None for every completion warns that nothing was scored (usually
the reward did not get the dataset columns it needs).

What is not a reward at all fails at once with one line naming the function and the fix: an entry of
``reward_funcs`` that is neither callable nor a model name (at construction), and at the first batch an output that
is not a sequence of one number or None per completion (a scalar, strings, the wrong length). A finite reward above
``MAX_ABS_REWARD`` in magnitude is an error too: its square overflows float32 in the group std, every advantage of
the group becomes 0 and nothing is learned, silently.

A reward called outside training (the held-out evaluation, pass@k: `tasks/evaluation.py`'s `call_reward`) goes
through the same checks, one function's output at a time (`checked_rewards`).
Tests: tests/test_nan_rewards.py (raise or drop), tests/test_reward_checks.py (not a reward, overflow, own inputs),
tests/test_reward_output_cli.py, tests/test_bad_input_more.py (an all-None batch), tests/test_heldout_reward_checks.py
(the evaluation and pass@k).
"""

from __future__ import annotations

import copy
import math
import warnings

import torch
from torch import nn
from trl.trainer.utils import is_async_callable

from ..hooks.component import Component
from ..hooks.trl_access import log_metric, pad_token_id, swapped
from ..numerics import short_repr
from ..reward_shaping import truncation_penalized, with_soft_overlong_punishment
from .reward_watchdog import watched

_FLOAT32_MAX = float(torch.finfo(torch.float32).max)
MAX_ABS_REWARD = 1e15  # (G·R)² stays far below float32's 3.4e38 in the group mean and std


class RewardOutputError(ValueError):
    """A reward function's output is not a reward (see the module docstring): bad input, one line."""


def shaped_reward_funcs(reward_funcs, args, positional: tuple, kwargs: dict):
    """The reward functions TRL's constructor is given: the user's, checked, and reward shaping's (`reward_shaping.py`)
    added; returns `(reward_funcs, args, positional, kwargs)` as `with_soft_overlong_punishment` does."""
    _check_reward_funcs(reward_funcs)
    return with_soft_overlong_punishment(reward_funcs, args, positional, kwargs)


class Rewards(Component):
    """The NaN and ±inf checks of the reward call (see the module docstring)."""

    name = "rewards"

    def scored_rewards(self, inner, inputs, prompts, completions, completion_ids_list):
        trainer = self.trainer
        reward_funcs = trainer.reward_funcs
        findings = torch.zeros(len(prompts), len(reward_funcs), dtype=torch.uint8, device=trainer.accelerator.device)
        examples: dict[int, str] = {}
        names = trainer.reward_func_names
        seconds = trainer.args.reward_timeout_warning  # a line names a reward still running then (reward_watchdog.py)
        timeout = trainer.args.reward_timeout  # and the run stops after this
        recording = [
            fn if isinstance(fn, nn.Module)
            else watched(
                _own_inputs(_recording(fn, names[column], column, findings, examples)), names[column], seconds, timeout
            )
            for column, fn in enumerate(reward_funcs)
        ]
        with swapped(trainer, "reward_funcs", recording):  # for TRL's reward call only (hooks/trl_access.py)
            rewards_per_func = inner(inputs, prompts, completions, completion_ids_list)
        end_ids = (*trainer.eos_token_ids, pad_token_id(trainer))
        rewards_per_func = truncation_penalized(
            rewards_per_func, completion_ids_list, end_ids, reward_funcs, trainer.args, trainer.accelerator.gather
        )
        found = trainer.accelerator.gather(findings).bool()  # rows in the order of TRL's gathered rewards
        for column, fn in enumerate(reward_funcs):
            if isinstance(fn, nn.Module):
                found[:, column] |= ~torch.isfinite(rewards_per_func[:, column])
                largest = rewards_per_func[:, column].nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).abs().max()
                _check_magnitude(trainer.reward_func_names[column], float(largest))
        mode = "train" if trainer.model.training else "eval"
        if trainer.args.nan_rewards == "drop":
            log_metric(trainer, "rewards/nonfinite_dropped", float(found.any(dim=1).sum()), mode)
        unscorable = torch.isnan(rewards_per_func).all(dim=1) & ~found.any(dim=1)  # every function returned None
        any_found, all_unscorable = torch.stack([found.any(), unscorable.all()]).tolist()  # one host sync
        if all_unscorable:
            warnings.warn(
                f"reward_funcs: every reward function ({', '.join(trainer.reward_func_names)}) returned None for all "
                f"{found.size(0)} completions of this generation batch, so none is scored and nothing is learned from "
                f"it; check that the rewards receive the dataset columns they need (None means 'cannot score').",
                stacklevel=2,
            )
        if not any_found:
            return rewards_per_func
        counts = found.sum(dim=0).tolist()
        culprits = ", ".join(
            _culprit(trainer.reward_func_names[column], count, found.size(0), examples.get(column))
            for column, count in enumerate(counts)
            if count
        )
        _on_nonfinite(trainer.args.nan_rewards, culprits, "zero advantage")
        rewards_per_func = rewards_per_func.clone()
        rewards_per_func[found.any(dim=1)] = torch.nan
        return rewards_per_func


def _is_finite_reward(value) -> bool:
    """None (unscorable) and finite float32 numbers pass; NaN, ±inf and float32 overflow do not."""
    if value is None:
        return True
    number = float(value)  # a number: `check_reward_shape` ran first
    return math.isfinite(number) and abs(number) <= _FLOAT32_MAX


def _check_reward_funcs(reward_funcs) -> None:
    """Every entry is callable (a function or a reward model) or a model name, which TRL loads. None is no reward
    function, as in TRL: an environment's `get_reward` may be the reward, and TRL raises when there is none."""
    if reward_funcs is None:
        return
    for index, fn in enumerate(reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]):
        if not (callable(fn) or isinstance(fn, str)):
            raise TypeError(
                f"reward_funcs[{index}]: got {short_repr(fn)} of type {type(fn).__name__}, which is not callable; "
                f"pass a function fn(prompts, completions, **kwargs) -> list[float | None], a reward model, or a "
                f"model name."
            )


def _check_magnitude(name: str, value: float) -> None:
    if MAX_ABS_REWARD < abs(value) <= _FLOAT32_MAX:
        scale = 10 ** math.ceil(math.log10(abs(value)))
        raise RewardOutputError(
            f"reward {name!r}: returned {value:.3g}; rewards beyond ±{MAX_ABS_REWARD:.0e} overflow the group std in "
            f"float32 and nothing is learned; rescale the reward (e.g. divide it by {scale:.0e})."
        )


def check_reward_shape(name: str, values, rows: int) -> None:
    """One number or None per completion, as TRL's reward contract asks (also checked by the held-out evaluation)."""
    fix = f"return a list of {rows} floats, one per completion (None where it cannot score one)"
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or getattr(values, "ndim", 1) != 1:
        raise RewardOutputError(f"reward {name!r}: returned {_described(values)} for {rows} completions; {fix}.")
    if len(values) != rows:
        raise RewardOutputError(f"reward {name!r}: returned {len(values)} values for {rows} completions; {fix}.")
    for row, value in enumerate(values):
        if value is None:
            continue
        try:
            if isinstance(value, (str, bytes)):
                raise TypeError
            float(value)
        except (TypeError, ValueError):
            raise RewardOutputError(
                f"reward {name!r}: completion {row} got {short_repr(value)} ({type(value).__name__}), not a number; "
                f"{fix}."
            ) from None


def _described(values) -> str:
    """What a reward returned, as its error says it: an array or tensor by its type, shape and dtype (its repr runs
    to many lines), anything else by its cut repr and type."""
    shape = getattr(values, "shape", None)
    if shape is not None:
        kind = type(values)
        return f"a {kind.__module__.split('.')[0]}.{kind.__name__} of shape {tuple(shape)} ({values.dtype})"
    return f"{short_repr(values)} ({type(values).__name__})"


def _nonfinite_rows(name: str, values) -> list[int]:
    """The rows of a shape-checked output that are NaN, ±inf or beyond float32; the others' magnitude checked."""
    rows = []
    for row, value in enumerate(values):
        if not _is_finite_reward(value):
            rows.append(row)
        elif value is not None:
            _check_magnitude(name, float(value))
    return rows


def _culprit(name: str, count: int, rows: int, example: str | None) -> str:
    return f"{name!r} ({count} of {rows}" + (f", e.g. {example}" if example else "") + ")"


def _on_nonfinite(nan_rewards: str, culprits: str, dropped: str) -> None:
    """`nan_rewards="raise"`: the one-line error naming the functions; "drop": the warning (`dropped`: what a
    completion so treated gets)."""
    if nan_rewards == "raise":
        raise RewardOutputError(
            f"nan_rewards: reward functions returned NaN or ±inf: {culprits}; return None for a completion a "
            f"function cannot score, or set nan_rewards='drop' to treat such completions as unscorable ({dropped})."
        )
    warnings.warn(
        f"nan_rewards='drop': reward functions returned NaN or ±inf: {culprits}; those completions are treated "
        f"as unscorable ({dropped}).",
        stacklevel=3,
    )


def checked_rewards(
    name: str, values, rows: int, nan_rewards: str = "raise", dropped: str = "not right, left out of the mean reward"
) -> list[float | None]:
    """One reward function's output under training's checks, for a call outside training (the held-out evaluation,
    pass@k, A*-PO's reference samples): one number or None per completion (`check_reward_shape`), no magnitude beyond
    `MAX_ABS_REWARD`, and NaN or ±inf as `nan_rewards` says ("raise": one line naming the function; "drop": a warning
    saying what such a completion gets, `dropped`, None in their place). The values as floats, None kept."""
    check_reward_shape(name, values, rows)
    nonfinite = _nonfinite_rows(name, values)
    if nonfinite:
        example = f"completion {nonfinite[0]} got {short_repr(values[nonfinite[0]])}"
        culprit = _culprit(name, len(nonfinite), rows, example)
        _on_nonfinite(nan_rewards, culprit, dropped)
    dropped = set(nonfinite)
    return [None if value is None or row in dropped else float(value) for row, value in enumerate(values)]


def _record(values, name: str, column: int, findings: torch.Tensor, examples: dict[int, str]):
    check_reward_shape(name, values, findings.size(0))
    for row in _nonfinite_rows(name, values):
        findings[row, column] = 1
        examples.setdefault(column, f"completion {row} got {short_repr(values[row])}")
    return values


SHARED_INPUTS = ("environments",)  # live objects a reward acts on, TRL's own: handed over as they are


def _own_copies(kwargs: dict) -> dict:
    """`kwargs` with a deep copy of each list (prompts, completions, completion_ids, the dataset's columns)."""
    return {key: copy.deepcopy(value) if isinstance(value, list) and key not in SHARED_INPUTS else value
            for key, value in kwargs.items()}


def _own_inputs(fn):
    """`fn` given its own copies of the lists TRL hands every reward function (`_own_copies`): TRL passes the same
    lists to each in turn, so a function that changed one in place (stripped a completion, appended to a prompt's
    messages) changed what the next function scored and what TRL logs. A deep copy is cheap next to generation."""
    if is_async_callable(fn):

        async def own_inputs_async(*args, **kwargs):
            return await fn(*args, **_own_copies(kwargs))

        return own_inputs_async

    def own_inputs(*args, **kwargs):
        return fn(*args, **_own_copies(kwargs))

    return own_inputs


def _recording(fn, name: str, column: int, findings: torch.Tensor, examples: dict[int, str]):
    """`fn` with its outputs checked and recorded into `findings[:, column]`; async stays async (TRL awaits those)."""
    if is_async_callable(fn):

        async def recording_async(*args, **kwargs):
            return _record(await fn(*args, **kwargs), name, column, findings, examples)

        return recording_async

    def recording(*args, **kwargs):
        return _record(fn(*args, **kwargs), name, column, findings, examples)

    return recording
