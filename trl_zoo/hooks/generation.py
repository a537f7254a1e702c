"""Trainer hook: the generation seam, the one override of TRL's `_generate_and_score_completions` and
`_calculate_rewards` (through their seams in `hooks/trl_access.py`, `_zoo_generate_and_score_completions` and
`_zoo_calculate_rewards`), just above TRL's trainer.

A generation batch is built from one generation round or more; each round is TRL's generation and scoring of some
prompts, handed to the layers above as a typed `ScoredRound` (TRL's batch dict and the rewards of every reward
function over every process). The layers override these hook points, which run in this order:

    per round (`_scored_round`):
      _generated_round(inputs) -> batch                              TRL's round               OldLogpsMixin
        _scored_rewards(inputs, prompts, completions, ids) -> (N, K) the reward call, in it    RewardsMixin
      _before_advantages(scored)                                     values V_old              CriticMixin
      _replace_advantages(scored)                                    the estimator's Â         AdvantageMixin
      _after_advantages(scored)                                      value targets             CriticMixin
    per generation batch (`_zoo_generate_and_score_completions`):
      _generation_batch(inputs) -> batch                             rounds → one batch        DynamicSamplingMixin
      _on_generation_batch(batch) -> batch                           old routers               RouterStatsMixin

Each override calls `super()`; nothing a round produced is kept on the trainer after the round (the one window:
`_round_rewards`, written by TRL's reward call and read back as soon as TRL returns).

Extra no-grad passes over a generation batch (old routers, log-probs for the reward KL, ‖s‖², V_old) go through
`_generation_pass`: one chunking rule (the per-device train or eval batch size), gradient checkpointing off, no grad,
and TRL's `profiling_context`, so each shows up in TRL's profiling metrics under its own name.

Tests: tests/test_generation_seam.py (hook order, `ScoredRound`, profiling), tests/test_sampling.py (batches of several
rounds).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from trl.extras.profiling import profiling_context
from trl.models.utils import disable_gradient_checkpointing

from ..reward_shaping import is_reward_shaping


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


class GenerationMixin:
    """The generation seam (see the module docstring); the layer just above TRL."""

    _round_rewards: torch.Tensor | None = None  # the window between TRL's reward call and the end of its round

    # ------------------------------------------------------------------ TRL's methods' seams, overridden here only
    def _zoo_generate_and_score_completions(self, inputs):
        return self._on_generation_batch(self._generation_batch(inputs))

    def _zoo_calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._round_rewards = self._scored_rewards(inputs, prompts, completions, completion_ids_list)
        return self._round_rewards

    # ------------------------------------------------------------------ hook points
    def _generated_round(self, inputs) -> dict:
        """TRL's generation and scoring of `inputs`, its batch dict (the old-log-prob layer skips TRL's pass in it)."""
        return super()._zoo_generate_and_score_completions(inputs)

    def _scored_rewards(self, inputs, prompts, completions, completion_ids_list) -> torch.Tensor:
        """R_{i,k} of one round over every process: TRL's reward call (the reward seam overrides it)."""
        return super()._zoo_calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _before_advantages(self, scored: ScoredRound) -> None:
        """A round is scored; TRL's advantages are in `scored.batch`."""

    def _replace_advantages(self, scored: ScoredRound) -> None:
        """Replace `scored.batch["advantages"]` (TRL's) by another estimator's."""

    def _after_advantages(self, scored: ScoredRound) -> None:
        """The round's advantages are final."""

    def _generation_batch(self, inputs) -> dict:
        """The generation batch trained on: here one round of `inputs` (dynamic sampling generates more)."""
        return self._scored_round(inputs).batch

    def _on_generation_batch(self, batch: dict) -> dict:
        """The generation batch is assembled; entries that describe the whole batch may be added."""
        return batch

    # ------------------------------------------------------------------ one round
    def _scored_round(self, inputs) -> ScoredRound:
        """TRL's generation and scoring of `inputs`, then the per-round hook points in order."""
        self._round_rewards = None
        try:
            batch = self._generated_round(inputs)
            rewards = self._round_rewards
        finally:
            self._round_rewards = None
        task_columns = [k for k, fn in enumerate(self.reward_funcs) if not is_reward_shaping(fn)]
        scored = ScoredRound(batch, rewards, self.reward_weights, task_columns, inputs=inputs)
        self._before_advantages(scored)
        self._replace_advantages(scored)
        self._after_advantages(scored)
        return scored

    # ------------------------------------------------------------------ extra passes
    @contextmanager
    def _generation_pass(self, name: str) -> Iterator[int]:
        """The context of one extra no-grad pass over a generation batch: TRL's `profiling_context` under `name`, no
        grad, gradient checkpointing off; yields the chunk size, the per-device batch size (train or eval), which
        the pass uses for its rows (or hands to TRL's log-prob pass, `_zoo_get_per_token_logps_and_entropies`, as
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
