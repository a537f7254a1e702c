"""Aggregations: how per-token terms ℓ_{i,t} become one scalar loss, including gradient-accumulation scaling.

Each aggregation returns ``(loss_to_backprop, policy_loss_for_logging)``. They reproduce TRL 1.16's normalisers
exactly, so that a micro-batch's gradient is the same whether it comes from TRL's trainer or from trl_zoo's.

==========================  ====================================================  =====================
name                        formula (one micro-batch, before accumulation scaling)  used by
==========================  ====================================================  =====================
sequence_mean               (1/B) Σ_i (1/T_i) Σ_t m ℓ                             GRPO, SAPO, GSPO, GMPO
token_mean_local            Σ m ℓ / Σ m  (this micro-batch)                       BNPO
token_mean_global           Σ m ℓ / Σ m  (whole generation batch, all processes)  DAPO, CISPO, VESPO
token_sum_over_max_length   Σ m ℓ / (B · T_max),  T_max = max_completion_length   Dr. GRPO
sequence_sum                (1/B) Σ_i Σ_t m ℓ                                     LUSPO, sequence-sum
==========================  ====================================================  =====================

`token_sum_over_max_length` was named `constant` (its normaliser is); that name is still accepted.

Groups of unequal size (`dynamic_sampling="adaptive_budget"`, `AdvantageInputs.group_sizes`). Every normaliser is a
sum over rows with a weight per row or token; none sees groups. With groups of n_1, …, n_P completions (B = Σ n_p
rows) the weight of group p — the value of the aggregation when ℓ = 1 on p's tokens and 0 elsewhere — is

==========================  ================================  ===========================================
name                        weight of group p                 reading
==========================  ================================  ===========================================
sequence_mean               n_p / B                           each completion 1/B: a group by its size
token_mean_local / global   Σ_{i∈p} T_i / Σ_j T_j             each token alike: a group by its tokens
token_sum_over_max_length   Σ_{i∈p} T_i / (B · T_max)         each token 1/(B · T_max)
sequence_sum                Σ_{i∈p} T_i / B                   each completion's token sum, 1/B
==========================  ================================  ===========================================

With equal groups (n_p = G) sequence_mean is GRPO's (1/P) Σ_p (1/G) Σ_{i∈p}; with unequal groups no normaliser here
weighs prompts equally (1/(P · n_p) per completion): the group sizes are the sampler's budget (how hard each group
then pushes: docs/formulas.md, "Aggregation with groups of unequal size").

Tests: tests/test_parity.py (TRL's normalisers, with gradient accumulation), tests/test_losses_math.py,
tests/test_numerics.py and tests/test_losses_extreme.py (every loss under every aggregation),
tests/test_length_bucketing.py (grouping invariance), tests/test_aggregation_unequal.py (groups of 2, 4 and 8 in one
batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .registry import AGGREGATIONS

Tensor = torch.Tensor


@dataclass
class AggregationContext:
    """What a normaliser may need besides the terms and the mask."""

    accumulation_steps: float = 1.0  # micro-batches per optimizer step (1 in eval)
    steps_per_generation: int = 1
    num_processes: int = 1
    num_items_in_batch: Tensor | None = None  # tokens in the whole generation batch, all processes
    max_completion_length: int = 1
    training: bool = True


def _scaled(loss: Tensor, ctx: AggregationContext) -> tuple[Tensor, Tensor]:
    return loss / ctx.accumulation_steps, loss.detach()


@AGGREGATIONS.register("sequence_mean", description="mean over sequences of the per-sequence token mean (GRPO)")
def sequence_mean(terms: Tensor, mask: Tensor, ctx: AggregationContext):
    return _scaled(((terms * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean(), ctx)


@AGGREGATIONS.register("token_mean_local", description="token mean over the local micro-batch (BNPO)")
def token_mean_local(terms: Tensor, mask: Tensor, ctx: AggregationContext):
    return _scaled((terms * mask).sum() / mask.sum().clamp(min=1.0), ctx)


@AGGREGATIONS.register(
    "token_mean_global", description="token mean over the whole generation batch and all processes (DAPO)"
)
def token_mean_global(terms: Tensor, mask: Tensor, ctx: AggregationContext):
    if ctx.num_items_in_batch is None:
        normalizer = mask.sum().clamp(min=1.0)
    else:
        # num_items_in_batch spans the generation batch on every process; rescale it to one accumulation window
        normalizer = torch.as_tensor(ctx.num_items_in_batch).clamp(min=1.0) / ctx.num_processes
        if ctx.training:
            normalizer = normalizer * ctx.accumulation_steps / ctx.steps_per_generation
    loss = (terms * mask).sum() / normalizer
    return loss, loss.detach()


@AGGREGATIONS.register(
    "token_sum_over_max_length", description="sum over tokens / (B · max_completion_length) (Dr. GRPO)"
)
def token_sum_over_max_length(terms: Tensor, mask: Tensor, ctx: AggregationContext):
    return _scaled((terms * mask).sum() / (terms.size(0) * ctx.max_completion_length), ctx)


@AGGREGATIONS.register("sequence_sum", description="mean over sequences of the per-sequence token sum (LUSPO)")
def sequence_sum(terms: Tensor, mask: Tensor, ctx: AggregationContext):
    return _scaled((terms * mask).sum(-1).mean(), ctx)


AGGREGATIONS.add_alias("constant", "token_sum_over_max_length")  # its earlier name, in existing configs
