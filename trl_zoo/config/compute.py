"""The compute switches `skip_zero_advantage`, `length_bucketing`, `prompt_once`, `fused_lora` and `compiled_layers`:
same loss and gradients, less compute. Their fields and the config-time checks of when that holds (what the
trainer's components do: `components/skip_zero_advantage.py`, `components/length_bucketing.py`,
`components/prompt_once.py`, `components/fused_lora.py`, `components/compiled_layers.py`, whose docstrings derive the
conditions).

Tests: tests/test_skip_zero_advantage.py, tests/test_length_bucketing.py, tests/test_prompt_once.py,
tests/test_fused_lora.py, tests/test_compiled_layers.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..registry import AGGREGATIONS
from .fields import help_field
from .probes import row_grouping_probe, zero_advantage_probe
from .run_plan import has_critic

# Aggregations whose optimizer-step loss does not depend on how its rows are grouped into micro-batches (derived in
# components/length_bucketing.py).
GROUPING_INVARIANT_AGGREGATIONS = ("sequence_mean", "sequence_sum", "token_mean_global", "token_sum_over_max_length")


@dataclass
class ComputeFields:
    """Leave out what cannot change the loss."""

    skip_zero_advantage: bool = help_field(
        "Leave sequences with exactly zero advantage out of the training forward/backward when they cannot "
        "contribute gradient (β = 0, no entropy bonus). Same result, less compute.",
        False,
    )
    length_bucketing: bool = help_field(
        "Re-cut each generation batch's micro-batches by length: inside every optimizer step, rows are sorted by "
        "prompt + completion length and each micro-batch keeps only its own padding. Same loss and gradients for "
        "grouping-invariant aggregations (sequence means, DAPO's global token mean, Dr. GRPO's constant); fewer "
        "padded token slots, logged as length_bucketing/padded_token_slots.",
        False,
    )
    prompt_once: bool = help_field(
        "Forward each distinct prompt of a log-prob pass once and its completions on its cached keys and values, "
        "instead of the prompt once per completion; inside every optimizer step rows are sorted by prompt where "
        "that keeps the loss. Same log-probs up to rounding; forwarded positions logged as "
        "prompt_once/token_slots. Needs gradient_checkpointing=False.",
        False,
    )
    fused_lora: bool | None = help_field(
        "Compute each plain LoRA layer (no DoRA, lora_bias or dropout) in two matrix products, the add and the "
        "scale in the second's epilogue, in the compute dtype: none of peft's elementwise passes and float32 copies "
        "of the activations (trl_zoo/components/fused_lora.py). Same loss and gradients up to rounding; needs a PEFT "
        "adapter; not with DeepSpeed ZeRO-3 or FSDP. None: off unless speed_recipe sets it; a value you give wins.",
        None,
    )
    compiled_layers: bool | None = help_field(
        "Run the policy's decoder layers under torch.compile in the training passes (one graph for every layer; "
        "the first steps compile), their elementwise operations fused; decoding with transformers runs them "
        "eagerly (trl_zoo/components/compiled_layers.py). Same loss and gradients up to rounding; not with a "
        "quantized base, DeepSpeed ZeRO-3 or FSDP. None: off unless speed_recipe sets it; a value you give wins.",
        None,
    )

    def _check_compute_combinations(self, entry) -> None:
        """Each switch only where it keeps the loss of the chosen loss `entry` and the gradient."""
        if self.skip_zero_advantage:
            if entry.spec.requires_moe:
                raise ValueError(
                    f"skip_zero_advantage: not supported with loss_type {entry.name!r}, whose router statistics are "
                    f"recorded for every sequence of the micro-batch; set skip_zero_advantage=False."
                )
            check_zero_advantage_skip(entry, self)
        if self.length_bucketing:
            check_length_bucketing(entry, self)
        if self.prompt_once:
            check_prompt_once(self)


def check_zero_advantage_skip(entry, args) -> None:
    """Raise a one-line ValueError when rows with Â = 0 would still contribute under this config with the loss
    `entry` (β, the entropy bonus or mask, a loss that declares or is probed to couple rows); config only."""
    reasons = []
    if args.beta != 0.0:
        reasons.append(f"beta={args.beta} (the KL term depends on every row)")
    if args.entropy_coef != 0.0 or args.use_adaptive_entropy:  # TRL's `_entropy_bonus_enabled`
        reasons.append("an entropy bonus (entropy_coef or an entropy target)")
    if args.top_entropy_quantile < 1.0:
        reasons.append(f"top_entropy_quantile={args.top_entropy_quantile} (the mask's quantile spans every row)")
    if reasons:
        raise ValueError(
            f"skip_zero_advantage: sequences with Â = 0 still contribute through {', '.join(reasons)}; "
            f"set skip_zero_advantage=False or remove them."
        )
    declared = entry.spec.zero_advantage_is_inert
    if declared is False:
        raise ValueError(
            f"skip_zero_advantage: the loss {entry.name!r} declares that sequences with Â = 0 still change the "
            f"loss; set skip_zero_advantage=False."
        )
    if declared is None:
        problem = zero_advantage_probe(entry.fn, args)
        if problem:
            raise ValueError(
                f"skip_zero_advantage: the loss {entry.name!r} is not inert for Â = 0 ({problem}); set "
                f"skip_zero_advantage=False, or declare zero_advantage_is_inert in the loss entry."
            )


def check_prompt_once(args) -> None:
    """Raise a one-line ValueError where the shared prompt's cache cannot be used (components/prompt_once.py)."""
    if args.gradient_checkpointing:
        raise ValueError(
            "prompt_once: transformers drops the prompt's cache in gradient-checkpointed layers; set "
            "gradient_checkpointing=False (TRL's default is True) or prompt_once=False."
        )
    if has_critic(args.advantage_estimator):
        raise ValueError(
            f"prompt_once: the critic (advantage_estimator={args.advantage_estimator!r}) reads the backbone's hidden "
            f"states of the whole sequence; set prompt_once=False."
        )


