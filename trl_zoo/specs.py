"""What a plugin declares besides its function: typed, frozen, every field with a default.

A plain function registered by decorator or by entry point gets the defaults, so it is a complete plugin. A table
builds its spec from the declarations passed to `register` (`@LOSSES.register("name", aggregation=...)`); an
unknown declaration is an error at registration.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .numerics import MAX_LOG_RATIO


def warn_inert_clip(name: str, value: float, bound: float, what: str) -> None:
    """Warn that a clip bound at or beyond `bound`, where the importance ratio is capped (numerics.py), never acts."""
    if value >= bound:
        warnings.warn(
            f"{name}: {value:g} puts {what} at or beyond {bound:.3g}, where the importance ratio is capped "
            f"(log-ratio ±{MAX_LOG_RATIO:g}), so it never clips: the clip is off; set it below {bound:.3g} to keep one.",
            stacklevel=3,
        )


def check_clip_range(args) -> None:
    """The PPO clip range [1 − ε_low, 1 + ε_high] and TRL's two-sided cap δ, as every loss but CISPO reads them.
    A bound beyond the capped ratio is accepted with a warning: the clip is then off."""
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
    """No declarations (aggregations, KL estimators, samplers)."""


@dataclass(frozen=True)
class LossSpec:
    """What the trainer needs to know about a loss `fn(batch: PolicyBatch, args) -> PolicyTerm`."""

    aggregation: str = "sequence_mean"  # the aggregation table's name, unless the config sets loss_aggregation
    sequence_level: bool = False  # one term per sequence: token-count aggregations would weight it by length
    zero_advantage_is_inert: bool | None = None  # rows with Â = 0 add nothing; None: probed for skip_zero_advantage
    requires_moe: bool = False  # needs router statistics (`batch.extras["router_logps"]`, a MoE model)
    applies_sampling_ratio: bool = False  # applies vLLM's importance-sampling ratio itself
    # once after every optimizer step: (persistent state, args, the step's token-mean metrics) -> metrics to log
    on_optimizer_step: Callable[[dict, Any, dict[str, float]], dict[str, float] | None] | None = None
    validate: Callable[[Any], None] = check_clip_range  # raise ValueError for settings this loss cannot use


@dataclass(frozen=True)
class AdvantageSpec:
    """What an advantage estimator `fn(inputs: AdvantageInputs, args) -> advantages` declares."""

    needs: tuple[str, ...] = ()  # AdvantageInputs fields beyond the rewards: "score_sq_norms", "values"
    token_level: bool = False  # returns (N, T) per-token advantages
