"""The generation seam: the one override of TRL's `_generate_and_score_completions` and `_calculate_rewards` (through
their seams in `hooks/trl_access.py`, `_zoo_generate_and_score_completions` and `_zoo_calculate_rewards`), just above
TRL's door.

A generation batch is built from one generation round or more; each round is TRL's generation and scoring of some
prompts, handed to the components as a typed `ScoredRound` (TRL's batch dict and the rewards of every reward function
over every process). The seam calls the pipeline's hook points (hooks/pipeline.py says which components take part):

    per generation batch (`_zoo_generate_and_score_completions`):
      generation_batch(inputs) -> batch                     WRAP   rounds → one batch; innermost `_one_round`
      on_generation_batch(batch)                            EVENT  the batch is assembled
    per round (`_scored_round`):
      generated_round(inputs) -> batch                      WRAP   TRL's generation and scoring of the round
        scored_rewards(inputs, prompts, completions, ids)   WRAP   TRL's reward call, inside it: (N, K) rewards
      before_advantages(scored)                             EVENT  TRL's advantages are in `scored.batch`
      replace_advantages(scored)                            EVENT  the estimator's Â in place of TRL's
      after_advantages(scored)                              EVENT  the round's advantages are final

Nothing a round produced is kept on the trainer after the round (the one window: `_round_rewards`, written by TRL's
reward call and read back as soon as TRL returns).

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


class GenerationSeam:
    """The generation seam (see the module docstring); the class just above TRL's door."""

    _round_rewards: torch.Tensor | None = None  # the window between TRL's reward call and the end of its round

    # ------------------------------------------------------------------ TRL's methods' seams, overridden here only
    def _zoo_generate_and_score_completions(self, inputs):
        """A generation batch: the rounds (`generation_batch`), then `on_generation_batch`."""
        batch = self.pipeline.wrap("generation_batch", self._one_round)(inputs)
        self.pipeline.event("on_generation_batch", batch)
        return batch

    def _zoo_calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        inner = super()._zoo_calculate_rewards
        self._round_rewards = self.pipeline.wrap("scored_rewards", inner)(inputs, prompts, completions,
                                                                          completion_ids_list)
        return self._round_rewards

    # ------------------------------------------------------------------ one round
    def _one_round(self, inputs) -> dict:
        """The generation batch of one round of `inputs` (dynamic sampling generates more)."""
        return self._scored_round(inputs).batch

    def _scored_round(self, inputs) -> ScoredRound:
        """TRL's generation and scoring of `inputs` (`generated_round`), then the round's hook points in order."""
        self._round_rewards = None
        try:
            batch = self.pipeline.wrap("generated_round", super()._zoo_generate_and_score_completions)(inputs)
            rewards = self._round_rewards
        finally:
            self._round_rewards = None
        task_columns = [k for k, fn in enumerate(self.reward_funcs) if not is_reward_shaping(fn)]
        scored = ScoredRound(batch, rewards, self.reward_weights, task_columns, inputs=inputs)
        self.pipeline.event("before_advantages", scored)
        self.pipeline.event("replace_advantages", scored)
        self.pipeline.event("after_advantages", scored)
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
