"""The run axis: what a run does when a reward or an optimizer step is not finite, the values of the fields plugins
declare (`plugin_args`), and the checks of TRL's own fields that trl_zoo reads (ranges TRL leaves to fail later).

Tests: tests/test_validation.py, tests/test_hyperparameter_ranges.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .fields import help_field

# TRL's fields with a fixed list of values (trl_zoo's own carry theirs in their field's metadata)
TRL_CHOICES = {"importance_sampling_level": ("token", "sequence")}

# TRL's fields that enter the loss or the sampling; with trl_zoo's own fields they must be finite when set.
TRL_LOSS_FIELDS = (
    "epsilon", "epsilon_high", "delta", "beta", "temperature", "top_p", "top_entropy_quantile",
    "sapo_temperature_pos", "sapo_temperature_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg",
    "vespo_lambda_neg",
)


@dataclass
class RunFields:
    """Non-finite rewards and steps, and the plugins' field values."""

    nan_rewards: str = help_field(
        "What to do when a reward function returns NaN or ±inf: 'raise' (default) or 'drop' (zero advantage, warn).",
        "raise",
        choices=["raise", "drop"],
    )
    nonfinite_policy: str = help_field(
        "What to do when an optimizer step's loss or gradient norm is NaN or ±inf: 'raise' (default: stop with the "
        "step, the loss and the term) or 'skip' (drop that update, warn).",
        "raise",
        choices=["raise", "skip"],
    )

    plugin_args: dict | str | None = help_field(
        "Values of the fields that plugins declare in their specs (`trl-zoo list` shows the plugins), by name; a "
        "JSON object on the command line. Each declared field is also a keyword of GRPOConfig, a key of a YAML "
        "config and a flag of `trl-zoo train`, and reads as args.<name>."
    )
    reward_timeout_warning: float = help_field(
        "Seconds after which a reward function that has not returned gets one line naming it (TRL has no timeout). "
        "0: no line.",
        10.0,
    )
    reward_timeout: float | None = help_field(
        "Seconds a reward function may take for one call before the run stops with one line naming it (the call "
        "runs in a worker thread, which is left running). None (default): no limit.",
    )

    def _check_batch_counts(self) -> None:
        """The counts TRL divides by or derives batch sizes from (before TRL's `__post_init__` uses them)."""
        if isinstance(self.num_generations, int) and self.num_generations < 2:
            raise ValueError(
                f"num_generations: got {self.num_generations}; GRPO-family advantages and dynamic sampling compare "
                f"the completions of one prompt, so use num_generations ≥ 2."
            )
        steps = self.gradient_accumulation_steps
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ValueError(
                f"gradient_accumulation_steps: got {steps!r}; it counts the micro-batches of one optimizer step, so "
                f"use an integer ≥ 1, e.g. 1."
            )

    def _check_trl_ranges(self) -> None:
        """The ranges of TRL's fields that every run reads."""
        if self.epsilon < 0 or (self.epsilon_high is not None and self.epsilon_high < 0):
            raise ValueError(
                f"epsilon / epsilon_high: clip ranges must be ≥ 0, got epsilon={self.epsilon}, "
                f"epsilon_high={self.epsilon_high}."
            )
        if not (math.isfinite(self.learning_rate) and self.learning_rate >= 0):
            raise ValueError(f"learning_rate: must be a finite number ≥ 0, got {self.learning_rate}; e.g. 1e-6.")
        if not self.temperature > 0:
            raise ValueError(
                f"temperature: must be > 0, got {self.temperature}; GRPO samples its completions and divides the "
                f"logits by it, e.g. 1.0."
            )
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(
                f"top_p: nucleus sampling keeps a probability mass in (0, 1], got {self.top_p}; use 1.0 to keep every "
                f"token."
            )
        if self.max_completion_length is not None and self.max_completion_length < 1:
            raise ValueError(
                f"max_completion_length: must be ≥ 1 token, got {self.max_completion_length}; set it to the longest "
                f"completion to generate, e.g. 256."
            )
        if self.fp16 and (self.use_cpu or not torch.accelerator.is_available()):
            raise ValueError("fp16: got True on a CPU, which has no fp16 mixed precision; set fp16=False.")
        if self.beta < 0:
            raise ValueError(f"beta: the KL coefficient must be ≥ 0, got {self.beta}.")
        if self.max_steps == 0 or self.max_steps < -1:  # transformers reads 0 as "by epochs", then trains one step
            raise ValueError(
                f"max_steps: must be ≥ 1 optimizer steps, or -1 to train for num_train_epochs, got {self.max_steps}."
            )
        if self.reward_timeout_warning < 0:  # trl_zoo's, checked with these (components/reward_watchdog.py)
            raise ValueError(
                f"reward_timeout_warning: must be ≥ 0 seconds (0: no line), got {self.reward_timeout_warning}."
            )
        if self.reward_timeout is not None and not self.reward_timeout > 0:
            raise ValueError(
                f"reward_timeout: must be > 0 seconds (None: no limit), got {self.reward_timeout}; e.g. 300."
            )
