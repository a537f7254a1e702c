"""`GRPOConfig`: TRL's config plus the axes trl_zoo adds, validated when the config is built.

Every TRL field keeps its meaning and default (including `bf16` on by default; set `bf16=False` for exact fp32
math). `loss_type` accepts any name in the loss table (`trl-zoo list`), not only TRL's.

Plugin hyperparameters: a loss, estimator or sampler declares its own fields in its spec (`PluginField`). Their
values live in one dataclass field, `plugin_args` (a mapping, so the class stays an ordinary dataclass that TRL's
`TrlParser` / transformers' `HfArgumentParser` parse as they are); `GRPOConfig(my_field=3)` is accepted and stored
there, `args.my_field` reads it (the declared default when unset), and `trl-zoo train` makes a flag and a YAML key of
each declared field (`cli/arguments.py`). A value is checked against its declaration when the config is built.

The built-in entries declare their fields the same way, in their own files (`PluginField`s in the loss's spec), but
those are made ordinary dataclass fields of `GRPOConfig` when this module is imported (`TABLE_FIELDS`): for them
`GRPOConfig(dppo_mask_low=...)`, `args.dppo_mask_low = ...`, `dataclasses.fields`, TRL's parser (flags, YAML keys)
and the saved config work as for any field. Their type and choices are checked whenever the config is built, their
range when their entry is chosen.

Tests: tests/test_validation.py (every impossible setting, plugin fields), tests/test_table_fields.py (the built-in
entries' fields), tests/test_hyperparameter_ranges.py (NaN, ±inf, inert clips).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from trl import GRPOConfig as TRLGRPOConfig

from .. import advantages, aggregation, critic, kl, losses, samplers  # noqa: F401  (the tables the help lists)
from ..registry import ADVANTAGES, AGGREGATIONS, KL_ESTIMATORS, LOSSES, SAMPLERS
from ..specs import PluginField, validate_settings
from .compute import check_length_bucketing, check_zero_advantage_skip
from .generation_speed import MIXED_DTYPE_STATIC_CACHE_SINCE, static_cache_fails_on_mixed_dtypes
from .speed_recipe import SPEED_RECIPES, apply_speed_recipe, refusal_words
from .teacher import check_teacher_options


def _names(table) -> str:
    """The built-in names of a table, for a field's help (plugins are listed by `trl-zoo list`)."""
    return ", ".join(table.names(plugins=False))


# TRL's fields with a fixed list of values (trl_zoo's own carry theirs in their field's metadata)
TRL_CHOICES = {"importance_sampling_level": ("token", "sequence")}


def _help(text: str, default=None, choices=None):
    metadata = {"help": text}
    if choices:
        metadata["choices"] = choices
    return field(default=default, metadata=metadata)


# TRL's fields that enter the loss or the sampling; with trl_zoo's own fields they must be finite when set.
TRL_LOSS_FIELDS = (
    "epsilon", "epsilon_high", "delta", "beta", "temperature", "top_p", "top_entropy_quantile",
    "sapo_temperature_pos", "sapo_temperature_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg",
    "vespo_lambda_neg",
)


def zoo_field_names() -> list[str]:
    """The fields trl_zoo's `GRPOConfig` adds to TRL's."""
    trl_names = {f.name for f in fields(TRLGRPOConfig)}
    return [f.name for f in fields(GRPOConfig) if f.name not in trl_names]


def _table_fields(table) -> dict[str, tuple[PluginField, str]]:
    """The fields that trl_zoo's own entries of `table` declare: name -> (field, "loss 'x'"), in name order. A field
    declared by several entries (gmpo_epsilon: gmpo and rspo) is one field."""
    declared: dict[str, tuple[PluginField, str]] = {}
    for entry in table.entries(plugins=False):
        if entry.fn.__module__.partition(".")[0] != __name__.partition(".")[0]:
            continue  # registered by a third party before this module was imported
        for plugin_field in entry.spec.fields:
            if plugin_field.name in declared and declared[plugin_field.name][0] != plugin_field:
                raise ValueError(f"{table.kind} {entry.name!r}: declares {plugin_field.name!r} differently.")
            declared.setdefault(plugin_field.name, (plugin_field, f"{table.kind} {entry.name!r}"))
    return declared


