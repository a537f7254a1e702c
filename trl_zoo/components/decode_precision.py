"""Decoding from a bf16 copy of the weights (`generation_bf16_copy`), made when TRL starts generating and freed when
it returns; the training weights are never written.

TRL loads the policy in float32 by default (`ModelConfig.dtype`) and generates outside the training step's autocast,
so with `bf16=True` every forward of the step runs in bf16 except the decoding, which reads fp32 weights and keeps an
fp32 KV cache. `generation_autocast` decodes under autocast instead, which casts every weight at every decoded token
(and, with a static cache, needs transformers >= 5.24). With this field the layer swaps, for the duration of TRL's
`_generate_single_turn`, the data of every floating-point parameter of the policy but a PEFT adapter's own for a bf16
copy:

    copy:      for each such parameter p (a tied weight once):  p.data ← bf16(p.data)
               an adapted layer with merge_adapter_for_generation: its base weight ← bf16(W + s·BA), the sum in the
               adapter's float32 and rounded once; the adapter switched off (each layer computes W x alone)
    generate   TRL's `_generate_single_turn`: weights, activations and the KV cache in bf16
    restore:   p.data ← the very float32 tensor it held (the same storage, so bit for bit); the copies are dropped

The adapter's own parameters (the trainable `lora_` tensors) stay in their dtype, as peft keeps them on a bf16 base;
floating-point buffers (the rotary frequencies) are left as they are, as when a model is loaded in bf16. With the
merge, the copy replaces `merge_residue`: the float32 weights are not written, so there is nothing to undo.

Memory: 2 bytes a copied parameter, held while TRL generates and freed at the restore, on the weights' device; the KV
cache, kept in the weights' dtype, shrinks by half. The sampler computes the same function as TRL generating from
the policy's weights cast to bf16 (the merged weights rounded once, as `model.merge_and_unload()` in float32 then
`.to(bfloat16)`), so the same tokens for the same seed where the computation is the same; the old log-probs and the
loss are computed after the restore, from the float32 weights under autocast. Why a copy rather than a cast in
place, and how it differs from a bf16 base: docs/architecture.md, "Decoding".

Refused (one line) where it cannot work: in the config, without bf16, with vLLM or TRL's continuous batching (their
own dtypes); in the trainer (`refusal`), a quantized base, DeepSpeed ZeRO-3 or FSDP (sharded weights).

Tests: tests/test_decode_precision.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager

import torch

from .weight_layout import is_quantized, policy_base, sharding

FIELD = "generation_bf16_copy"


def copied_parameters(model) -> list[tuple[str, torch.nn.Parameter]]:
    """The floating-point parameters the copy casts, each once (a tied weight under its first name): all but a PEFT
    adapter's own (the names holding its tuner's prefix, `lora_`); a full fine-tune's trainable weights too (the
    copy is made under no_grad and dropped before the optimizer step)."""
    prefix = getattr(getattr(model, "base_model", None), "prefix", None)
    found, seen = [], set()
    for name, parameter in model.named_parameters():
        if id(parameter) in seen or not parameter.is_floating_point():
            continue
        if prefix and prefix in name:
            continue
        seen.add(id(parameter))
        found.append((name, parameter))
    return found


def refusal(model, accelerator) -> str | None:
    """Why the copy cannot work for this trainer (a quantized base, sharded weights), or None."""
    if is_quantized(policy_base(model, accelerator)):
        return f"{FIELD}: the base model is quantized (its weights are not float32 to copy); set it False."
    sharded_by = sharding(accelerator)
    if sharded_by is not None:
        return f"{FIELD}: not with {sharded_by} (sharded weights); set it False."
    return None


@contextmanager
def decoding_copy(
    model,
    merged_layers: Iterable = (),
    delta: Callable[[object], torch.Tensor] | None = None,
    dtype: torch.dtype = torch.bfloat16,
) -> Iterator[int]:
    """Within the block, every parameter of `copied_parameters(model)` holds a `dtype` copy of its data; the base
    weight of each layer in `merged_layers` holds dtype(W + delta(layer)) and the adapter is switched off (peft's
    `disable_adapter`). Afterwards each parameter holds its original tensor again and the copies are dropped.
    Yields the copy's bytes."""
    merged_layers = list(merged_layers)
    deltas = {id(layer.get_base_layer().weight): layer for layer in merged_layers}
    swapped: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
    with ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        if merged_layers:
            stack.enter_context(model.disable_adapter())
        try:
            nbytes = 0
            for _, parameter in copied_parameters(model):
                if parameter.dtype == dtype and id(parameter) not in deltas:
                    continue
                original = parameter.data
                layer = deltas.get(id(parameter))
                copy = (original + delta(layer)).to(dtype) if layer is not None else original.to(dtype)
                swapped.append((parameter, original))
                parameter.data = copy
                nbytes += copy.numel() * copy.element_size()
                del copy
            yield nbytes
        finally:
            for parameter, original in swapped:
                parameter.data = original
            swapped.clear()
