"""Greedy held-out accuracy and mean reward, and a TrainerCallback that measures them periodically during training.

    accuracy    = (1/N) Σ_n [ R_n = 1 ]             R_n = reward(greedy_completion(prompt_n), answer_n)
    mean_reward = (1/|S|) Σ_{n ∈ S} R_n             S = the prompts the reward scored (not None)

Accuracy counts rewards exactly equal to 1: with a 0/1 (or ±1) reward, the share right. With a graded reward (any
other value) it counts only the perfect scores and can read near 0 while the policy improves; the mean reward is
then the number to read (`graded` says which case it is).

Greedy decoding (no sampling) makes the number a deterministic function of the weights, so it never consumes the
training run's random state: evaluating more or less often does not change what is learned.

In a distributed run (`across_processes=True`) the processes evaluate together: each decodes its share of the
prompts, the right answers are summed across processes, and every process returns the same accuracy. The shares
are padded to the same number of batches and decoding is synchronised (`generate(synced_gpus=True)`: a process
whose share has finished keeps stepping until every process's has), because under FSDP every forward is a
collective that all processes must join; accelerate's FSDP2 wrapping is not one that transformers recognises, so
`generate` would not synchronise by itself.

Tests: tests/test_quickstart.py (greedy batches, accuracy, the callback), tests/test_heldout_mean_reward.py,
tests/test_cpu_run_notice.py (progress lines),
tests/test_heldout_eval_multiprocess.py (two processes, FSDP2 and DDP), tests/test_base_prompt.py (plain-text
prompts tokenized with the special tokens, as TRL does).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from ..components.reward_watchdog import watched
from ..components.rewards import checked_rewards
from ..config.run import RunFields
from .decoding import GREEDY, decoded_texts_and_ids
from .rewards import exact_match_reward

REWARD_TIMEOUT_WARNING = RunFields.reward_timeout_warning  # the config's default


def render_prompt(tokenizer, prompt) -> str:
    """A prompt as the text the model sees: chat messages go through the tokenizer's chat template, as in TRL."""
    if isinstance(prompt, list):
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    return prompt


def adds_special_tokens(prompts: list) -> bool:
    """Whether the prompts are tokenized with the tokenizer's special tokens, as TRL tokenizes them (it decides by
    the first prompt): plain text with them (`processing_class(text=prompts)`: a base model's BOS, which Gemma
    needs), chat messages without (the chat template writes its own)."""
    return not isinstance(prompts[0], list) if prompts else False


def greedy_completions(
    model, tokenizer, prompts: list, max_new_tokens: int, batch_size: int = 256, synced: bool = False
) -> list[str]:
    """Decode each prompt greedily (left-padded batches); special tokens are dropped, as TRL does for rewards.
    `synced`: every process of the run calls this with the same number of batches and decodes in lockstep."""
    return decoded_completions(model, tokenizer, prompts, max_new_tokens, GREEDY, batch_size, synced)


def decoded_completions(
    model, tokenizer, prompts: list, max_new_tokens: int, decoding: dict, batch_size: int = 256,
    synced: bool = False,
) -> list[str]:
    """Each prompt's completions under `decoding` (`generate`'s keywords: GREEDY, or sampling with
    `num_return_sequences`), in `generate`'s order (prompt-major), `batch_size` prompts a call, left-padded, special
    tokens dropped; the model's train/eval mode and the tokenizer's padding side are restored."""
    return decoded_completions_and_ids(model, tokenizer, prompts, max_new_tokens, decoding, batch_size, synced)[0]


def decoded_completions_and_ids(
    model, tokenizer, prompts: list, max_new_tokens: int, decoding: dict, batch_size: int = 256,
    synced: bool = False, progress: Callable[[int, int], None] | None = None,
) -> tuple[list[str], list[list[int]]]:
    """`decoded_completions` and each completion's token ids as TRL passes them to rewards (`completion_ids`): up
    to and including the first end-of-sequence token, no padding. `progress(done, total)` after each batch."""
    texts = [render_prompt(tokenizer, prompt) for prompt in prompts]
    return decoded_texts_and_ids(model, tokenizer, texts, adds_special_tokens(prompts), max_new_tokens, decoding,
                                 batch_size, synced, progress)


def not_recorded(*args, **kwargs) -> None:
    """`log_extra` and `log_metric` outside training: an evaluation has no completions table or step metrics (a
    reward can tell an evaluation's call by `log_metric is not_recorded`)."""


