"""The loss axis: which policy loss (`loss_type`, any name of the loss table), how its per-token terms are
aggregated, and the options every PPO-clip loss reads. The built-in losses' own hyperparameters (dppo_mask_low,
m2po_threshold, ...) are declared in their files (`LossTableFields`, config/fields.py).

Tests: tests/test_validation.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from trl import GRPOConfig as TRLGRPOConfig

from ..registry import AGGREGATIONS, LOSSES
from .fields import help_field, names_of

# aggregations that weight each sequence by its number of tokens
TOKEN_SUM_AGGREGATIONS = ("token_mean_local", "token_mean_global", "token_sum_over_max_length")


@dataclass
class LossFields:
    """The policy loss and its aggregation (`loss_type` is TRL's field, with TRL's default)."""

    # TRL's field with TRL's default; the help lists trl_zoo's table instead of TRL's names
    loss_type: str = help_field(
        f"Policy loss, a name in trl_zoo's loss table: {', '.join(LOSSES.names(plugins=False))}; or one that a "
        "plugin registers. `trl-zoo list` shows each with its paper. For the names TRL also ships, the loss and its "
        "default aggregation are TRL's.",
        TRLGRPOConfig.loss_type,
    )
    loss_aggregation: str | None = help_field(
        f"Override the loss's own aggregation: {names_of(AGGREGATIONS)} (token_sum_over_max_length's earlier name, "
        "constant, still works). None uses the loss's default (e.g. sequence_mean for grpo, token_mean_global for "
        "dapo)."
    )
    allow_sequence_loss_token_sum: bool = help_field(
        "Allow a sequence-level loss (gspo, gmpo, ...) with a token-sum aggregation, which weights each sequence "
        "by its length instead of optimising the per-sequence objective.",
        False,
    )
    dual_clip: float | None = help_field(
        "Dual-clip constant c > 1 for PPO-clip losses: for Â < 0 the term is max(ℓ, c·Â). None disables it."
    )

    def _check_loss_aggregation(self, entry) -> None:
        """A sequence-level loss with a token-sum aggregation weights each sequence by its length: refused unless
        allowed (`entry` is the chosen loss)."""
        aggregation_name = self.loss_aggregation or entry.spec.aggregation
        if (
            entry.spec.sequence_level
            and AGGREGATIONS.get(aggregation_name).name in TOKEN_SUM_AGGREGATIONS
            and not self.allow_sequence_loss_token_sum
        ):
            raise ValueError(
                f"loss_aggregation: {aggregation_name!r} weights each sequence of the sequence-level loss "
                f"{self.loss_type!r} by its length; use 'sequence_mean', or set allow_sequence_loss_token_sum=True."
            )
