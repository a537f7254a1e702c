"""The generation seam: what TRL's `_generate_and_score_completions` and `_calculate_rewards` do in trl_zoo (the
door, `hooks/trl_access.py`, overrides them to call `_generation_batch` and `_round_rewards_of` here).

A generation batch is built from one generation round or more; each round is TRL's generation and scoring of some
prompts, handed to the components as a typed `ScoredRound` (TRL's batch dict and the rewards of every reward function
over every process). Which hook points a batch and a round run, and in what nesting, is the table of
hooks/hook_points.py (`GENERATION_BATCH` and what it holds).

Nothing a round produced is kept on the trainer after the round (the one window: `_round_rewards`, written by TRL's
reward call and read back as soon as TRL returns).

Extra no-grad passes over a generation batch (old routers, log-probs for the reward KL, ‖s‖², V_old) go through
`extra_pass`: one chunking rule (the per-device train or eval batch size), gradient checkpointing off, no grad,
and TRL's `profiling_context`, so each shows up in TRL's profiling metrics under its own name.

Tests: tests/test_generation_seam.py (hook order, `ScoredRound`, profiling), tests/test_sampling.py (batches of several
rounds).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from trl.extras.profiling import profiling_context
from trl.models.utils import disable_gradient_checkpointing

from ..reward_shaping import is_reward_shaping
from . import hook_points
from .trl_access import trl_generated_round


@dataclass
class ScoredRound:
    """One generation round: TRL's batch dict for this process's rows (hook points add entries to it) and the
    rewards R_{i,k} of every reward function k for the rows i of every process, in TRL's gathered order (NaN: the
    function returned None), checked by the reward seam."""

    batch: dict
    rewards_per_func: torch.Tensor  # (N, K)
    reward_weights: torch.Tensor  # (K,) w_k
    task_columns: list[int]  # the reward functions that are not reward shaping
    advantage_inputs: Any = None  # what the estimator saw (`AdvantageInputs`, over every process), if one ran
    inputs: list | None = None  # TRL's input rows of this process (one per completion row: prompt and dataset columns)

    def total_rewards(self) -> torch.Tensor:
        """R_i = Σ_k w_k R_{i,k} (NaN terms skipped), NaN where every function returned None: what advantages use."""
        return self._weighted(list(range(self.rewards_per_func.size(1))))

    def task_rewards(self) -> torch.Tensor:
        """R_i over the task reward functions only (reward shaping left out): what dynamic sampling and VAPO's
        positive examples use."""
        return self._weighted(self.task_columns)

    @property
    def unscorable(self) -> torch.Tensor:
        """(N,) rows that no reward function could score."""
        return torch.isnan(self.rewards_per_func).all(dim=1)

    def _weighted(self, columns: list[int]) -> torch.Tensor:
        rewards = self.rewards_per_func[:, columns]
        weights = self.reward_weights.to(rewards.device)[columns]
        return (rewards * weights).nansum(dim=1).masked_fill(torch.isnan(rewards).all(dim=1), float("nan"))


class GenerationSeam:
    """The generation seam (see the module docstring); the class just above TRL's door."""

    _round_rewards: torch.Tensor | None = None  # the window between TRL's reward call and the end of its round

    # ------------------------------------------------------------------ called by the door (hooks/trl_access.py)
    def _generation_batch(self, inputs) -> dict:
        """TRL's `_generate_and_score_completions`: a generation batch, `generation_batch` around one round (a
        `ScoredRound`), then `on_generation_batch`."""
        batch = self.pipeline.wrap(hook_points.GENERATION_BATCH, self._scored_round)(inputs)
        if isinstance(batch, ScoredRound):  # no component took part: the batch is the one round's
            batch = batch.batch
        self.pipeline.event(hook_points.ON_GENERATION_BATCH, batch)
        return batch

    def _round_rewards_of(self, calculate_rewards, inputs, prompts, completions, completion_ids_list):
        """TRL's `_calculate_rewards` (`calculate_rewards`) through `scored_rewards`, kept for the round's
        `ScoredRound`."""
        scored_rewards = self.pipeline.wrap(hook_points.SCORED_REWARDS, calculate_rewards)
        self._round_rewards = scored_rewards(inputs, prompts, completions, completion_ids_list)
        return self._round_rewards

    # ------------------------------------------------------------------ one round
    def _scored_round(self, inputs) -> ScoredRound:
        """TRL's generation and scoring of `inputs` (`generated_round`), then the round's hook points in order."""
        self._round_rewards = None
        try:
            trl_round = functools.partial(trl_generated_round, self)
            batch = self.pipeline.wrap(hook_points.GENERATED_ROUND, trl_round)(inputs)
            rewards = self._round_rewards
        finally:
            self._round_rewards = None
        task_columns = [k for k, fn in enumerate(self.reward_funcs) if not is_reward_shaping(fn)]
        scored = ScoredRound(batch, rewards, self.reward_weights, task_columns, inputs=inputs)
        self.pipeline.event(hook_points.BEFORE_ADVANTAGES, scored)
        self.pipeline.event(hook_points.REPLACE_ADVANTAGES, scored)
        self.pipeline.event(hook_points.AFTER_ADVANTAGES, scored)
        return scored

    # ------------------------------------------------------------------ extra passes
    @contextmanager
    def extra_pass(self, name: str) -> Iterator[int]:
        """The context of one extra no-grad pass over a generation batch: TRL's `profiling_context` under `name`, no
        grad, gradient checkpointing off; yields the chunk size, the per-device batch size (train or eval), which
        the pass uses for its rows (or hands to TRL's log-prob pass, `trl_access.per_token_logps`, as
        `batch_size`)."""
        training = self.model.training
        chunk = self.args.per_device_train_batch_size if training else self.args.per_device_eval_batch_size
        with (
            profiling_context(self, name),
            torch.no_grad(),
            disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs),
        ):
            yield chunk


def row_chunks(rows: int, chunk: int) -> list[slice]:
    """The slices of `rows` rows in chunks of `chunk` (the last one shorter)."""
    return [slice(start, start + chunk) for start in range(0, rows, chunk)]
