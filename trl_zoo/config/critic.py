"""The critic axis: the value model of an estimator that declares `needs=("values",)` (gae), its loss and optimizer.
gae's own hyperparameters (gae_gamma, gae_lambda, ..., VAPO's vapo_*) are declared in trl_zoo/advantages/gae.py
(`EstimatorTableFields`, config/fields.py); what needs a critic is refused without one.

Tests: tests/test_critic.py, tests/test_table_fields.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from .fields import help_field
from .run_plan import has_critic


@dataclass
class CriticFields:
    """The critic shared by the estimators that need values."""

    critic_model: str | None = help_field(
        "The critic of advantage_estimator='gae': 'adapter' (its own LoRA adapter on the shared frozen base plus a "
        "scalar head; PEFT policies) or 'head' (an MLP head on the policy's detached last hidden states). None: "
        "'adapter' for a PEFT policy, 'head' otherwise.",
        None,
        choices=["adapter", "head"],
    )
    value_coef: float = help_field("Coefficient of the clipped value loss added to the policy loss (vf_coef).", 0.1)
    value_clip: float | None = help_field(
        "ε_v of the clipped value loss: V is clipped to V_old ± ε_v. None: the plain squared error.", 0.2
    )
    value_learning_rate: float | None = help_field(
        "Learning rate of the critic's parameters (their own optimizer group, same schedule). None: learning_rate."
    )

    def _check_critic_fields(self) -> None:
        """The critic's ranges when an estimator needs it; its fields and gae's are refused without one."""
        critic = has_critic(self.advantage_estimator)
        if critic:
            if self.value_coef < 0:
                raise ValueError(f"value_coef: must be ≥ 0, got {self.value_coef}.")
            for name in ("value_clip", "value_learning_rate"):
                value = getattr(self, name)
                if value is not None and value <= 0:
                    raise ValueError(f"{name}: must be > 0 (or None), got {value}.")
        if not critic:
            for name, active in (
                ("critic_model", self.critic_model is not None),
                ("vapo_value_warmup_steps", self.vapo_value_warmup_steps > 0),
                ("vapo_length_alpha", self.vapo_length_alpha is not None),
                ("vapo_positive_nll_coef", self.vapo_positive_nll_coef > 0),
            ):
                if active:
                    raise ValueError(f"{name}: needs a critic; set advantage_estimator='gae'.")
        elif self.vapo_positive_nll_coef > 0 and self.skip_zero_advantage:
            raise ValueError(
                "skip_zero_advantage: the positive-example LM loss needs log π of every row; set "
                "skip_zero_advantage=False or vapo_positive_nll_coef=0."
            )
