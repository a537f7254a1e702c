"""Component: `length_bucketing`, micro-batches of similar lengths that carry only their own padding.

TRL's `_prepare_inputs` pads the whole generation batch to its longest prompt and completion, shuffles the rows
and cuts them into `steps_per_generation` micro-batches, so every micro-batch is as wide as the widest row of the
whole batch. Right after TRL has built that buffer, this component re-cuts it:

1. TRL's random assignment of rows to optimizer steps is kept. The buffer is taken in blocks of
   g = gcd(steps_per_generation, gradient_accumulation_steps) consecutive micro-batches: micro-step k uses buffer
   entry k mod steps_per_generation in optimizer step ⌊k / gradient_accumulation_steps⌋, so with g dividing both,
   a block is always used inside one optimizer step, for every iteration (`num_iterations > 1` reuses the buffer).
   Inside a block the rows are sorted by length ℓ_i = Σ prompt_mask_i + Σ completion_mask_i and cut again into g
   micro-batches of the same size.
2. Each micro-batch then drops its prompt columns that are left padding in every row and its completion columns
   beyond its longest completion, in every per-token tensor (layouts from `trl_zoo.hooks.batch_layout`), respecting
   `pad_to_multiple_of`.

The buffer is replaced (the `new_buffer` hook point, before the old-log-prob component's), so the micro-batch
`_prepare_inputs` returns, the ones later micro-steps and
iterations read, and the one `components/resume.py` saves are the bucketed ones. `length_bucketing/padded_token_slots`
(rows × (prompt + completion width), summed over the micro-batches of all processes) is logged once per
generation batch next to `length_bucketing/padded_token_slots_unbucketed`, the same count for TRL's micro-batches.

Which steps it leaves unchanged: the step's loss Σ_j L(M_j) over its micro-batches M_j does not change when its rows
are regrouped iff L(M) = Σ_{i∈M} c_i, c_i a function of row i and constants only (trimming only removes padding).
That holds for sequence_mean, sequence_sum, token_mean_global and token_sum_over_max_length; token_mean_local
normalises by the micro-batch's own token count, which bucketing changes, and is refused, as is any aggregation not
listed (the derivation per aggregation: docs/formulas.md, "Length bucketing").

The same test refuses the other terms normalised per micro-batch: the entropy bonus (a local token mean of the
entropy), `top_entropy_quantile` < 1 (the quantile spans the micro-batch), the MoE router auxiliary loss, and the
critic of `advantage_estimator="gae"`, whose value loss and positive-example LM loss are local token means. A loss
whose per-row term depends on other rows or on the padded width (Clip-Cov, KL-Cov: covariance over the micro-batch)
is refused after a probe on synthetic batches (`row_grouping_probe`, config/probes.py). All of these but the
auxiliary loss (which needs the model) are checked when the `GRPOConfig` is built (`check_length_bucketing`,
config/compute.py). The KL term (per token, in the aggregated term), the off-policy sequence mask and vLLM's
importance-sampling ratio are per row.
`skip_zero_advantage` slices rows of a micro-batch after bucketing and keeps every normaliser, so the two compose.
With steps_per_generation = gradient_accumulation_steps = 1 the one micro-batch is the whole batch, padded by TRL to
its own longest rows: nothing changes.
"""

from __future__ import annotations

import math

import torch

from ..hooks.batch_layout import batch_layouts, trim_padding
from ..hooks.component import Component
from ..hooks.trl_access import log_metric, pad_token_id

SLOTS = "length_bucketing/padded_token_slots"
SLOTS_UNBUCKETED = "length_bucketing/padded_token_slots_unbucketed"


