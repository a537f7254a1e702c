"""What a plugin declares besides its function: typed, frozen, every field with a default.

A plain function registered by decorator or by entry point gets the defaults, so it is a complete plugin. A table
builds its spec from the declarations passed to `register` (`@LOSSES.register("name", aggregation=...)`); an
unknown declaration, or a declared value the spec's `check` refuses (an unknown aggregation or estimator input, a
malformed field), is an error at registration naming the entry.

Every spec of a loss, an estimator or a sampler carries

- `fields`: the plugin's own hyperparameters (`PluginField`), accepted by `GRPOConfig(...)` as keywords, by YAML
  configs and by `trl-zoo train` as flags, read by the plugin as `args.<name>`;
- `validate(args)`: the checks of the settings it reads, run when the `GRPOConfig` is built.

Tests: tests/test_validation.py (declarations at registration, malformed `PluginField`s), tests/test_table_fields.py,
tests/test_hyperparameter_ranges.py (inert clips warn), tests/test_plugin_package.py (`LossSpec` defaults).
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .numerics import MAX_LOG_RATIO

FIELD_TYPES = (bool, int, float, str)
# the AdvantageInputs fields an estimator may declare in `needs` (the rewards, G and the mask it always gets)
ADVANTAGE_NEEDS = ("score_sq_norms", "values", "token_penalty", "reference_rewards", "turns")


def no_checks(args) -> None:
    """The default `validate` of estimators and samplers: nothing to check."""


def check_finite(name: str, value, allowed: str = "") -> None:
    """A float setting is a finite number: NaN passes every range check (each comparison with it is False), and no
    setting of trl_zoo's takes ±inf. A one-line ValueError naming the setting (and its range, `allowed`) otherwise."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name}: must be a finite number{' ' + allowed if allowed else ''}, got {value}.")


def wrong_type(name: str, value, expected: type) -> str | None:
    """The one-line refusal of `value` for the setting `name` of type `expected` (bool, int, float or str), None
    when it has that type: an integer is a float, a bool is neither an int nor a float. A string that spells a value
    of the type is shown unquoted in the fix."""
    if _has_type(value, expected):
        return None
    spelled = _spelled(value, expected)
    fix = f"write it as {name}={spelled!r}" if spelled is not None else f"give {_a_value_of(expected)}"
    return f"{name}: expected {expected.__name__}, got {value!r} ({type(value).__name__}); {fix}."


def _has_type(value, expected: type) -> bool:
    if isinstance(value, bool) or expected is bool:
        return isinstance(value, bool) and expected is bool
    abstract = {int: numbers.Integral, float: numbers.Real}.get(expected, expected)  # numpy's numbers too
    return isinstance(value, abstract)


