"""The fields typed bool, int or float: a value of another type is refused in one line naming the field, before
TRL's `__post_init__` compares or divides by it (`GRPOConfig(epsilon="0.2")` would otherwise end in a bare
`TypeError` inside TRL or transformers), and again whenever the config is validated.

A field counts when its annotation is one of bool, int, float, or one of them or None (`float | None`); an int is a
float, a bool is neither an int nor a float (`specs.wrong_type`). Fields of several types (TRL's `str | bool`,
enums or strings, dicts or JSON strings) are left to TRL, and the built-in entries' fields (`TABLE_FIELDS`) to
their declarations, whose lines name the entry. `trl-zoo train` parses flags and YAML values into their types first.

Tests: tests/test_validation.py, tests/test_truncation_penalty.py.
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import fields

from ..specs import wrong_type
from .fields import TABLE_FIELDS


@functools.cache
def plain_field_types(config_class: type) -> dict[str, tuple[type, bool]]:
    """The fields of `config_class` annotated bool, int or float, or one of them or None: name -> (that type,
    whether None is allowed)."""
    hints = typing.get_type_hints(config_class)
    plain = {}
    for item in fields(config_class):
        annotation = hints[item.name]
        union = isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
        members = set(typing.get_args(annotation)) if union else {annotation}
        kinds = members - {type(None)}
        if len(kinds) == 1 and kinds <= {bool, int, float} and item.name not in TABLE_FIELDS:
            plain[item.name] = (kinds.pop(), type(None) in members)
    return plain


def check_field_types(config) -> None:
    """Raise a one-line ValueError naming the first typed field whose value has another type."""
    for name, (expected, optional) in plain_field_types(type(config)).items():
        value = getattr(config, name)
        error = None if value is None and optional else wrong_type(name, value, expected)
        if error:
            raise ValueError(error)