# The built-in entries' own hyperparameters (declared in their files), made dataclass fields of GRPOConfig; each
# table's join the class's fields before the one named here, so that they show in their group of `--help`.
_TABLE_GROUPS = (
    (LOSSES, "advantage_estimator"), (ADVANTAGES, "dynamic_sampling"), (SAMPLERS, "overlong_buffer_length"),
)
_FIELDS_BEFORE = {before: _table_fields(table) for table, before in _TABLE_GROUPS}
TABLE_FIELDS = {name: declared for group in _FIELDS_BEFORE.values() for name, declared in group.items()}


def _with_table_fields(cls):
    """Add `TABLE_FIELDS` to the class body as dataclass fields, with the type, default, help (with the range) and
    choices of their declarations. Applied before `@dataclass`."""
    annotations = {}
    for name, annotation in cls.__dict__["__annotations__"].items():
        for field_name, (plugin_field, _) in _FIELDS_BEFORE.get(name, {}).items():
            optional = plugin_field.default is None
            annotations[field_name] = plugin_field.type | None if optional else plugin_field.type
            choices = list(plugin_field.choices) if plugin_field.choices is not None else None
            setattr(cls, field_name, _help(plugin_field.description, plugin_field.default, choices))
        annotations[name] = annotation
    cls.__annotations__ = annotations
    return cls


def refuse_conflicts(config, field: str, conflicts) -> None:
    """Raise a one-line ValueError for the first (setting, active, why) of `conflicts` that is active: the boolean
    `field` cannot work with that setting (naming the speed_recipe that set the field, if one did)."""
    label, fix = refusal_words(config, field, fix=f"set {field}=False")
    for name, active, why in conflicts:
        if active:
            raise ValueError(f"{label}: not with {name} ({why}); {fix}.")


