"""Component: MoE router statistics for losses that declare ``requires_moe=True`` (RSPO).

Old side, once per generation batch (the pipeline's `on_generation_batch` hook point): when TRL keeps old log-probs
(``num_iterations > 1`` or generation not aligned with optimizer steps; otherwise every micro-batch is on-policy and
γ ≡ 1 needs nothing), the sampling policy's routers are recorded in one no-grad forward right after TRL's scoring,
before any update, and stored per completion token as (B, T, L, K) tensors: ``old_router_experts`` (each MoE layer's
top-K expert indices, int16) and ``old_router_logps`` (their router log-probs, float32). TRL shuffles and splits
them along dim 0 with the batch.

Loss side, per micro-batch: the loss step's single policy forward (the `policy_forward` hook point) runs with forward
hooks on the routers that score the same old experts under the current router, detached, and the result is handed
to the loss as ``router_logps`` in the batch extras (from the forward's result, `PolicyForward.router_logps`). No
second forward; the hooks are removed as soon as the forward returns, so gradient-checkpointing recomputation records
nothing.

The old side is its own forward rather than a capture of TRL's old-log-prob forward: that forward cannot be told
apart from the reference forward of a PEFT model (same module, adapter disabled) without relying on TRL's call order,
and inner hooks (dynamic sampling) may assemble the batch from several generation rounds.

Tests: tests/test_rspo.py (old top-K per generation batch, current routers in the loss forward),
tests/test_vllm_paths.py (the vLLM path).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..hooks.component import Component
from ..hooks.model_inputs import forward_inputs
from ..hooks.trl_access import per_token_logps
from .moe import RouterLogpsRecorder, find_routers


class Router(Component):
    """Records old and current router log-probs for MoE losses; off for every other loss."""

    name = "router"

    def __init__(self, trainer):
        super().__init__(trainer)
        entry = self.plan.loss_entry
        self.active = bool(entry.spec.requires_moe)
        self.routers = find_routers(trainer.model) if self.active else ()
        if self.active and not self.routers:
            raise ValueError(
                f"loss_type: {entry.name!r} needs a Mixture-of-Experts model with router modules (Qwen2-MoE, "
                f"Qwen3-MoE, Mixtral, ...) but {type(trainer.model).__name__} has none; use a dense loss such as "
                f"'gmpo'."
            )

    # ------------------------------------------------------------------ old routers, once per generation batch
    def on_generation_batch(self, batch: dict) -> None:
        if self.trainer.model.training and "old_per_token_logps" in batch:
            batch["old_router_experts"], batch["old_router_logps"] = self._record_old_routers(batch)

    def _record_old_routers(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        trainer = self.trainer
        input_ids, attention_mask, completion_length, multimodal = forward_inputs(batch)
        with (
            trainer.extra_pass("old_routers") as chunk,
            RouterLogpsRecorder(self.routers, input_ids.size(1), completion_length) as recorder,
        ):
            per_token_logps(
                trainer, trainer.model, input_ids, attention_mask, completion_length, batch_size=chunk, **multimodal
            )
        return recorder.top_k()

    # ------------------------------------------------------------------ current routers, inside the loss forward
    def policy_forward(self, inner, model, inputs, compute_entropy: bool = True):
        if "old_router_experts" not in inputs:
            return inner(model, inputs, compute_entropy)
        completion_length = inputs["completion_ids"].size(1)
        sequence_length = inputs["prompt_ids"].size(1) + completion_length
        experts = inputs["old_router_experts"]
        with RouterLogpsRecorder(self.routers, sequence_length, completion_length, experts) as recorder:
            forward = inner(model, inputs, compute_entropy)
        return replace(forward, router_logps=recorder.scored())