def _spelled(value, expected: type):
    """The value of type `expected` that `value` (a string, or a float for an int) spells, else None."""
    if isinstance(value, str) and expected is bool:
        return {"true": True, "false": False}.get(value.strip().lower())
    if expected not in (int, float) or isinstance(value, bool) or not isinstance(value, (str, float)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    if expected is int:
        return int(number) if number.is_integer() else None
    return number


def _a_value_of(expected: type) -> str:
    return {bool: "True or False", int: "an int", float: "a float", str: "a string"}.get(expected, expected.__name__)


@dataclass(frozen=True)
class PluginField:
    """One hyperparameter of a plugin: `--name V` on the command line, `name: V` in a YAML config, `name=V` in
    `GRPOConfig(...)`, read as `args.name` (stored in `GRPOConfig.plugin_args`). A value must have `type` (an int is
    accepted for a float; a float must be finite) and lie in `choices` or in the range from `low` to `high` (a bound
    None is absent; a bound is included unless `low_open` / `high_open`)."""

    name: str
    type: type = float
    default: Any = None
    help: str = ""
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    low_open: bool = False  # the range excludes `low`
    high_open: bool = False  # the range excludes `high`

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier() or self.name.startswith("_"):
            raise ValueError(f"field {self.name!r}: a field name must be a Python identifier not starting with '_'.")
        if self.type not in FIELD_TYPES:
            raise ValueError(f"field {self.name!r}: type {self.type!r}; use one of bool, int, float, str.")
        if self.default is not None:
            self.checked(self.default)

    def checked(self, value, check_range: bool = True):
        """`value` as this field's type; a one-line ValueError naming the field when it has the wrong type, is not
        finite, or is out of range (`check_range=False`: the type, finiteness and the choices only)."""
        if value is None:
            return None
        error = wrong_type(self.name, value, self.type)
        if error:
            raise ValueError(error)
        if self.type in (int, float):
            value = self.type(value)  # an int for a float, numpy's numbers
        check_finite(self.name, value, self.range)
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{self.name}: got {value!r}; use one of {', '.join(map(str, self.choices))}.")
        if not check_range:
            return value
        below = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        above = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if below or above:
            raise ValueError(f"{self.name}: must be {self.range}, got {value!r}.")
        return value

    @property
    def range(self) -> str:
        """The allowed range as words: 'in (0, 1]', '> 0', '≤ 5'; '' when there is none."""
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{self.low}, {self.high}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'>' if self.low_open else '≥'} {self.low}"
        if self.high is not None:
            return f"{'<' if self.high_open else '≤'} {self.high}"
        return ""

    @property
    def allowed(self) -> str:
        """The allowed values as words: 'one of tv, kl', or the range; '' when any value of the type is."""
        return f"one of {', '.join(map(str, self.choices))}" if self.choices is not None else self.range

    @property
    def description(self) -> str:
        """The help text with the range or the choices, as `trl-zoo train --help` shows it."""
        text = self.help.strip()
        text = text if not text or text.endswith(".") else text + "."
        if self.choices is not None:
            return f"{text} {self.allowed.capitalize()}.".strip()
        if not self.range:
            return text
        return f"{text} {'In ' + self.range[3:] if self.range.startswith('in ') else 'Must be ' + self.range}.".strip()


def _check_fields(fields) -> None:
    names = [field.name for field in fields]
    if not all(isinstance(field, PluginField) for field in fields):
        raise ValueError("fields: declare each as trl_zoo.PluginField(name, type, default, help, low, high).")
    if len(set(names)) != len(names):
        raise ValueError(f"fields: a name is declared twice in {names}.")


def validate_settings(spec, args, owner: str) -> None:
    """A chosen entry's settings, when the config is built: each declared field's type, choices and range (its
    `PluginField`; the message ends with the `owner`, "loss 'x'"), then the entry's own `validate` (checks between
    fields, or of the fields it shares)."""
    for plugin_field in spec.fields:
        try:
            plugin_field.checked(getattr(args, plugin_field.name))
        except ValueError as error:
            raise ValueError(f"{str(error).rstrip('.')} ({owner}).") from None
    spec.validate(args)


def warn_inert_clip(name: str, value: float, bound: float, what: str) -> None:
    """Warn that a clip bound at or beyond `bound`, where the importance ratio is capped (numerics.py), never acts."""
    if value >= bound:
        warnings.warn(
            f"{name}: {value:g} puts {what} at or beyond {bound:.3g}, where the importance ratio is capped "
            f"(log-ratio ±{MAX_LOG_RATIO:g}), so it never clips: the clip is off; set it below {bound:.3g} "
            "to keep one.",
            stacklevel=3,
        )


def check_clip_range(args) -> None:
    """The PPO clip range [1 − ε_low, 1 + ε_high], TRL's two-sided cap δ and the dual clip c, as every loss but
    CISPO reads them. A bound beyond the capped ratio is accepted with a warning: the clip is then off."""
    if getattr(args, "dual_clip", None) is not None and args.dual_clip <= 1:
        raise ValueError(f"dual_clip: must be > 1, got {args.dual_clip}.")
    if args.epsilon >= 1:
        raise ValueError(f"epsilon: {args.epsilon} makes the lower clip bound 1 − ε ≤ 0; use ε in [0, 1).")
    upper_clip = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    if args.delta is not None and args.delta < 1 + upper_clip:
        raise ValueError(
            f"delta: the two-sided cap δ={args.delta} is below the upper clip bound 1 + epsilon_high = "
            f"{1 + upper_clip}, which inverts the clip; use δ ≥ 1 + epsilon_high, or None."
        )
    largest_ratio = math.exp(MAX_LOG_RATIO)
    if args.epsilon_high is not None:
        warn_inert_clip("epsilon_high", args.epsilon_high, largest_ratio - 1, "the upper clip bound 1 + ε_high")
    for name, what in (("delta", "the two-sided cap δ"), ("dual_clip", "the dual clip's bound c·|Â|")):
        if getattr(args, name, None) is not None:
            warn_inert_clip(name, getattr(args, name), largest_ratio, what)