def call_reward(
    reward: Callable, prompts: list, completions: list, completion_ids: list | None, columns: dict,
    trainer_state=None, nan_rewards: str = "raise", reward_timeout_warning: float = REWARD_TIMEOUT_WARNING,
    reward_timeout: float | None = None,
) -> list[float | None]:
    """`reward` called as TRL's `GRPOTrainer._calculate_rewards` calls a reward function: every argument by keyword
    (`prompts`, `completions`, `completion_ids`, `trainer_state`, `log_extra`, `log_metric` and the dataset's other
    columns), so any signature TRL accepts works here, e.g. `(prompts, completions, **kwargs)`. Outside training
    `trainer_state` is the one given (None: no training state) and the two loggers record nothing.

    As in training, a call still running after `reward_timeout_warning` seconds gets one line naming the function,
    one running after `reward_timeout` seconds (None: no limit) raises `RewardTimeoutError`
    (`components/reward_watchdog.py`), and the output is checked (`components/rewards.checked_rewards`: one number or
    None per completion, NaN and ±inf as `nan_rewards` says); returns floats and None."""
    name = getattr(reward, "__name__", type(reward).__name__)
    values = watched(reward, name, reward_timeout_warning, reward_timeout)(
        prompts=prompts, completions=completions, completion_ids=completion_ids, trainer_state=trainer_state,
        log_extra=not_recorded, log_metric=not_recorded, **columns,
    )
    return checked_rewards(name, values, len(completions), nan_rewards)


def as_completions(prompts: list, texts: list[str]) -> list:
    """Completions as TRL hands them to rewards: chat messages for a chat prompt (a list of messages), else text;
    decided row by row."""
    return [[{"role": "assistant", "content": text}] if isinstance(prompt, list) else text
            for prompt, text in zip(prompts, texts, strict=True)]


PROGRESS_SECONDS = 10.0  # a held-out evaluation says how far it is at most this often


class EvaluationProgress:
    """`progress(done, total)` for `greedy_evaluation`: "held-out evaluation: 128/500 prompts (12 s)" through `log`
    when `every_seconds` (default PROGRESS_SECONDS) have passed since the start or the last line; the last batch
    says nothing (the result follows)."""

    def __init__(self, log=print, every_seconds: float | None = None):
        self.log = log
        self.every_seconds = PROGRESS_SECONDS if every_seconds is None else every_seconds
        self.started = self.said = time.perf_counter()

    def __call__(self, done: int, total: int):
        now = time.perf_counter()
        if done < total and now - self.said >= self.every_seconds:
            self.log(f"  held-out evaluation: {done}/{total} prompts ({now - self.started:.0f} s)")
            self.said = now


class HeldOutResult(NamedTuple):
    """One greedy evaluation: accuracy, the mean reward over the scored prompts (None when none was scored), and
    whether the reward is graded (took a value other than 0, 1 and −1)."""

    accuracy: float
    mean_reward: float | None
    graded: bool


def format_mean_reward(value: float | None) -> str:
    """A mean reward as the CLI prints it; "—" when no prompt was scored."""
    return "—" if value is None else f"{value:.3f}"


def greedy_evaluation(
    model,
    tokenizer,
    prompts: list,
    max_new_tokens: int,
    reward: Callable = exact_match_reward,
    reward_kwargs: dict | None = None,
    batch_size: int = 256,
    across_processes: bool = False,
    progress: Callable[[int, int], None] | None = None,
    trainer_state=None,
    nan_rewards: str = "raise",
    reward_timeout_warning: float = REWARD_TIMEOUT_WARNING,
    reward_timeout: float | None = None,
    environment_factory: Callable | None = None,
) -> HeldOutResult:
    """Accuracy and mean reward of the prompts' greedy completions (module docstring); with `environment_factory`
    (chat prompts), greedy rollouts with one tool round (tool_evaluation.py). The reward's output is checked
    as in training (`call_reward`, with the config's `nan_rewards`, `reward_timeout_warning` and `reward_timeout`):
    an output that is not one number or None per prompt raises `RewardOutputError`, and so does NaN or ±inf unless
    `nan_rewards` is "drop" (then a warning, and the completion is not scored).

    `reward` is called like TRL calls a reward function, by keyword (`call_reward`), with the dataset's other columns
    (e.g. `answer`) in `reward_kwargs`, and `trainer_state` (the training's `TrainerState` at the evaluation, as TRL
    passes it; None outside training); chat prompts get chat-message completions. `progress(done, total)` is
    called after each batch (`EvaluationProgress` prints a line every ~10 s; in a distributed run, of this
    process's share).
    """
    if not prompts:
        raise ValueError("held-out set: no prompts to evaluate; give a non-empty held-out split.")
    reward_kwargs = reward_kwargs or {}
    reward_call = {"trainer_state": trainer_state, "nan_rewards": nan_rewards,
                   "reward_timeout_warning": reward_timeout_warning, "reward_timeout": reward_timeout}
    processes = dist.get_world_size() if across_processes and dist.is_available() and dist.is_initialized() else 1
    if processes == 1:
        rewards = _greedy_rewards(
            model, tokenizer, prompts, max_new_tokens, reward, reward_kwargs, batch_size, progress=progress,
            reward_call=reward_call, environment_factory=environment_factory,
        )
        return _result(_tally(rewards), len(prompts))
    rows, own = process_share(len(prompts), dist.get_rank(), processes)
    rewards = _greedy_rewards(
        model, tokenizer, [prompts[i] for i in rows], max_new_tokens, reward,
        {key: [column[i] for i in rows] for key, column in reward_kwargs.items()}, batch_size, synced=True,
        progress=progress, reward_call=reward_call, environment_factory=environment_factory,
    )
    totals = torch.tensor(_tally(rewards[:own]), dtype=torch.float64, device=next(model.parameters()).device)
    dist.all_reduce(totals)
    return _result(totals.tolist(), len(prompts))


