"""Component: `skip_zero_advantage`, leave sequences whose advantages are all 0 out of the loss forward.

A sequence whose advantages are all exactly 0 adds nothing to the loss or its gradient when its term is 0 by
construction (every term proportional to Â), β = 0 and there is no entropy bonus, high-entropy mask or MoE
auxiliary loss. The policy forward then runs on the other rows only, and the skipped rows get log π_θ =
log π_old (detached; ratio 1, term 0), so every normaliser (sequence count, token count, num_items_in_batch) is
unchanged and the loss and gradient are the same. Their entropies are set to the mean entropy of the computed
rows, so the logged entropy is that of the trained sequences. At least one row always runs, so distributed
wrappers see a forward on every process. A loss entry may declare `zero_advantage_is_inert=True/False`; an
undeclared loss is probed when the `GRPOConfig` is built (`check_zero_advantage_skip` in config/compute.py, with
every other condition but the MoE auxiliary loss, which needs the model) with a synthetic off-policy batch (its
Â = 0 rows must have a zero term and gradient, and changing their log-probs or removing them must not change the
other rows' terms and gradients beyond float32 rounding).
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import torch

from ..hooks.component import Component
from ..hooks.model_inputs import is_multimodal

_FORWARD_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")  # what the text forward reads


class SkipZeroAdvantage(Component):
    """`skip_zero_advantage` (see the module docstring)."""

    name = "skip_zero_advantage"

    def __init__(self, trainer):
        super().__init__(trainer)
        self.active = bool(trainer.args.skip_zero_advantage)
        if self.active and trainer.aux_loss_enabled:
            # the one condition that needs the model (the config checks the others: `check_zero_advantage_skip`)
            raise ValueError(
                "skip_zero_advantage: sequences with Â = 0 still contribute through the MoE router auxiliary loss "
                "(router_aux_loss_coef); set skip_zero_advantage=False or router_aux_loss_coef=0."
            )

    def policy_forward(self, inner, model, inputs, compute_entropy: bool = True):
        if not self.trainer.model.training or "advantages" not in inputs:
            return inner(model, inputs, compute_entropy)
        if is_multimodal(inputs):
            warnings.warn("skip_zero_advantage: multimodal inputs are not sliced by row; running the full forward.")
            return inner(model, inputs, compute_entropy)
        advantages = inputs["advantages"]
        batch_size = advantages.size(0)
        rows = (advantages != 0).reshape(batch_size, -1).any(dim=1).nonzero().flatten()  # the one host sync
        if rows.numel() == batch_size:
            return inner(model, inputs, compute_entropy)
        if rows.numel() == 0:
            rows = rows.new_zeros(1)  # a forward on every process keeps DDP / ZeRO in step; the row adds 0 anyway
        active_inputs = {key: inputs[key][rows] for key in _FORWARD_KEYS}
        forward = inner(model, active_inputs, compute_entropy)
        logps, entropies = forward.logps, forward.entropies
        old = inputs.get("old_per_token_logps")
        # on-policy batches have no old log-probs: the trainer then uses sg(log π_θ), so any value gives ratio 1
        fill = old.detach() if old is not None else torch.zeros_like(logps[:1]).expand(batch_size, -1)
        full_logps = fill.to(logps.dtype).index_copy(0, rows, logps)
        full_entropies = None
        if compute_entropy:
            mask = active_inputs["completion_mask"].to(entropies.dtype)
            mean_entropy = ((entropies * mask).sum() / mask.sum().clamp(min=1.0)).detach()
            full_entropies = mean_entropy.expand(batch_size, entropies.size(1)).index_copy(0, rows, entropies)
        computed = rows if forward.computed_rows is None else rows[forward.computed_rows]
        return replace(forward, logps=full_logps, entropies=full_entropies, aux_loss=None, computed_rows=computed)