class LengthBucketing(Component):
    """`length_bucketing` (see the module docstring)."""

    name = "length_bucketing"

    def __init__(self, trainer):
        super().__init__(trainer)
        self.active = bool(trainer.args.length_bucketing)
        if self.active and trainer.aux_loss_enabled:
            # the one condition that needs the model (the others are checked in the config: `check_length_bucketing`)
            raise ValueError(
                "length_bucketing: the MoE router auxiliary loss (per micro-batch) would change when rows are "
                "re-grouped; set length_bucketing=False or router_aux_loss_coef=0."
            )

    def new_buffer(self, micro_batches: list[dict]) -> list[dict]:
        """The new buffer re-cut by length (`bucketed`), its token slots before and after logged."""
        trainer = self.trainer
        buffer = self.bucketed(micro_batches)
        counts = torch.tensor([token_slots(buffer), token_slots(micro_batches)], device=trainer.accelerator.device)
        bucketed_total, unbucketed_total = trainer.accelerator.reduce(counts, reduction="sum").tolist()
        log_metric(trainer, SLOTS, float(bucketed_total))
        log_metric(trainer, SLOTS_UNBUCKETED, float(unbucketed_total))
        return buffer

    def bucketed(self, micro_batches: list[dict]) -> list[dict]:
        """`micro_batches` re-cut by length (with `prompt_once` on, by prompt first) and trimmed (`recut_buffer`)."""
        prompt_once = self.trainer.pipeline.get("prompt_once")
        order = prompt_once.prompt_then_length if prompt_once is not None and prompt_once.active else row_lengths
        refusal = ("length_bucketing cannot re-cut", "set length_bucketing=False")
        return recut_buffer(self.trainer, micro_batches, order, refusal)


def recut_buffer(trainer, micro_batches: list[dict], order, refusal: tuple[str, str]) -> list[dict]:
    """A new buffer of `trainer`'s re-cut inside each optimizer step's block of micro-batches, rows sorted by
    `order(rows)`, and trimmed (`bucket_micro_batches`); `refusal` names the caller in a layout's one-line error."""
    pad_token = pad_token_id(trainer)
    # every entry but scalars (num_items_in_batch) and None moves with its rows; a list is refused by its layout
    keys = [
        key
        for key, value in micro_batches[0].items()
        if value is not None and not (isinstance(value, torch.Tensor) and value.dim() == 0)
    ]
    layouts = batch_layouts(
        micro_batches,
        keys,
        micro_batches[0]["completion_ids"].size(0),
        pad_token,
        trainer.vllm_importance_sampling_mode.startswith("token"),
        refusal,
    )
    block = math.gcd(trainer.args.steps_per_generation, trainer.args.gradient_accumulation_steps)
    return bucket_micro_batches(micro_batches, block, layouts, pad_token, trainer.pad_to_multiple_of, order)


def row_lengths(rows: dict) -> torch.Tensor:
    """ℓ_i = Σ prompt_mask_i + Σ completion_mask_i, the sort key of length bucketing."""
    return rows["prompt_mask"].sum(1) + rows["completion_mask"].sum(1)


def bucket_micro_batches(
    micro_batches: list[dict], block: int, layouts: dict, pad_token: int, multiple, order=row_lengths
) -> list[dict]:
    """The micro-batches re-cut inside each block of `block` consecutive ones, rows sorted by `order(rows)` (a sort
    key per row; by length unless told), then trimmed (module docstring, steps 1 and 2). Entries not in `layouts`
    (scalars such as num_items_in_batch, None) are kept as they are."""
    bucketed = []
    for start in range(0, len(micro_batches), block):
        group = micro_batches[start : start + block]
        rows = {key: torch.cat([batch[key] for batch in group]) for key in layouts}
        keys = order(rows)
        # one micro-batch per block: its rows stay in TRL's order (sorting them would change nothing but the order)
        order_of_rows = torch.sort(keys, stable=True).indices if block > 1 else torch.arange(keys.numel())
        size = group[0]["completion_ids"].size(0)
        for position, batch in enumerate(group):
            chosen = order_of_rows[position * size : (position + 1) * size]
            cut = {key: value for key, value in batch.items() if key not in layouts}
            cut.update({key: rows[key][chosen] for key in layouts})
            bucketed.append(trim_padding(cut, layouts, pad_token, multiple))
    return bucketed


def token_slots(micro_batches: list[dict]) -> int:
    """Σ over micro-batches of rows × (prompt width + completion width): the token positions the forward pays for."""
    return sum(
        batch["completion_ids"].size(0) * (batch["prompt_ids"].size(1) + batch["completion_ids"].size(1))
        for batch in micro_batches
    )


