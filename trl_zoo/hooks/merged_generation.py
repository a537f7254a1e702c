"""Trainer hook: the LoRA adapter merged into the base weights while TRL generates with `model.generate`, and the
base weights restored exactly afterwards (`merge_adapter_for_generation`).

An unmerged LoRA layer computes y = W x + s · B (A x) (s = lora_alpha / r): two extra small matmuls per targeted
projection per decoded token, each a kernel launch that dominates decoding of a small model. Merged, the layer
computes y = (W + s · B A) x, the same function up to float rounding, in one matmul.

    merge:    W ← W + s · B A              peft's `merge_adapter()` (every LoRA layer, `merged` = True)
    generate  TRL's `_generate_single_turn` (the transformers paths: `generate`, `generate_batch`)
    restore:  W ← W₀ (the saved copy)      peft's `unmerge_adapter()` then W₀ copied back

Restoring the saved W₀ rather than trusting W + s·BA − s·BA keeps the base weights bit-identical from step to step
(in bfloat16 the round trip alone would move W by up to half an ulp of W at every generation batch). The copy costs
the targeted base weights' memory for the duration of generation; when the device has no room for it, one line
says so with its size (`saved_copies`), before anything is merged. The old log-probs, the reference and the loss are
computed after the restore, by the unmerged model, as without the option.

Refused (one line, at construction) where it cannot work: no PEFT adapter; vLLM (TRL already syncs merged weights to
vLLM); a quantized base (merging into 4/8-bit weights is lossy); DeepSpeed ZeRO-3 or FSDP (sharded weights).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from ..config.speed_recipe import refusal_words


def merge_refusal(model, args, accelerator) -> str | None:
    """Why `merge_adapter_for_generation` cannot work for this trainer, or None (naming `speed_recipe` when that
    set the field)."""
    field, fix = refusal_words(args, "merge_adapter_for_generation")
    if args.use_vllm:
        return f"{field}: not with use_vllm=True (TRL already syncs merged weights to vLLM); {fix}."
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency of the LoRA path
        PeftModel = None
    unwrapped = accelerator.unwrap_model(model) if accelerator is not None else model
    if PeftModel is None or not isinstance(unwrapped, PeftModel):
        return f"{field}: the policy has no PEFT adapter to merge; pass a peft_config or {fix}."
    base = unwrapped.get_base_model()
    if getattr(base, "is_loaded_in_4bit", False) or getattr(base, "is_loaded_in_8bit", False) or getattr(
        base, "quantization_method", None
    ) or getattr(getattr(base, "config", None), "quantization_config", None):
        return f"{field}: the base model is quantized (merging into its weights is lossy); {fix}."
    state = getattr(accelerator, "state", None)
    deepspeed = getattr(state, "deepspeed_plugin", None)
    if deepspeed is not None and getattr(deepspeed, "zero_stage", 0) == 3:
        return f"{field}: not with DeepSpeed ZeRO-3 (sharded weights); {fix}."
    if getattr(accelerator, "is_fsdp2", False) or getattr(state, "fsdp_plugin", None) is not None:
        return f"{field}: not with FSDP (sharded weights); {fix}."
    return None


def lora_base_weights(peft_model) -> list[torch.Tensor]:
    """The base weight W of every LoRA-wrapped layer (the tensors a merge writes into)."""
    from peft.tuners.lora import LoraLayer

    return [module.get_base_layer().weight for module in peft_model.modules() if isinstance(module, LoraLayer)]


def saved_copies(weights: list[torch.Tensor]) -> list[torch.Tensor]:
    """W₀ of every weight, on its device; out of memory there is one line naming the option and its size."""
    try:
        return [weight.detach().clone() for weight in weights]
    except torch.OutOfMemoryError:
        size = sum(weight.numel() * weight.element_size() for weight in weights) / 2**30
        raise RuntimeError(
            f"merge_adapter_for_generation: the copy of the adapted base weights that restores them after generation "
            f"({size:.2f} GiB) does not fit in the device's free memory; set merge_adapter_for_generation=False."
        ) from None


@contextmanager
def merged_adapter(peft_model) -> Iterator[None]:
    """W ← W + s·BA for the duration of the block, then W ← W₀ exactly (see the module docstring)."""
    weights = lora_base_weights(peft_model)
    saved = saved_copies(weights)
    with torch.no_grad():
        peft_model.merge_adapter()
    try:
        yield
    finally:
        with torch.no_grad():
            peft_model.unmerge_adapter()
            for weight, original in zip(weights, saved):
                weight.copy_(original)


class MergedGenerationMixin:
    """Wraps TRL's `_generate_single_turn` (only generation, no log-probs) in `merged_adapter` when
    `merge_adapter_for_generation` is on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if getattr(self.args, "merge_adapter_for_generation", False):
            refusal = merge_refusal(self.model, self.args, self.accelerator)
            if refusal:
                raise ValueError(refusal)

    def _generate_single_turn(self, *args, **kwargs):
        if not getattr(self.args, "merge_adapter_for_generation", False):
            return super()._generate_single_turn(*args, **kwargs)
        with merged_adapter(self.accelerator.unwrap_model(self.model)):
            return super()._generate_single_turn(*args, **kwargs)