def check_length_bucketing(entry, args) -> None:
    """Raise a one-line ValueError when re-grouping rows into micro-batches would change the loss of the loss
    `entry` under this config (its aggregation, a per-micro-batch term, a loss that is not row-local); config only."""
    aggregation = AGGREGATIONS.get(args.loss_aggregation or entry.spec.aggregation).name
    if aggregation not in GROUPING_INVARIANT_AGGREGATIONS:
        why = (
            "normalises each micro-batch by its own token count"
            if aggregation == "token_mean_local"
            else "is not known to be invariant to how rows are grouped into micro-batches"
        )
        raise ValueError(
            f"length_bucketing: the aggregation {aggregation!r} (loss {entry.name!r}) {why}, so re-grouping rows "
            f"would change the loss and gradient; set length_bucketing=False or use one of "
            f"{', '.join(GROUPING_INVARIANT_AGGREGATIONS)}."
        )
    reasons = []
    if args.entropy_coef != 0.0 or args.use_adaptive_entropy:  # TRL's `_entropy_bonus_enabled`
        reasons.append("the entropy bonus (a token mean per micro-batch)")
    if args.top_entropy_quantile < 1.0:
        reasons.append(f"top_entropy_quantile={args.top_entropy_quantile} (a quantile per micro-batch)")
    if has_critic(args.advantage_estimator):
        reasons.append("the critic's value loss (advantage_estimator='gae': a token mean per micro-batch)")
    if reasons:
        raise ValueError(
            f"length_bucketing: {', '.join(reasons)} would change when rows are re-grouped; set "
            f"length_bucketing=False or remove them."
        )
    problem = row_grouping_probe(entry.fn, args)
    if problem:
        raise ValueError(
            f"length_bucketing: the loss {entry.name!r} is not row-local ({problem}), so re-grouping rows would "
            f"change it; set length_bucketing=False."
        )
