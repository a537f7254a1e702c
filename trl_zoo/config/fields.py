"""How the config's fields are written: `help_field` (a dataclass field with its help and choices), and the built-in
table entries' own hyperparameters made dataclass field groups (`table_field_group`).

The built-in losses, estimators and samplers declare their fields in their own files (`PluginField`s in their
specs). `table_field_group(table)` makes one dataclass of a table's declarations with `dataclasses.make_dataclass`
(the type, default, help with the range, and choices of each declaration), which `GRPOConfig` inherits from like any
other group, so `GRPOConfig(dppo_mask_low=...)`, `args.dppo_mask_low = ...`, `dataclasses.fields`, TRL's parser
(flags, YAML keys) and the saved config work as for any field. `TABLE_FIELDS` maps each to its declaration.

A table field (a built-in entry's or a plugin's) set to other than its default while the chosen entry of its table
does not read it is accepted, as one config may serve several entries, with one warning naming the entries that read
it (`warn_unread_table_fields`).

Tests: tests/test_table_fields.py.
"""

from __future__ import annotations

import warnings
from dataclasses import field, make_dataclass

from .. import advantages, losses, samplers  # noqa: F401  (the built-in entries fill the tables)
from ..registry import ADVANTAGES, LOSSES, SAMPLERS
from ..specs import PluginField

# the field that chooses each table's entry, for the tables whose entries declare fields
TABLE_CHOICES = (("loss_type", LOSSES), ("advantage_estimator", ADVANTAGES), ("dynamic_sampling", SAMPLERS))


def help_field(text: str, default=None, choices=None):
    """A dataclass field with its `--help` text and, if given, its list of values."""
    metadata = {"help": text}
    if choices:
        metadata["choices"] = choices
    return field(default=default, metadata=metadata)


def names_of(table) -> str:
    """The built-in names of a table, for a field's help (plugins are listed by `trl-zoo list`)."""
    return ", ".join(table.names(plugins=False))


def declared_fields(table) -> dict[str, tuple[PluginField, str]]:
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


def table_field_group(table, class_name: str) -> type:
    """A dataclass whose fields are the declarations of `table`'s built-in entries, in name order."""
    items = []
    for name, (plugin_field, _) in declared_fields(table).items():
        annotation = plugin_field.type | None if plugin_field.default is None else plugin_field.type
        choices = list(plugin_field.choices) if plugin_field.choices is not None else None
        items.append((name, annotation, help_field(plugin_field.description, plugin_field.default, choices)))
    return make_dataclass(class_name, items, namespace={"__module__": __name__})


LossTableFields = table_field_group(LOSSES, "LossTableFields")
EstimatorTableFields = table_field_group(ADVANTAGES, "EstimatorTableFields")
SamplerTableFields = table_field_group(SAMPLERS, "SamplerTableFields")
TABLE_FIELDS = {
    name: declared for table in (LOSSES, ADVANTAGES, SAMPLERS) for name, declared in declared_fields(table).items()
}


def warn_unread_table_fields(args) -> None:
    """One warning per field declared by an entry of the loss, estimator or sampler table (plugins' included) that
    `args` sets to other than its default while no chosen entry reads it."""
    readers: dict[str, dict[tuple[str, str], list[str]]] = {}  # field -> (choosing field, kind) -> its readers
    defaults, read = {}, set()
    for choice, table in TABLE_CHOICES:
        for entry in table.entries():
            for plugin_field in entry.spec.fields:
                readers.setdefault(plugin_field.name, {}).setdefault((choice, table.kind), []).append(repr(entry.name))
                defaults[plugin_field.name] = plugin_field.default
                if entry.name == getattr(args, choice):
                    read.add(plugin_field.name)
    for name, by_table in readers.items():
        value = getattr(args, name)
        if name in read or value == defaults[name]:
            continue
        which = " and ".join(
            f"the {kind} {entries[0]}" if len(entries) == 1 else f"the {plural(kind)} {', '.join(entries)}"
            for (_, kind), entries in by_table.items()
        )
        verb = "reads" if sum(map(len, by_table.values())) == 1 else "read"
        chosen = ", ".join(f"{choice} is {getattr(args, choice)!r}" for choice, _ in by_table)
        to = " or ".join(f"{choice} to {entries[0] if len(entries) == 1 else 'one of them'}"
                         for (choice, _), entries in by_table.items())
        warnings.warn(
            f"{name}: {value!r} has no effect: only {which} {verb} it, and {chosen}; set {to}, or leave {name} unset.",
            stacklevel=2,  # GRPOConfig.validate: one place however often a config is validated, so it shows once
        )


def plural(kind: str) -> str:
    """'loss' -> 'losses', 'sampler' -> 'samplers'."""
    return kind + ("es" if kind.endswith("s") else "s")