def check_clipped_objective(args) -> None:
    """`check_clip_range`, for the losses that clip r: a zero clip range wastes every off-policy step."""
    check_clip_range(args)
    num_iterations = getattr(args, "num_iterations", 1)
    steps, accumulation = getattr(args, "steps_per_generation", None), getattr(args, "gradient_accumulation_steps", 1)
    if num_iterations == 1 and (steps is None or steps <= accumulation):
        return  # on-policy: r = 1 exactly, where the clip changes nothing
    for name in ("epsilon", "epsilon_high"):
        if getattr(args, name) == 0:
            raise ValueError(
                f"{name}: 0 clips the ratio at 1, so a token gets no gradient once its ratio has moved, and the "
                f"off-policy steps (num_iterations={num_iterations}, steps_per_generation={steps}) update nothing; "
                f"use {name} > 0 (TRL: 0.2)."
            )


@dataclass(frozen=True)
class Spec:
    """No declarations (aggregations, KL estimators)."""

    def check(self, tables) -> None:
        """Raise a ValueError for declarations that cannot work. Called at registration with the plugin tables
        (`registry.TABLES`), which the registry hands in: a spec never imports the registry."""


@dataclass(frozen=True)
class LossSpec:
    """What the trainer needs to know about a loss `fn(batch: PolicyBatch, args) -> PolicyTerm`."""

    aggregation: str = "sequence_mean"  # the aggregation table's name, unless the config sets loss_aggregation
    sequence_level: bool = False  # one term per sequence: token-count aggregations would weight it by length
    zero_advantage_is_inert: bool | None = None  # rows with Â = 0 add nothing; None: probed for skip_zero_advantage
    requires_moe: bool = False  # needs router statistics (`batch.extras["router_logps"]`, a MoE model)
    applies_sampling_ratio: bool = False  # applies vLLM's importance-sampling ratio itself
    applies_kl: bool = False  # holds the KL regularisation itself (reads β and log π_ref): the trainer adds no β·KL
    # once after every optimizer step: (persistent state, args, the step's token-mean metrics) -> metrics to log
    on_optimizer_step: Callable[[dict, Any, dict[str, float]], dict[str, float] | None] | None = None
    validate: Callable[[Any], None] = check_clip_range  # raise ValueError for settings this loss cannot use
    fields: tuple[PluginField, ...] = ()  # its own hyperparameters

    def check(self, tables) -> None:
        aggregations = tables["aggregations"]
        if self.aggregation not in aggregations:
            raise ValueError("aggregation: " + aggregations.unknown_message(self.aggregation))
        _check_fields(self.fields)


@dataclass(frozen=True)
class AdvantageSpec:
    """What an advantage estimator `fn(inputs: AdvantageInputs, args) -> advantages` declares."""

    needs: tuple[str, ...] = ()  # AdvantageInputs fields beyond the rewards: ADVANTAGE_NEEDS
    token_level: bool = False  # returns (N, T) per-token advantages
    nonnegative_rewards: bool = False  # defined for rewards ≥ 0 only (a pass rate): no negative shaping or KL reward
    validate: Callable[[Any], None] = no_checks  # raise ValueError for settings this estimator cannot use
    fields: tuple[PluginField, ...] = ()  # its own hyperparameters

    def check(self, tables) -> None:
        unknown = [need for need in self.needs if need not in ADVANTAGE_NEEDS]
        if isinstance(self.needs, str) or unknown:
            raise ValueError(
                f"needs: unknown estimator input {unknown or self.needs!r}; known: {', '.join(ADVANTAGE_NEEDS)}."
            )
        _check_fields(self.fields)


@dataclass(frozen=True)
class SamplerSpec:
    """What a sampler `fn(session: SamplingSession, args) -> SampledBatch` declares."""

    validate: Callable[[Any], None] = no_checks  # raise ValueError for settings this sampler cannot use
    fields: tuple[PluginField, ...] = ()  # its own hyperparameters

    def check(self, tables) -> None:
        _check_fields(self.fields)