def _tally(rewards: list) -> list[float]:
    """[right, sum of scored rewards, scored, graded] of a list of rewards (None: not scored)."""
    scored = [float(r) for r in rewards if r is not None]
    graded = any(r not in (0.0, 1.0, -1.0) for r in scored)
    return [float(sum(r == 1.0 for r in scored)), float(sum(scored)), float(len(scored)), float(graded)]


def _result(totals: list[float], count: int) -> HeldOutResult:
    right, total, scored, graded = totals
    return HeldOutResult(accuracy=right / count, mean_reward=total / scored if scored else None, graded=graded > 0)


def process_share(count: int, index: int, processes: int) -> tuple[list[int], int]:
    """(rows, own) of process `index` of `processes` over `count` rows: a contiguous block of ⌈count/processes⌉
    rows, the first `own` of them its own; a short (or empty) block is padded with row 0, which is not counted."""
    size = -(-count // processes)
    own_rows = list(range(min(count, index * size), min(count, (index + 1) * size)))
    return own_rows + [0] * (size - len(own_rows)), len(own_rows)


def _greedy_rewards(
    model, tokenizer, prompts: list, max_new_tokens: int, reward: Callable, reward_kwargs: dict, batch_size: int,
    synced: bool = False, progress: Callable[[int, int], None] | None = None, reward_call: dict | None = None,
    environment_factory: Callable | None = None,
) -> list:
    """The reward of each prompt's greedy completion (None where the reward could not score it), checked
    (`call_reward`, with the keywords `reward_call`); with `environment_factory`, of its rollout with a tool round."""
    if environment_factory is not None:
        from .tool_evaluation import greedy_tool_completions

        completions, ids = greedy_tool_completions(model, tokenizer, prompts, max_new_tokens, environment_factory,
                                                   reward_kwargs, batch_size, synced, progress)
    else:
        texts, ids = decoded_completions_and_ids(
            model, tokenizer, prompts, max_new_tokens, GREEDY, batch_size, synced, progress
        )
        completions = as_completions(prompts, texts)
    return call_reward(reward, prompts, completions, ids, reward_kwargs, **(reward_call or {}))


def greedy_accuracy(*args, **kwargs) -> float:
    """Fraction of prompts whose greedy completion earns reward exactly 1 (`greedy_evaluation`'s accuracy)."""
    return greedy_evaluation(*args, **kwargs).accuracy


def accuracy_of(result: float | HeldOutResult) -> float:
    return result.accuracy if isinstance(result, HeldOutResult) else result


class HeldOutAccuracyCallback(TrainerCallback):
    """Measure greedy held-out accuracy when training starts (step 0), every `every_steps` optimizer steps and at the
    last step.

    `evaluate(model)` does the measuring and returns the accuracy or a `HeldOutResult`; while it runs, `state` is the
    trainer's `TrainerState` at that step (None where the caller gave none), for a reward that reads `trainer_state`
    (the CLI's evaluation passes it on); `on_result(step, result)`
    receives what it returned (the CLI writes it to the run's metrics file). `history` keeps (step, accuracy) pairs
    and `results` maps each step to what was returned, both starting from `history` (a resumed run's earlier
    (step, result) pairs). The step-0 measurement is taken in `on_train_begin`, once the trainer has prepared the
    model, the one every process trains: under FSDP with `cpu_ram_efficient_loading`, accelerate treats the weights
    of the processes other than the first as empty until it fills them from the first process while sharding.
    """

    def __init__(self, evaluate: Callable, every_steps: int, on_result: Callable | None = None, history=()):
        if every_steps < 1:
            raise ValueError(f"eval_every_steps: must be ≥ 1, got {every_steps}.")
        self.evaluate = evaluate
        self.every_steps = every_steps
        self.on_result = on_result
        self.results: dict[int, float | HeldOutResult] = dict(history)
        self.history: list[tuple[int, float]] = [(step, accuracy_of(result)) for step, result in history]

    state = None  # the trainer's TrainerState of the measurement in progress (see the class docstring)

    def measure(self, model, step: int, state=None) -> float | HeldOutResult:
        self.state = state
        try:
            result = self.evaluate(model)
        finally:
            self.state = None
        self.history.append((step, accuracy_of(result)))
        self.results[step] = result
        if self.on_result is not None:
            self.on_result(step, result)
        return result

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if state.global_step == 0 and not any(step == 0 for step, _ in self.history):
            self.measure(model, 0, state)
        return control

    def on_step_end(self, args, state, control, model=None, **kwargs):
        last_step = state.global_step >= state.max_steps
        if state.global_step % self.every_steps == 0 or last_step:
            if not self.history or self.history[-1][0] != state.global_step:
                self.measure(model, state.global_step, state)
        return control