@dataclass
@_with_table_fields
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
        f"Override the loss's own aggregation: {_names(AGGREGATIONS)} (token_sum_over_max_length's earlier name, "
        "constant, still works). None uses the loss's default (e.g. sequence_mean for grpo, token_mean_global for "
        "dapo)."
    )
    allow_sequence_loss_token_sum: bool = _help(
        "Allow a sequence-level loss (gspo, gmpo, ...) with a token-sum aggregation, which weights each sequence "
        "by its length instead of optimising the per-sequence objective.",
        False,
    )
    dual_clip: float | None = _help(
        "Dual-clip constant c > 1 for PPO-clip losses: for Â < 0 the term is max(ℓ, c·Â). None disables it."
    )
    # the built-in losses' own fields (dppo_mask_low, m2po_threshold, ...) are declared in their files and made
    # fields of this class here (`TABLE_FIELDS`)

    # --- advantages and KL ---
    advantage_estimator: str | None = _help(
        f"Advantage estimator from the advantage table: {_names(ADVANTAGES)}. None keeps TRL's own advantages (group "
        "mean/std per `scale_rewards`)."
    )
    advantage_std_unbiased: bool = _help("Group std convention for the grpo estimator: unbiased (N−1) or not.", True)
    advantage_epsilon: float = _help("ε added to the std in advantage normalisation (TRL: 1e-4).", 1e-4)
    kl_estimator: str = _help(f"KL estimator: {_names(KL_ESTIMATORS)} (k3 is TRL's, the default).", "k3")
    kl_placement: str = _help(
        "Where the KL leash goes: 'loss' (GRPO: β·KL added per token to the loss) or 'reward' (RLHF: "
        "R' = R − β Σ_t KL_t before the advantage estimator).",
        "loss",
        choices=["loss", "reward"],
    )
    teacher_model: str | None = _help(
        "On-policy distillation inside the RL loss: a teacher whose per-token log-ratio λ·(log π_T − log π_old) is "
        "added to the advantages (hooks/teacher.py). A model name or path (loaded like TRL's reference model, "
        "frozen), or 'self': the policy's base weights under PEFT's disable_adapter(). None: no teacher."
    )
    teacher_coef: float = _help("λ, the weight of the teacher's per-token log-ratio in the advantages (≥ 0).", 1.0)
    teacher_prompt_template: str | None = _help(
        "The teacher's prompt (privileged context), a str.format template over the dataset columns, e.g. "
        "'{prompt}\\n(The answer is {answer}.)'; the teacher scores the same completion tokens after it. With a chat "
        "prompt {prompt} is the last user message's text, which the filled template replaces. None: the policy's "
        "prompt."
    )
    teacher_only: bool = _help(
        "Train on the teacher's signal alone: Â_{i,t} = λ·(log π_T − log π_old), the reward advantages dropped.", False
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
    # gae's own fields (gae_gamma, gae_lambda, ..., VAPO's vapo_*) are declared in critic.py and made fields of this
    # class here (`TABLE_FIELDS`)

    # --- sampling and reward shaping ---
    dynamic_sampling: str | None = _help(
        f"Sampler from the sampler table: {_names(SAMPLERS)} (resample: DAPO, drop zero-spread groups and generate "
        "more; reweight: drop them, scale the rest by 1/(1−p); greso: also skip prompts whose recent groups had no "
        "spread before generating). None trains on every group."
    )
    # the samplers' own fields (dynamic_sampling_max_rounds, dynamic_sampling_on_exhausted: resample's and greso's;
    # greso_*) are declared in samplers/ and made fields of this class here (`TABLE_FIELDS`)
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
    speed_recipe: str | None = _help(
        "Set the measured single-GPU LoRA speed-ups together (trl_zoo/config/speed_recipe.py). 'lora': "
        "merge_adapter_for_generation and steps_per_generation = 2 x gradient_accumulation_steps (real model on an "
        "H200: 0.62x TRL's time to its accuracy). 'lora_compiled': also compile_generation and generation_autocast "
        "(0.54x once torch's compile cache is warm, 0.87x on a first run; transformers >= 5.24). A "
        "steps_per_generation or generation_batch_size you give wins.",
        None,
        choices=list(SPEED_RECIPES),
    )
    merge_adapter_for_generation: bool = _help(
        "Merge the LoRA adapter into the base weights while TRL generates with model.generate (W + s·BA, one matmul "
        "per layer instead of three), then restore the base weights exactly. Same completions up to float rounding; "
        "needs a PEFT adapter, no vLLM, no quantized base, no ZeRO-3/FSDP.",
        False,
    )
    generation_autocast: bool = _help(
        "Generate under the training forward's mixed precision (accelerate's autocast, bf16 or fp16). TRL generates "
        "outside autocast, so with float32 weights (TRL's default dtype) every decoding matmul runs in fp32 while the "
        "old log-probs and the loss run in bf16. Weights untouched; needs bf16 or fp16; not with vLLM or continuous "
        "batching. It pays off with compile_generation (135 M model on an H200: compiled decoding 0.59 s instead of "
        "1.07 s in fp32); that pair needs transformers >= 5.24.",
        False,
    )
    compile_generation: bool = _help(
        "Compile the decoding of TRL's model.generate with a static KV cache (transformers' compiled decoding, CUDA "
        "graphs on a GPU), which TRL turns off (disable_compile=True). The first generation batch pays the compile "
        "(135 M model on an H200: ~25 s the first time, ~8 s once torch's compile cache holds it), then decoding "
        "runs ~3x faster; not with vLLM or continuous batching; cache_implementation unset or 'static'.",
        False,
    )
    compile_generation_backend: str = _help(
        "How compile_generation compiles: 'inductor' (transformers' default CompileConfig: generated kernels and CUDA "
        "graphs) or 'cudagraphs' (CUDA graphs of the traced decoding only, no kernel generation: on a 135 M model "
        "about 12 s of compiling instead of ~30 s cold, but decoding at 0.62x eager's time instead of 0.33x).",
        "inductor",
        choices=["inductor", "cudagraphs"],
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

    plugin_args: dict | str | None = _help(
        "Values of the fields that plugins declare in their specs (`trl-zoo list` shows the plugins), by name; a "
        "JSON object on the command line. Each declared field is also a keyword of GRPOConfig, a key of a YAML "
        "config and a flag of `trl-zoo train`, and reads as args.<name>."
    )

    def __post_init__(self):
        if isinstance(self.plugin_args, str):  # a JSON object from the command line
            self.plugin_args = json.loads(self.plugin_args)
        if isinstance(self.num_generations, int) and self.num_generations < 2:  # before TRL divides by it
            raise ValueError(
                f"num_generations: got {self.num_generations}; GRPO-family advantages and dynamic sampling compare "
                f"the completions of one prompt, so use num_generations ≥ 2."
            )
        apply_speed_recipe(self)  # before TRL derives steps_per_generation
        super().__post_init__()
        self.validate()

    def validate(self):
        """Raise a one-line ValueError naming the fields and the fix for every setting that cannot work, from the
        config alone (what needs the model is checked by the trainer). In order: names in the tables and choices,
        the shared fields' ranges, each chosen plugin's own `validate` and declared fields, the critic's fields,
        then settings that contradict each other."""
        for name in (*TRL_LOSS_FIELDS, *zoo_field_names()):
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):  # NaN passes every range check below
                raise ValueError(f"{name}: must be a finite number, got {value}.")
        self._validate_names()
        for name, (plugin_field, owner) in TABLE_FIELDS.items():  # types and choices, whichever entry is chosen
            try:
                setattr(self, name, plugin_field.checked(getattr(self, name), check_range=False))
            except ValueError as error:
                raise ValueError(f"{str(error).rstrip('.')} ({owner}).") from None
        self._validate_shared_ranges()
        # the chosen entries' own fields (ranges) and how they read the shared ones (their files)
        for table, name in ((LOSSES, self.loss_type), (ADVANTAGES, self.advantage_estimator),
                            (SAMPLERS, self.dynamic_sampling)):
            if name is not None:
                chosen = table.get(name)
                validate_settings(chosen.spec, self, f"{table.kind} {chosen.name!r}")
        entry = LOSSES.get(self.loss_type)
        self._validate_plugin_args()
        self._validate_critic()
        self._check_contradictions(entry)
        self._validate_reward_domain()
        self._validate_reward_decoupling()

    def _validate_plugin_args(self):
        """Each value of `plugin_args` belongs to a declared field and has its type and range."""
        if self.plugin_args is None:
            return
        if not isinstance(self.plugin_args, dict):
            raise ValueError(f"plugin_args: expected a mapping of field name to value, got {self.plugin_args!r}.")
        declared = plugin_fields()
        for name, value in self.plugin_args.items():
            if name not in declared:
                known = ", ".join(sorted(declared)) or "none"
                raise ValueError(f"plugin_args: no plugin declares a field {name!r}; declared fields: {known}.")
            plugin_field, owner = declared[name]
            try:
                self.plugin_args[name] = plugin_field.checked(value)
            except ValueError as error:
                raise ValueError(f"{str(error).rstrip('.')} ({owner}).") from None

    def __getattr__(self, name: str) -> Any:
        """A declared plugin field: its value in `plugin_args`, or its default (only called for names the dataclass
        does not have)."""
        if name.startswith("_") or name == "plugin_args":
            raise AttributeError(name)
        declared = plugin_fields().get(name)
        if declared is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return (self.__dict__.get("plugin_args") or {}).get(name, declared[0].default)

    def _validate_names(self):
        """Every table name exists; every field with a fixed list of values has one of them."""
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
        choices = {f.name: (*f.metadata["choices"], *([None] if f.default is None else [])) for f in fields(self)
                   if "choices" in f.metadata}
        for name, allowed in {**choices, **TRL_CHOICES}.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: got {getattr(self, name)!r}; use one of {', '.join(map(str, allowed))}.")

    def _validate_shared_ranges(self):
        """The ranges of the fields every run reads (a plugin's own fields are checked by its `validate`)."""
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

    def _check_contradictions(self, entry):
        """Settings that are each valid but cannot work together; every message names both sides."""
        check_teacher_options(self)
        aggregation_name = self.loss_aggregation or entry.spec.aggregation
        if (
            entry.spec.sequence_level
            and AGGREGATIONS.get(aggregation_name).name
            in ("token_mean_local", "token_mean_global", "token_sum_over_max_length")
            and not self.allow_sequence_loss_token_sum
        ):
            raise ValueError(
                f"loss_aggregation: {aggregation_name!r} weights each sequence of the sequence-level loss "
                f"{self.loss_type!r} by its length; use 'sequence_mean', or set allow_sequence_loss_token_sum=True."
            )
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
        if self.skip_zero_advantage:
            if entry.spec.requires_moe:
                raise ValueError(
                    f"skip_zero_advantage: not supported with loss_type {entry.name!r}, whose router statistics are "
                    f"recorded for every sequence of the micro-batch; set skip_zero_advantage=False."
                )
            check_zero_advantage_skip(entry, self)
        if self.length_bucketing:
            check_length_bucketing(entry, self)
        if self.compile_generation:
            refuse_conflicts(self, "compile_generation", (
                ("use_vllm", self.use_vllm, "vLLM compiles its own decoding"),
                ("use_transformers_continuous_batching", self.use_transformers_continuous_batching,
                 "set the compile options of transformers_continuous_batching_config instead"),
                ("cache_implementation", self.cache_implementation not in (None, "static"),
                 f"{self.cache_implementation!r} is not a compileable cache; leave it unset or use 'static'"),
            ))
        elif self.compile_generation_backend != "inductor":
            raise ValueError(
                f"compile_generation_backend={self.compile_generation_backend!r} has no effect without "
                f"compile_generation=True; set both or neither."
            )
        if self.generation_autocast:
            refuse_conflicts(self, "generation_autocast", (
                ("bf16=False and fp16=False", not (self.bf16 or self.fp16), "no mixed precision to generate under"),
                ("use_vllm", self.use_vllm, "vLLM generates in its own dtype"),
                ("use_transformers_continuous_batching", self.use_transformers_continuous_batching,
                 "TRL casts the model for continuous batching itself"),
                ("a static KV cache (compile_generation or cache_implementation='static')",
                 (self.compile_generation or self.cache_implementation == "static")
                 and static_cache_fails_on_mixed_dtypes(),
                 f"transformers < {MIXED_DTYPE_STATIC_CACHE_SINCE} allocates autocast's bf16 values in the fp32 keys' "
                 f"dtype and fails in index_copy_; upgrade transformers to >= {MIXED_DTYPE_STATIC_CACHE_SINCE}"),
            ))
        if self.merge_adapter_for_generation and self.use_vllm:
            label, fix = refusal_words(self, "merge_adapter_for_generation", fix="set one of them False")
            raise ValueError(f"{label}: not with use_vllm=True (TRL already syncs merged weights to vLLM); {fix}.")

    def _validate_reward_decoupling(self):
        """GDPO (`normalize_then_sum`) runs the estimator once per reward function: what has no per-function form."""
        if self.multi_objective_aggregation != "normalize_then_sum":
            return
        if self.kl_placement == "reward" and self.beta > 0:
            raise ValueError(
                "multi_objective_aggregation: 'normalize_then_sum' runs the advantage estimator on each reward "
                "function separately, and the KL penalty of kl_placement='reward' belongs to none of them; use "
                "kl_placement='loss' (or 'sum_then_normalize')."
            )
        needs = ADVANTAGES.get(self.advantage_estimator).spec.needs if self.advantage_estimator else ()
        if "values" in needs:
            raise ValueError(
                f"multi_objective_aggregation: 'normalize_then_sum' runs the advantage estimator on each reward "
                f"function separately, but {self.advantage_estimator!r} needs a critic, which learns the value of the "
                f"summed reward only; use 'sum_then_normalize' or another estimator."
            )

    def _validate_reward_domain(self):
        """An estimator of rewards ≥ 0 only (`nonnegative_rewards`, e.g. maxrl) gets no negative reward terms."""
        estimator = ADVANTAGES.get(self.advantage_estimator) if self.advantage_estimator else None
        if estimator is None or not estimator.spec.nonnegative_rewards:
            return
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

    def _validate_critic(self):
        """The critic's fields (here: any estimator that declares `needs=("values",)` gets the critic) and gae's
        (declared in `trl_zoo/critic.py`) need such an estimator; the critic's ranges."""
        needs = ADVANTAGES.get(self.advantage_estimator).spec.needs if self.advantage_estimator else ()
        if "values" in needs:
            if self.value_coef < 0:
                raise ValueError(f"value_coef: must be ≥ 0, got {self.value_coef}.")
            for name in ("value_clip", "value_learning_rate"):
                value = getattr(self, name)
                if value is not None and value <= 0:
                    raise ValueError(f"{name}: must be > 0 (or None), got {value}.")
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


def plugin_fields() -> dict[str, tuple[PluginField, str]]:
    """Every field that the registered losses, estimators and samplers declare and that is not a GRPOConfig field
    (`TABLE_FIELDS`, the built-in entries' own, are): name -> (field, "loss 'x'"). A name may be declared by several
    entries only as the same field; it may not be another GRPOConfig field."""
    own = {item.name for item in fields(GRPOConfig)}
    declared: dict[str, tuple[PluginField, str]] = {}
    for table in (LOSSES, ADVANTAGES, SAMPLERS):
        for entry in table.entries():
            owner = f"{table.kind} {entry.name!r}"
            for plugin_field in entry.spec.fields:
                name = plugin_field.name
                if name in TABLE_FIELDS and TABLE_FIELDS[name][0] == plugin_field:
                    continue  # a built-in entry's field, or the same field declared again (as rspo does gmpo's)
                if name in own:
                    raise ValueError(f"{owner}: its field {name!r} is already a GRPOConfig field; rename it.")
                if name in declared and declared[name][0] != plugin_field:
                    raise ValueError(
                        f"{owner}: its field {name!r} differs from the one {declared[name][1]} declares; rename one."
                    )
                declared.setdefault(name, (plugin_field, owner))
    return declared


def _accepting_plugin_fields(dataclass_init):
    """The dataclass `__init__`, also taking each declared plugin field as a keyword (stored in `plugin_args`)."""

    @functools.wraps(dataclass_init)
    def __init__(self, *args, **kwargs):
        declared = plugin_fields()
        given = {name: kwargs.pop(name) for name in list(kwargs) if name in declared}
        if given:
            earlier = kwargs.get("plugin_args") or {}
            kwargs["plugin_args"] = {**(json.loads(earlier) if isinstance(earlier, str) else earlier), **given}
        dataclass_init(self, *args, **kwargs)

    return __init__


GRPOConfig.__init__ = _accepting_plugin_fields(GRPOConfig.__init__)


def to_zoo_config(args) -> GRPOConfig:
    """Return `args` as a trl_zoo `GRPOConfig` (a plain `trl.GRPOConfig` is converted field by field)."""
    if isinstance(args, GRPOConfig):
        args.validate()  # fields may have been changed since the config was built
        return args
    values = {f.name: getattr(args, f.name) for f in fields(TRLGRPOConfig) if f.init and hasattr(args, f.name)}
    values["generation_batch_size"] = None  # derived again from steps_per_generation by __post_init__
    return GRPOConfig(**values)
