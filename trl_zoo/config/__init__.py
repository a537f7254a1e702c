"""`GRPOConfig`: TRL's config plus the axes trl_zoo adds, written by concern and validated when the config is built.

Every TRL field keeps its meaning and default (including `bf16` on by default; set `bf16=False` for exact fp32
math). `loss_type` accepts any name in the loss table (`trl-zoo list`), not only TRL's.

One file a concern, each a dataclass of its fields with the checks of those fields, composed flat in
`grpo_config.py` (`FIELD_GROUPS`):

    loss.py               loss_type, loss_aggregation, allow_sequence_loss_token_sum, dual_clip
    advantages.py         advantage_estimator, advantage_*, kl_estimator, kl_placement; kl_target, kl_controller*,
                          ref_reset_*; what an estimator cannot take (GDPO's per-reward form, rewards ≥ 0)
    teacher.py            teacher_model, teacher_coef, teacher_prompt_template, teacher_only
    expert_sft.py         expert_column, expert_mu_peak, expert_mu_valley, expert_mu_warmup_steps,
                          expert_mu_decay_steps, expert_phi (CHORD's SFT term on expert answers)
    critic.py             critic_model, value_coef, value_clip, value_learning_rate
    sampling.py           dynamic_sampling; overlong_buffer_length, overlong_max_length, overlong_penalty_factor;
                          truncation_penalty, truncation_length (DLER)
    compute.py            skip_zero_advantage, length_bucketing, prompt_once, fused_lora (probes.py: the loss probes)
    generation_speed.py   speed_recipe (speed_recipe.py), merge_adapter_for_generation, generation_autocast,
                          compile_generation, compile_generation_backend, skip_on_policy_old_logps
    run.py                nan_rewards, nonfinite_policy, reward_timeout_warning, plugin_args; the checks of TRL's
                          own fields
    fields.py             the built-in table entries' fields as dataclass groups (`TABLE_FIELDS`); a table field
                          the chosen entry does not read warns
    field_types.py        a value of the wrong type for a field typed bool, int or float, refused before TRL reads it
    vllm_sampling.py      vLLM's truncated sampling (top_p/top_k/min_p) refused where its log-probs feed the
                          importance-sampling correction or the off-policy mask (huggingface/trl#6789)
    generation_buffer.py  TRL's generation-buffer rule and old-log-prob condition in the config's numbers (read by
                          generation_speed.py's checks and by the door, hooks/trl_access.py)

Losses, estimators and samplers declare their fields in their specs (`PluginField`): the built-in entries' become
ordinary fields of `GRPOConfig` (`fields.py`), a third party's live in `plugin_args` (`GRPOConfig(my_field=3)` and
`args.my_field` work); their type and choices are checked whenever the config is built, their range when their entry
is chosen, and `trl-zoo train` makes a flag and a YAML key of each (`cli/arguments/train_arguments.py`;
docs/architecture.md, "Plugin hyperparameters").

Tests: tests/test_validation.py (every impossible setting, plugin fields), tests/test_table_fields.py (the built-in
entries' fields), tests/test_hyperparameter_ranges.py (NaN, ±inf, inert clips).
"""

from .fields import TABLE_FIELDS
from .grpo_config import FIELD_GROUPS, GRPOConfig, plugin_fields, to_zoo_config, zoo_field_names
from .run import TRL_CHOICES, TRL_LOSS_FIELDS

__all__ = [
    "FIELD_GROUPS", "GRPOConfig", "TABLE_FIELDS", "TRL_CHOICES", "TRL_LOSS_FIELDS", "plugin_fields", "to_zoo_config",
    "zoo_field_names",
]
