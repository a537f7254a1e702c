"""The sampling and reward-shaping axis: the sampler (any name of the sampler table: DAPO's resampling, reweighting,
GRESO), DAPO's soft overlong punishment and DLER's truncation penalty. The samplers' own hyperparameters
(dynamic_sampling_max_rounds, greso_*, ...) are declared in trl_zoo/samplers/ (`SamplerTableFields`,
config/fields.py); one that the chosen sampler does not read, set to other than its default, is accepted (one config
may serve several samplers) with a warning (`fields.warn_unread_table_fields`, as every table's fields).

Tests: tests/test_validation.py, tests/test_table_fields.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..registry import SAMPLERS
from .fields import help_field, names_of


@dataclass
class SamplingFields:
    """Which groups are trained on."""

    dynamic_sampling: str | None = help_field(
        f"Sampler from the sampler table: {names_of(SAMPLERS)} (resample: DAPO, drop zero-spread groups and generate "
        "more; reweight: drop them, scale the rest by 1/(1−p); greso: also skip prompts whose recent groups had no "
        "spread before generating; adaptive_budget: generate each prompt in increments up to G_max, stop at reward "
        "spread, train on groups of unequal sizes). None trains on every group."
    )


@dataclass
class OverlongFields:
    """Length shaping: DAPO's soft overlong punishment and DLER's truncation penalty (trl_zoo/reward_shaping.py)."""

    overlong_buffer_length: int | None = help_field(
        "DAPO soft overlong punishment L_cache: completions longer than overlong_max_length − L_cache get a penalty "
        "ramping to −overlong_penalty_factor at overlong_max_length. None disables it."
    )
    overlong_max_length: int | None = help_field(
        "L_max of the soft overlong punishment (default max_completion_length)."
    )
    overlong_penalty_factor: float = help_field("Scale of the soft overlong punishment (DAPO: 1.0).", 1.0)
    truncation_penalty: float | None = help_field(
        "DLER truncation penalty (arXiv:2510.15110): the task rewards of a completion that has not ended within "
        "truncation_length tokens are multiplied by this factor (DLER's paper: 0.0, such a completion gets reward 0; "
        "its released recipe: 0.1). None disables it. Meant for task rewards ≥ 0: a negative reward times the factor "
        "rises toward 0, so truncation would be rewarded (the first such batch warns); shift the rewards to ≥ 0 or "
        "use overlong_buffer_length."
    )
    truncation_length: int | None = help_field(
        "L of the truncation penalty in completion tokens, the end-of-sequence token included (default "
        "max_completion_length: DLER stops generating at L)."
    )

    def _check_overlong_ranges(self) -> None:
        if self.overlong_max_length is not None and self.overlong_max_length < 1:
            raise ValueError(f"overlong_max_length: must be ≥ 1 token, got {self.overlong_max_length}.")
        if self.overlong_penalty_factor < 0:
            raise ValueError(
                f"overlong_penalty_factor: must be ≥ 0, got {self.overlong_penalty_factor} (a negative factor "
                f"rewards overlong completions)."
            )
        if self.overlong_buffer_length is not None:
            max_length = self.overlong_max_length or self.max_completion_length
            if not 0 < self.overlong_buffer_length <= max_length:
                raise ValueError(
                    f"overlong_buffer_length: L_cache={self.overlong_buffer_length} must be in (0, {max_length}] "
                    f"(the overlong max length)."
                )
        self._check_truncation_penalty()

    def _check_truncation_penalty(self) -> None:
        if self.truncation_penalty is not None and not 0 <= self.truncation_penalty <= 1:
            raise ValueError(
                f"truncation_penalty: must be in [0, 1], the factor of a truncated completion's task rewards (DLER: "
                f"0.0), got {self.truncation_penalty}."
            )
        if self.truncation_length is None:
            return
        if self.truncation_penalty is None:
            raise ValueError(
                "truncation_length: has no effect without truncation_penalty; set truncation_penalty (DLER: 0.0) or "
                "leave truncation_length unset."
            )
        if not 1 <= self.truncation_length <= self.max_completion_length:
            raise ValueError(
                f"truncation_length: L={self.truncation_length} must be in [1, {self.max_completion_length}] "
                f"(max_completion_length, where generation stops); lower it or raise max_completion_length."
            )
