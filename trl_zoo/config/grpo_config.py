"""`GRPOConfig`: TRL's config plus trl_zoo's axes, one dataclass a group, composed flat and validated when built.

Each group is an ordinary dataclass in its own file with the checks of its own fields (`FIELD_GROUPS`, in the order
their fields follow TRL's). `GRPOConfig` inherits from all of them and from TRL's `GRPOConfig`, so
`dataclasses.fields(GRPOConfig)` is one flat list: TRL's fields (`loss_type` keeps its place, with trl_zoo's help),
then each group's in turn. TRL's `TrlParser` / transformers' `HfArgumentParser` parse it as any dataclass (flags,
YAML keys), and the saved config holds every field.

Plugin fields. A field that a plugin's loss, estimator or sampler declares (`PluginField` in its spec) is not a
dataclass field (plugins register after this class is made); its value lives in `plugin_args`. The keyword
`GRPOConfig(my_field=3)` is routed there by the metaclass (`_PluginKeywords`: the generated `__init__` takes only
the class's own fields, so a keyword it does not know has to be set aside before it runs) and merged into
`plugin_args` in `__post_init__`; `args.my_field` reads it (`__getattr__`, the declared default when unset).

Tests: tests/test_validation.py, tests/test_table_fields.py, tests/test_hyperparameter_ranges.py.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

from trl import GRPOConfig as TRLGRPOConfig

from ..registry import ADVANTAGES, AGGREGATIONS, KL_ESTIMATORS, LOSSES, SAMPLERS
from ..specs import PluginField, check_finite, validate_settings
from .advantages import AdvantageFields, KLControlFields
from .compute import ComputeFields
from .critic import CriticFields
from .expert_sft import ExpertSFTFields
from .field_types import check_field_types
from .fields import (
    TABLE_CHOICES,
    TABLE_FIELDS,
    EstimatorTableFields,
    LossTableFields,
    SamplerTableFields,
    warn_unread_table_fields,
)
from .generation_speed import GenerationSpeedFields
from .loss import LossFields
from .run import TRL_CHOICES, TRL_LOSS_FIELDS, RunFields
from .sampling import OverlongFields, SamplingFields
from .speed_recipe import apply_speed_recipe
from .teacher import TeacherFields
from .vllm_sampling import check_vllm_truncated_sampling

# The field groups in the order their fields follow TRL's (and show in `trl-zoo train --help`).
FIELD_GROUPS = (
    LossFields, LossTableFields,
    AdvantageFields, TeacherFields, ExpertSFTFields, KLControlFields, CriticFields, EstimatorTableFields,
    SamplingFields, SamplerTableFields, OverlongFields,
    ComputeFields, GenerationSpeedFields, RunFields,
)
# The tables whose names the config takes, by field (loss_type and kl_estimator may not be None).
TABLE_NAMES = (
    ("loss_type", LOSSES), ("loss_aggregation", AGGREGATIONS), ("advantage_estimator", ADVANTAGES),
    ("dynamic_sampling", SAMPLERS), ("kl_estimator", KL_ESTIMATORS),
)


class _Given(NamedTuple):
    """`plugin_args` as given, and the plugin fields given as keywords, until `__post_init__` merges them."""

    plugin_args: dict | str | None
    keywords: dict


class _PluginKeywords(type):
    """Sets a declared plugin field given as a keyword aside, in `plugin_args`, before the generated `__init__`."""

    def __call__(cls, *args, **kwargs):
        declared = plugin_fields()
        keywords = {name: kwargs.pop(name) for name in list(kwargs) if name in declared}
        if keywords:
            kwargs["plugin_args"] = _Given(kwargs.get("plugin_args"), keywords)
        return super().__call__(*args, **kwargs)

    @property
    def __signature__(cls) -> inspect.Signature:
        """`inspect.signature(GRPOConfig)`: the dataclass `__init__`'s fields, not `__call__`'s (*args, **kwargs)."""
        signature = inspect.signature(cls.__init__)
        return signature.replace(parameters=list(signature.parameters.values())[1:])


@dataclass
class GRPOConfig(*reversed(FIELD_GROUPS), TRLGRPOConfig, metaclass=_PluginKeywords):
    r"""TRL's `GRPOConfig` with trl_zoo's fields. See the field help for each; docs/formulas.md for the formulas."""

    # (the bases are listed last group first: a dataclass takes its bases' fields from the end of the MRO)

    def __post_init__(self):
        given = self.plugin_args
        keywords = {}
        if isinstance(given, _Given):
            given, keywords = given
        if isinstance(given, str):  # a JSON object from the command line
            given = json.loads(given)
        self.plugin_args = {**(given or {}), **keywords} if keywords else given
        check_field_types(self)  # before TRL compares or divides by them
        self._check_batch_counts()  # before TRL divides by them
        apply_speed_recipe(self)  # before TRL derives steps_per_generation
        super().__post_init__()
        self.validate()

    def validate(self):
        """Raise a one-line ValueError naming the fields and the fix for every setting that cannot work, from the
        config alone (what needs the model is checked by the trainer). In order: finite numbers, names in the tables
        and choices, the shared fields' ranges, each chosen plugin's own `validate` and declared fields, the critic's
        fields, then settings that contradict each other."""
        check_field_types(self)
        for name in (*TRL_LOSS_FIELDS, *zoo_field_names()):  # a plugin's own fields: PluginField.checked
            check_finite(name, getattr(self, name))
        self._validate_names()
        for name, (plugin_field, owner) in TABLE_FIELDS.items():  # types and choices, whichever entry is chosen
            try:
                setattr(self, name, plugin_field.checked(getattr(self, name), check_range=False))
            except ValueError as error:
                raise ValueError(f"{str(error).rstrip('.')} ({owner}).") from None
        self._check_trl_ranges()
        self._check_advantage_ranges()
        self._check_kl_control_ranges()
        self._check_overlong_ranges()
        # the chosen entries' own fields (ranges) and how they read the shared ones (their files)
        for choice, table in TABLE_CHOICES:
            if getattr(self, choice) is not None:
                chosen = table.get(getattr(self, choice))
                validate_settings(chosen.spec, self, f"{table.kind} {chosen.name!r}")
        entry = LOSSES.get(self.loss_type)
        self._validate_plugin_args()
        self._check_critic_fields()
        # settings that are each valid but cannot work together; every message names both sides
        self._check_teacher_fields()
        self._check_expert_sft_fields()
        self._check_loss_aggregation(entry)
        self._check_kl_combinations()
        self._check_compute_combinations(entry)
        self._check_generation_speed_combinations()
        check_vllm_truncated_sampling(self)
        self._check_old_logps_skip(bool(entry.spec.requires_moe))
        self._check_estimator_combinations()
        warn_unread_table_fields(self)  # settings that are valid and accepted, but that nothing reads

    def _validate_names(self):
        """Every table name exists; every field with a fixed list of values has one of them."""
        for name, table in TABLE_NAMES:
            value = getattr(self, name)
            if (value is not None or name in ("loss_type", "kl_estimator")) and value not in table:
                raise ValueError(table.unknown_message(value, name))
        choices = {f.name: (*f.metadata["choices"], *([None] if f.default is None else [])) for f in fields(self)
                   if "choices" in f.metadata}
        for name, allowed in {**choices, **TRL_CHOICES}.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: got {getattr(self, name)!r}; use one of {', '.join(map(str, allowed))}.")

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


def zoo_field_names() -> list[str]:
    """The fields trl_zoo's `GRPOConfig` adds to TRL's."""
    trl_names = {f.name for f in fields(TRLGRPOConfig)}
    return [f.name for f in fields(GRPOConfig) if f.name not in trl_names]


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


def to_zoo_config(args) -> GRPOConfig:
    """Return `args` as a trl_zoo `GRPOConfig` (a plain `trl.GRPOConfig` is converted field by field)."""
    if isinstance(args, GRPOConfig):
        args.validate()  # fields may have been changed since the config was built
        return args
    values = {f.name: getattr(args, f.name) for f in fields(TRLGRPOConfig) if f.init and hasattr(args, f.name)}
    values["generation_batch_size"] = None  # derived again from steps_per_generation by __post_init__
    return GRPOConfig(**values)
