"""`GRPOConfig`: TRL's config plus the axes trl_zoo adds, validated when the config is built.

Every TRL field keeps its meaning and default (including `bf16` on by default; set `bf16=False` for exact fp32
math). `loss_type` accepts any name in the loss table (`trl-zoo list`), not only TRL's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import torch
from trl import GRPOConfig as TRLGRPOConfig

from . import losses  # noqa: F401  (registers the built-in losses, which loss_type's help lists)
from .registry import ADVANTAGES, AGGREGATIONS, KL_ESTIMATORS, LOSSES, SAMPLERS


def _help(text: str, default=None, choices=None):
    metadata = {"help": text}
    if choices:
        metadata["choices"] = choices
    return field(default=default, metadata=metadata)


# TRL's fields that enter the loss or the sampling; with trl_zoo's own fields they must be finite when set.
TRL_LOSS_FIELDS = (
    "epsilon", "epsilon_high", "delta", "beta", "temperature", "top_p", "top_entropy_quantile",
    "sapo_temperature_pos", "sapo_temperature_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg",
)


def zoo_field_names() -> list[str]:
    """The fields trl_zoo's `GRPOConfig` adds to TRL's."""
    trl_names = {f.name for f in fields(TRLGRPOConfig)}
    return [f.name for f in fields(GRPOConfig) if f.name not in trl_names]


@dataclass
class GRPOConfig(TRLGRPOConfig):
    r"""TRL's `GRPOConfig` with trl_zoo's fields. See the field help for each; docs/formulas.md for the formulas."""

    # --- loss table ---
    loss_type: str = _help(  # TRL's field with TRL's default; the help lists trl_zoo's table instead of TRL's names
        f"Policy loss, a name in trl_zoo's loss table: {', '.join(LOSSES.names(plugins=False))}; or one that a "
        "plugin registers. `trl-zoo list` shows each with its paper. For the names TRL also ships, the loss and its "
        "default aggregation are TRL's.",
        TRLGRPOConfig.loss_type,
    )
    loss_aggregation: str | None = _help(
        "Override the loss's own aggregation: sequence_mean, token_mean_local, token_mean_global, "
        "token_sum_over_max_length (or its earlier name, constant), sequence_sum. None uses the loss's default "
        "(e.g. sequence_mean for grpo, token_mean_global for dapo)."
    )
    allow_sequence_loss_token_sum: bool = _help(
        "Allow a sequence-level loss (gspo, gmpo, ...) with a token-sum aggregation, which weights each sequence "
        "by its length instead of optimising the per-sequence objective.",
        False,
    )
    dual_clip: float | None = _help(
        "Dual-clip constant c > 1 for PPO-clip losses: for Â < 0 the term is max(ℓ, c·Â). None disables it."
    )
    cispo_epsilon_low: float | None = _help(
        "CISPO lower IS-weight clip: the weight is clipped to [1 − cispo_epsilon_low, epsilon_high]. None keeps "
        "TRL's one-sided cap (weights capped above at the absolute value epsilon_high)."
    )
    gmpo_epsilon: float = _help("GMPO's log-space clip range ε: δ is clipped to [−ε, ε] (paper: 0.4).", 0.4)
    ppo_kl_beta: float = _help("Initial penalty β of the ppo_kl loss (KL(π_old‖π_θ) penalty form).", 1.0)
    ppo_kl_target: float | None = _help(
        "Target KL of the ppo_kl loss; β doubles above 1.5·target and halves below target/1.5. None keeps β fixed.",
        0.01,
    )
    clip_cov_ratio: float = _help("Clip-Cov: fraction of tokens whose gradient is detached.", 2e-4)
    clip_cov_lower: float = _help("Clip-Cov: lower bound of the covariance window for selected tokens.", 1.0)
    clip_cov_upper: float = _help("Clip-Cov: upper bound of the covariance window for selected tokens.", 5.0)
    kl_cov_ratio: float = _help("KL-Cov: fraction of tokens (top covariance) that get the KL penalty.", 2e-3)
    kl_cov_coef: float = _help("KL-Cov: coefficient of the per-token |log r| penalty on selected tokens.", 1.0)
    rspo_gamma_min: float = _help("RSPO: floor γ_min of the router-shift weight, in (0, 1].", 0.1)

    # --- advantages and KL ---
    advantage_estimator: str | None = _help(
        "Advantage estimator from the advantage table (grpo, dr_grpo, rloo, reinforce, ...). None keeps TRL's own "
        "advantages (group mean/std per `scale_rewards`)."
    )
    advantage_std_unbiased: bool = _help("Group std convention for the grpo estimator: unbiased (N−1) or not.", True)
    advantage_epsilon: float = _help("ε added to the std in advantage normalisation (TRL: 1e-4).", 1e-4)
    kl_estimator: str = _help("KL estimator: k1, k2 or k3 (TRL's, default).", "k3")
    kl_placement: str = _help(
        "Where the KL leash goes: 'loss' (GRPO: β·KL added per token to the loss) or 'reward' (RLHF: "
        "R' = R − β Σ_t KL_t before the advantage estimator).",
        "loss",
        choices=["loss", "reward"],
    )
    kl_target: float | None = _help(
        "Adaptive KL coefficient: target KL per token, steered by `kl_controller` after every optimizer step. None "
        "keeps β fixed."
    )
    kl_controller: str = _help(
        "Rule that adapts β toward kl_target: 'doubling' (PPO, arXiv:1707.06347: β doubles above 1.5·target and "
        "halves below target/1.5) or 'proportional' (Ziegler et al., arXiv:1909.08593: β ← β·(1 + K·e), "
        "e = clip(KL/target − 1, ±0.2), K = kl_controller_gain).",
        "doubling",
        choices=["doubling", "proportional"],
    )
    kl_controller_gain: float = _help("Gain K of the proportional KL controller (paper: 0.1).", 0.1)
    ref_reset_steps: int | None = _help(
        "ProRL reference resets: every N optimizer steps the reference becomes the current policy. None: never."
    )
    ref_reset_optimizer: bool = _help(
        "ProRL: also clear the optimizer state (Adam moments) at each reference reset, as the paper does.", False
    )
    gae_gamma: float = _help("GAE discount γ over completion tokens (advantage_estimator='gae'), in [0, 1].", 1.0)
    gae_lambda: float = _help(
        "GAE λ of the policy advantages, in [0, 1]: 0 is the one-step TD residual, 1 the Monte-Carlo return minus the "
        "value. Replaced per completion by the length-adaptive λ when vapo_length_alpha is set.",
        0.95,
    )
    gae_lambda_critic: float | None = _help(
        "GAE λ of the value targets, in [0, 1]; None uses the policy's λ (classic PPO). VAPO decouples them with "
        "1.0 (Monte-Carlo targets)."
    )
    gae_whiten: bool = _help("Whiten the GAE token advantages over the batch's completion tokens (mean 0, std 1).", True)
    critic_model: str | None = _help(
        "The critic of advantage_estimator='gae': 'adapter' (its own LoRA adapter on the shared frozen base plus a "
        "scalar head; PEFT policies) or 'head' (an MLP head on the policy's detached last hidden states). None: "
        "'adapter' for a PEFT policy, 'head' otherwise.",
        None,
        choices=["adapter", "head"],
    )
    value_coef: float = _help("Coefficient of the clipped value loss added to the policy loss (vf_coef).", 0.1)
    value_clip: float | None = _help(
        "ε_v of the clipped value loss: V is clipped to V_old ± ε_v. None: the plain squared error.", 0.2
    )
    value_learning_rate: float | None = _help(
        "Learning rate of the critic's parameters (their own optimizer group, same schedule). None: learning_rate."
    )
    vapo_value_warmup_steps: int = _help(
        "VAPO value pre-training: the first N optimizer steps train only the critic, on Monte-Carlo returns "
        "(λ = 1); the policy loss is skipped. 0: none.",
        0,
    )
    vapo_length_alpha: float | None = _help(
        "VAPO length-adaptive GAE: λ_policy = 1 − 1/(α·ℓ) for a completion of ℓ tokens, clamped to [0, 1]. None "
        "keeps gae_lambda. VAPO: 0.05."
    )
    vapo_positive_nll_coef: float = _help(
        "VAPO positive-example LM loss μ: adds μ · token-mean NLL of the completions whose task reward exceeds "
        "vapo_positive_reward_threshold. 0 disables it. VAPO: 0.1.",
        0.0,
    )
    vapo_positive_reward_threshold: float = _help(
        "Task reward above which a completion counts as correct for the positive-example LM loss.", 0.5
    )

    # --- sampling and reward shaping ---
    dynamic_sampling: str | None = _help(
        "Sampler from the sampler table: 'resample' (DAPO: drop zero-spread groups, generate more), 'reweight' "
        "(drop them, scale the rest by 1/(1−p)) or 'greso' (GRESO: also skip prompts whose recent groups had no "
        "spread before generating). None trains on every group."
    )
    dynamic_sampling_max_rounds: int = _help("resample: maximum generation rounds per generation batch.", 8)
    dynamic_sampling_on_exhausted: str = _help(
        "resample: when the cap is hit, 'fill' (pad with the collected zero-spread groups and warn) or 'raise'.",
        "fill",
        choices=["fill", "raise"],
    )
    greso_target_zero_spread: float = _help(
        "greso: target share of zero-spread groups among those generated (1/3 easy, 2/3 hard); above it prompts are "
        "skipped more.",
        0.25,
    )
    greso_step: float = _help("greso: Δ by which the exploration probabilities p_easy and p_hard move per batch.", 0.01)
    greso_initial_explore: float = _help("greso: p_easy and p_hard at the start of training.", 0.5)
    greso_min_explore: float = _help(
        "greso: the least probability with which any prompt is generated (lower bound of p_easy, p_hard and p^z). "
        "The GRESO authors' code bounds p at 0.05; 0.01 generated a third less per trained completion in benchmarks/"
        "rollout_efficiency.py at equal accuracy.",
        0.01,
    )
    overlong_buffer_length: int | None = _help(
        "DAPO soft overlong punishment L_cache: completions longer than overlong_max_length − L_cache get a penalty "
        "ramping to −overlong_penalty_factor at overlong_max_length. None disables it."
    )
    overlong_max_length: int | None = _help("L_max of the soft overlong punishment (default max_completion_length).")
    overlong_penalty_factor: float = _help("Scale of the soft overlong punishment (DAPO: 1.0).", 1.0)

    # --- compute and numerics ---
    skip_zero_advantage: bool = _help(
        "Leave sequences with exactly zero advantage out of the training forward/backward when they cannot "
        "contribute gradient (β = 0, no entropy bonus). Same result, less compute.",
        False,
    )
    length_bucketing: bool = _help(
        "Re-cut each generation batch's micro-batches by length: inside every optimizer step, rows are sorted by "
        "prompt + completion length and each micro-batch keeps only its own padding. Same loss and gradients for "
        "grouping-invariant aggregations (sequence means, DAPO's global token mean, Dr. GRPO's constant); fewer "
        "padded token slots, logged as length_bucketing/padded_token_slots.",
        False,
    )
    nan_rewards: str = _help(
        "What to do when a reward function returns NaN or ±inf: 'raise' (default) or 'drop' (zero advantage, warn).",
        "raise",
        choices=["raise", "drop"],
    )
    nonfinite_policy: str = _help(
        "What to do when an optimizer step's loss or gradient norm is NaN or ±inf: 'raise' (default: stop with the "
        "step, the loss and the term) or 'skip' (drop that update, warn).",
        "raise",
        choices=["raise", "skip"],
    )

    def __post_init__(self):
        if isinstance(self.num_generations, int) and self.num_generations < 2:  # before TRL divides by it
            raise ValueError(
                f"num_generations: got {self.num_generations}; GRPO-family advantages and dynamic sampling compare "
                f"the completions of one prompt, so use num_generations ≥ 2."
            )
        super().__post_init__()
        self.validate()

    def validate(self):
        """Raise a one-line ValueError naming the field and the fix for every impossible setting."""
        for name in (*TRL_LOSS_FIELDS, *zoo_field_names()):
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):  # NaN passes every range check below
                raise ValueError(f"{name}: must be a finite number, got {value}.")
        if self.loss_type not in LOSSES:
            raise ValueError(LOSSES.unknown_message(self.loss_type, "loss_type"))
        for name, table in (
            ("loss_aggregation", AGGREGATIONS),
            ("advantage_estimator", ADVANTAGES),
            ("dynamic_sampling", SAMPLERS),
        ):
            value = getattr(self, name)
            if value is not None and value not in table:
                raise ValueError(table.unknown_message(value, name))
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(KL_ESTIMATORS.unknown_message(self.kl_estimator, "kl_estimator"))
        for name, choices in (
            ("kl_placement", ("loss", "reward")),
            ("kl_controller", ("doubling", "proportional")),
            ("dynamic_sampling_on_exhausted", ("fill", "raise")),
            ("nan_rewards", ("raise", "drop")),
            ("nonfinite_policy", ("raise", "skip")),
            ("importance_sampling_level", ("token", "sequence")),
        ):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name}: got {getattr(self, name)!r}; use one of {', '.join(choices)}.")
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
        entry = LOSSES.get(self.loss_type)
        entry.spec.validate(self)  # the loss's own fields and how it reads the shared ones (its file)
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"dual_clip: must be > 1, got {self.dual_clip}.")
        if not 0 < self.clip_cov_ratio <= 1 or not 0 < self.kl_cov_ratio <= 1:
            raise ValueError("clip_cov_ratio / kl_cov_ratio: token fractions must be in (0, 1].")
        if self.clip_cov_lower >= self.clip_cov_upper:
            raise ValueError(f"clip_cov_lower: must be < clip_cov_upper ({self.clip_cov_upper}).")
        if self.kl_cov_coef < 0:
            raise ValueError(f"kl_cov_coef: must be ≥ 0, got {self.kl_cov_coef}.")
        if not 0 < self.rspo_gamma_min <= 1:
            raise ValueError(f"rspo_gamma_min: must be in (0, 1], got {self.rspo_gamma_min}.")
        if self.beta < 0:
            raise ValueError(f"beta: the KL coefficient must be ≥ 0, got {self.beta}.")
        if self.advantage_epsilon < 0:
            raise ValueError(
                f"advantage_epsilon: must be ≥ 0, got {self.advantage_epsilon} (std + ε could be 0 and the "
                f"advantages infinite)."
            )
        if self.kl_target is not None and self.kl_target <= 0:
            raise ValueError(f"kl_target: must be > 0, got {self.kl_target}.")
        if not 0 < self.kl_controller_gain <= 5:
            raise ValueError(
                f"kl_controller_gain: must be in (0, 5] so that β stays positive (1 + K·e > 0 for |e| ≤ 0.2), got "
                f"{self.kl_controller_gain}."
            )
        if self.ref_reset_steps is not None and self.ref_reset_steps < 1:
            raise ValueError(f"ref_reset_steps: must be ≥ 1, got {self.ref_reset_steps}.")
        if self.dynamic_sampling_max_rounds < 1:
            raise ValueError(f"dynamic_sampling_max_rounds: must be ≥ 1, got {self.dynamic_sampling_max_rounds}.")
        self._validate_greso()
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
        aggregation = self.loss_aggregation or entry.spec.aggregation
        if (
            entry.spec.sequence_level
            and AGGREGATIONS.get(aggregation).name in ("token_mean_local", "token_mean_global", "token_sum_over_max_length")
            and not self.allow_sequence_loss_token_sum
        ):
            raise ValueError(
                f"loss_aggregation: {aggregation!r} weights each sequence of the sequence-level loss "
                f"{self.loss_type!r} by its length; use 'sequence_mean', or set allow_sequence_loss_token_sum=True."
            )
        self._validate_critic()

    def _validate_greso(self):
        """The greso sampler's fields (trl_zoo/greso.py)."""
        if not 0 < self.greso_target_zero_spread < 1:
            raise ValueError(
                f"greso_target_zero_spread: must be in (0, 1), got {self.greso_target_zero_spread}; e.g. 0.25."
            )
        if not 0 < self.greso_step < 1:
            raise ValueError(f"greso_step: must be in (0, 1), got {self.greso_step}; e.g. 0.01.")
        if not 0 < self.greso_min_explore <= 0.95:
            raise ValueError(f"greso_min_explore: must be in (0, 0.95], got {self.greso_min_explore}; e.g. 0.01.")
        if not self.greso_min_explore <= self.greso_initial_explore <= 0.95:
            raise ValueError(
                f"greso_initial_explore: must be in [greso_min_explore, 0.95] = [{self.greso_min_explore}, 0.95], "
                f"got {self.greso_initial_explore}; e.g. 0.5."
            )

    def _validate_critic(self):
        """The critic's fields (advantage_estimator='gae', trl_zoo/critic.py)."""
        for name in ("gae_gamma", "gae_lambda", "gae_lambda_critic"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 1:
                raise ValueError(f"{name}: must be in [0, 1], got {value}.")
        if self.critic_model not in (None, "adapter", "head"):
            raise ValueError(f"critic_model: got {self.critic_model!r}; use 'adapter', 'head' or None.")
        if self.value_coef < 0:
            raise ValueError(f"value_coef: must be ≥ 0, got {self.value_coef}.")
        for name in ("value_clip", "value_learning_rate", "vapo_length_alpha"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name}: must be > 0 (or None), got {value}.")
        if self.vapo_value_warmup_steps < 0 or self.vapo_positive_nll_coef < 0:
            raise ValueError("vapo_value_warmup_steps / vapo_positive_nll_coef: must be ≥ 0.")
        needs = ADVANTAGES.get(self.advantage_estimator).spec.needs if self.advantage_estimator else ()
        if "values" not in needs:
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


def to_zoo_config(args) -> GRPOConfig:
    """Return `args` as a trl_zoo `GRPOConfig` (a plain `trl.GRPOConfig` is converted field by field)."""
    if isinstance(args, GRPOConfig):
        args.validate()  # fields may have been changed since the config was built
        return args
    values = {f.name: getattr(args, f.name) for f in fields(TRLGRPOConfig) if f.init and hasattr(args, f.name)}
    values["generation_batch_size"] = None  # derived again from steps_per_generation by __post_init__
    return GRPOConfig(**values)
