"""The advantages and KL axis: the advantage estimator (any name of the advantage table) and its shared options,
the KL estimator and where its penalty goes, the adaptive KL coefficient and ProRL's reference resets. The
estimators' own hyperparameters (gae_*, vapo_*) are declared in their files (`EstimatorTableFields`,
config/fields.py). Also the settings the chosen estimator cannot take: GDPO's per-reward-function form
(`multi_objective_aggregation="normalize_then_sum"`) and an estimator of rewards ≥ 0.

Tests: tests/test_validation.py, tests/test_kl.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..registry import ADVANTAGES, KL_ESTIMATORS
from .fields import help_field, names_of
from .run_plan import has_critic


@dataclass
class AdvantageFields:
    """The advantage estimator and the KL estimator with its placement."""

    advantage_estimator: str | None = help_field(
        f"Advantage estimator from the advantage table: {names_of(ADVANTAGES)}. None keeps TRL's own advantages "
        "(group mean/std per `scale_rewards`)."
    )
    advantage_std_unbiased: bool = help_field(
        "Group std convention for the grpo estimator: unbiased (N−1) or not.", True
    )
    advantage_epsilon: float = help_field("ε added to the std in advantage normalisation (TRL: 1e-4).", 1e-4)
    kl_estimator: str = help_field(f"KL estimator: {names_of(KL_ESTIMATORS)} (k3 is TRL's, the default).", "k3")
    kl_placement: str = help_field(
        "Where the KL leash goes: 'loss' (GRPO: β·KL added per token to the loss) or 'reward' (RLHF: "
        "R' = R − β Σ_t KL_t before the advantage estimator).",
        "loss",
        choices=["loss", "reward"],
    )

    def _check_advantage_ranges(self) -> None:
        if self.advantage_epsilon < 0:
            raise ValueError(
                f"advantage_epsilon: must be ≥ 0, got {self.advantage_epsilon} (std + ε could be 0 and the "
                f"advantages infinite)."
            )

    def _check_estimator_combinations(self) -> None:
        """What the chosen estimator cannot take: a reward-side KL when GDPO splits the rewards, or when the
        estimator needs rewards ≥ 0; GDPO with a critic; GDPO under grpo with a scale other than the group's."""
        estimator = ADVANTAGES.get(self.advantage_estimator) if self.advantage_estimator else None
        if estimator is not None and estimator.spec.nonnegative_rewards:
            if self.kl_placement == "reward" and self.beta > 0:
                raise ValueError(
                    f"kl_placement: 'reward' subtracts β Σ_t KL_t from the rewards, but advantage_estimator="
                    f"{estimator.name!r} needs rewards ≥ 0 (a pass rate); use kl_placement='loss' or beta=0."
                )
            if self.overlong_buffer_length is not None:
                raise ValueError(
                    f"overlong_buffer_length: the soft overlong punishment adds rewards ≤ 0, but advantage_estimator="
                    f"{estimator.name!r} needs rewards ≥ 0 (a pass rate); set overlong_buffer_length=None, or mask "
                    f"truncated completions with mask_truncated_completions=True."
                )
        if self.multi_objective_aggregation != "normalize_then_sum":
            return
        # GDPO (`normalize_then_sum`) runs the estimator once per reward function: what has no per-function form
        if self.kl_placement == "reward" and self.beta > 0:
            raise ValueError(
                "multi_objective_aggregation: 'normalize_then_sum' runs the advantage estimator on each reward "
                "function separately, and the KL penalty of kl_placement='reward' belongs to none of them; use "
                "kl_placement='loss' (or 'sum_then_normalize')."
            )
        if has_critic(self.advantage_estimator):
            raise ValueError(
                f"multi_objective_aggregation: 'normalize_then_sum' runs the advantage estimator on each reward "
                f"function separately, but {self.advantage_estimator!r} needs a critic, which learns the value of the "
                f"summed reward only; use 'sum_then_normalize' or another estimator."
            )
        if estimator is not None and estimator.name == "grpo" and self.scale_rewards != "group":
            raise ValueError(
                f"scale_rewards: {self.scale_rewards!r} with multi_objective_aggregation='normalize_then_sum' and "
                f"advantage_estimator='grpo' would scale each reward function by a {self.scale_rewards} std, where "
                f"TRL's normalize_then_sum divides each by its group std; set scale_rewards='group'."
            )


@dataclass
class KLControlFields:
    """The adaptive KL coefficient and ProRL's reference resets."""

    kl_target: float | None = help_field(
        "Adaptive KL coefficient: target KL per token, steered by `kl_controller` after every optimizer step. None "
        "keeps β fixed."
    )
    kl_controller: str = help_field(
        "Rule that adapts β toward kl_target: 'doubling' (PPO, arXiv:1707.06347: β doubles above 1.5·target and "
        "halves below target/1.5) or 'proportional' (Ziegler et al., arXiv:1909.08593: β ← β·(1 + K·e), "
        "e = clip(KL/target − 1, ±0.2), K = kl_controller_gain).",
        "doubling",
        choices=["doubling", "proportional"],
    )
    kl_controller_gain: float = help_field("Gain K of the proportional KL controller (paper: 0.1).", 0.1)
    ref_reset_steps: int | None = help_field(
        "ProRL reference resets: every N optimizer steps the reference becomes the current policy. None: never."
    )
    ref_reset_optimizer: bool = help_field(
        "ProRL: also clear the optimizer state (Adam moments) at each reference reset, as the paper does.", False
    )

    def _check_kl_control_ranges(self) -> None:
        if self.kl_target is not None and self.kl_target <= 0:
            raise ValueError(f"kl_target: must be > 0, got {self.kl_target}.")
        if not 0 < self.kl_controller_gain <= 5:
            raise ValueError(
                f"kl_controller_gain: must be in (0, 5] so that β stays positive (1 + K·e > 0 for |e| ≤ 0.2), got "
                f"{self.kl_controller_gain}."
            )
        if self.ref_reset_steps is not None and self.ref_reset_steps < 1:
            raise ValueError(f"ref_reset_steps: must be ≥ 1, got {self.ref_reset_steps}.")

    def _check_kl_combinations(self) -> None:
        """What needs a KL coefficient; two ways of moving the reference."""
        if self.beta == 0.0:
            for name, active in (
                ("kl_placement", self.kl_placement == "reward"),
                ("kl_target", self.kl_target is not None),
                ("ref_reset_steps", self.ref_reset_steps is not None),
            ):
                if active:
                    raise ValueError(f"{name}: needs a KL coefficient; set beta > 0 (with beta = 0 there is no KL).")
        if self.ref_reset_steps is not None and self.sync_ref_model:
            raise ValueError("ref_reset_steps: TRL's sync_ref_model also moves the reference; use only one of them.")
