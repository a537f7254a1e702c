"""Component: the generation-speed component (`GenerationSpeed`), three switches around TRL's one decoding of a batch
of prompts, `_generate_single_turn` (its hook point `generate_single_turn`, no log-probs), each off by default and
independent of the others: the merge outermost, then autocast; compilation is switched on once, in the generation
config TRL built. The old log-probs, the reference and the loss are computed as without them, by the unmerged model.
Why each is built as it is (what TRL and transformers do without it): docs/architecture.md, "Decoding".

merge_adapter_for_generation: the LoRA adapter merged into the base weights while TRL generates with `model.generate`,
restored exactly after. Unmerged, y = W x + s · B (A x) (s = lora_alpha / r); merged, y = (W + s · B A) x:

    switch off: each LoRA layer computes W x alone     peft's `disable_adapter()`
    merge:      W ← fl(W + s · B A) in place            `merge_residue.merge`: and a residue of 2 bits an element
    generate    TRL's `_generate_single_turn` (the transformers paths: `generate`, `generate_batch`)
    restore:    W ← fl(W − s · B A) + residue = W₀      `merge_residue.restore`, bit for bit

The residue (`components/merge_residue.py`) is 1/8 of the adapted weights' bytes in bf16, 1/16 in fp32, on their device
during the decoding only. Refused (one line, at construction): no PEFT adapter; vLLM (TRL already syncs merged
weights to vLLM); DoRA or a LoRA bias (the update is not W + s·BA); DeepSpeed ZeRO-3 or FSDP (sharded weights); a
quantized base (merging into 4/8-bit weights is lossy) — where `speed_recipe` set the field, a quantized base keeps
the recipe's other fields and generates unmerged, saying so in one line (`fields_a_quantized_base_drops`), without
compiled decoding where transformers does not compile the quantization (bitsandbytes).

generation_autocast, TRL's generation under the training forward's mixed precision: TRL's `_generate_single_turn` run
inside `accelerator.autocast()`, so fp32 weights decode with bf16 (or fp16) matmuls; the weights are not touched.
Refused when the config is built (config/generation_speed.py): without bf16 or fp16, with vLLM (its own dtype), with
TRL's continuous batching (TRL casts the model for it), with a static KV cache under transformers < 5.24.

compile_generation, TRL's `model.generate` decoding compiled with a static KV cache, sets on the generation config
TRL built (`switch_on_compiled_decoding`, `hooks/trl_access.py`):

    disable_compile = False,  cache_implementation = "static" (when unset),  compile_config = CompileConfig()

(inductor, `mode="reduce-overhead"`); `compile_generation_backend="cudagraphs"` sets `CompileConfig(backend=
"cudagraphs", mode=None)`; `"cuda_graph"` compiles nothing: transformers' compiled-decoding hook returns trl_zoo's
`GraphedDecodeStep` (components/decode_graph.py). The LoRA layers, merged or not, are compiled with the rest, and the
weights are read at every call, so optimizer updates and the merge reach the compiled decoding. Refused when the
config is built: with vLLM, with TRL's continuous batching, and with a cache implementation other than "static".

Tests: tests/test_merged_generation.py, tests/test_autocast_generation.py, tests/test_compiled_generation.py,
tests/test_speed_recipe.py, tests/test_decode_precision.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import torch
from transformers import CompileConfig
from transformers.utils import logging

from ..config.speed_recipe import refusal_words, set_by_recipe
from ..hooks.component import Component
from ..hooks.trl_access import switch_on_compiled_decoding
from . import decode_graph, decode_precision, merge_residue
from .weight_layout import adapted_layers, is_quantized, peft_policy, policy_base, sharding

logger = logging.get_logger(__name__)


def merge_refusal(model, args, accelerator) -> str | None:
    """Why `merge_adapter_for_generation` cannot work for this trainer, or None (naming `speed_recipe` when that
    set the field)."""
    field, fix = refusal_words(args, "merge_adapter_for_generation")
    if args.use_vllm:
        return f"{field}: not with use_vllm=True (TRL already syncs merged weights to vLLM); {fix}."
    unwrapped = peft_policy(model, accelerator)
    if unwrapped is None:
        return f"{field}: the policy has no PEFT adapter to merge; pass a peft_config or {fix}."
    base = unwrapped.get_base_model()
    if is_quantized(base):
        return f"{field}: the base model is quantized (merging into its weights is lossy); {fix}."
    if any(layer.lora_variant or any(layer.lora_bias.values()) for layer in adapted_layers(unwrapped)):
        return f"{field}: a LoRA variant (DoRA) or lora_bias adapter is not W + s·BA; {fix}."
    sharded_by = sharding(accelerator)
    if sharded_by is not None:
        return f"{field}: not with {sharded_by} (sharded weights); {fix}."
    return None


def quantized_base(model, accelerator):
    """The policy's base model (under a PEFT wrapper) when its weights are quantized, else None."""
    base = policy_base(model, accelerator)
    return base if is_quantized(base) else None


def uncompilable_quantization(base) -> bool:
    """Whether transformers will not compile this quantized model's decoding (its quantizer's `is_compileable`:
    False for bitsandbytes), so it never calls the compiled-decoding hook and a static cache only costs."""
    quantizer = getattr(base, "hf_quantizer", None)
    return quantizer is None or not getattr(quantizer, "is_compileable", False)


def fields_a_quantized_base_drops(model, args, accelerator) -> list[str]:
    """The fields of `args.speed_recipe` that cannot apply to a quantized base (QLoRA) and so do not: the merge
    (lossy into quantized weights) and compiled decoding where transformers does not compile the quantization."""
    base = quantized_base(model, accelerator)
    if base is None:
        return []
    merge = "merge_adapter_for_generation"
    dropped = [merge] if set_by_recipe(args, merge) and getattr(args, merge) else []
    if set_by_recipe(args, "compile_generation") and args.compile_generation and uncompilable_quantization(base):
        dropped.append("compile_generation")
    return dropped


def compile_refusal(model, args, accelerator) -> str | None:
    """Why `compile_generation`, set by the user, cannot work for this trainer, or None."""
    base = quantized_base(model, accelerator)
    if base is not None and uncompilable_quantization(base):
        return ("compile_generation: transformers does not compile the decoding of this quantized model (its "
                "quantizer is not compileable), so a static cache would only cost; set it False.")
    return None


def delta_weight(layer) -> torch.Tensor:
    """Δ = Σ over the layer's active adapters of s · B A (peft's `get_delta_weight`, in the adapter's dtype)."""
    deltas = [layer.get_delta_weight(name) for name in layer.active_adapters if name in layer.lora_A]
    return deltas[0] if len(deltas) == 1 else torch.stack(deltas).sum(dim=0)


@contextmanager
def merged_adapter(peft_model) -> Iterator[None]:
    """W ← W + s·BA for the duration of the block with the adapter switched off (so each layer computes W x alone),
    then W ← W₀ bit for bit from a 2-bit residue on the weights' device (`merge_residue`; module docstring)."""
    layers = adapted_layers(peft_model)
    residues = []
    with torch.no_grad(), peft_model.disable_adapter():
        try:
            for layer in layers:
                residues.append(merge_residue.merge(layer.get_base_layer().weight, delta_weight(layer)))
            yield
        finally:
            for layer, residue in zip(layers, residues):
                merge_residue.restore(layer.get_base_layer().weight, delta_weight(layer), residue)


class GenerationSpeed(Component):
    """The generation-speed switches (module docstring): `merge_adapter_for_generation` and `generation_autocast`
    around TRL's `_generate_single_turn`, `compile_generation` in the generation config TRL built."""

    name = "generation_speed"

    def __init__(self, trainer):
        super().__init__(trainer)
        args = trainer.args
        self.graphed_decoding = None
        dropped = fields_a_quantized_base_drops(trainer.model, args, trainer.accelerator)  # the config stays as set
        if dropped:
            logger.warning(
                f"speed_recipe={args.speed_recipe!r}: the base model is quantized, so {' and '.join(dropped)} "
                "do not apply (a merge into quantized weights is lossy; transformers does not compile its decoding); "
                "the recipe's other fields do."
            )
        if getattr(args, "compile_generation", False) and "compile_generation" not in dropped:
            refusal = compile_refusal(trainer.model, args, trainer.accelerator)
            if refusal:
                raise ValueError(refusal)
            backend = getattr(args, "compile_generation_backend", "inductor")
            graphed = backend == "cuda_graph"
            default_config = backend == "inductor" or graphed  # cuda_graph: transformers only needs a config
            switch_on_compiled_decoding(
                trainer, CompileConfig() if default_config else CompileConfig(backend=backend, mode=None)
            )
            if graphed:
                self.graphed_decoding = decode_graph.install(trainer.accelerator.unwrap_model(trainer.model))
        self.merge = bool(getattr(args, "merge_adapter_for_generation", False)) and (
            "merge_adapter_for_generation" not in dropped
        )
        if self.merge:
            refusal = merge_refusal(trainer.model, args, trainer.accelerator)
            if refusal:
                raise ValueError(refusal)
        self.bf16_copy = bool(getattr(args, decode_precision.FIELD, False))
        copy_refusal = self.bf16_copy and decode_precision.refusal(trainer.model, trainer.accelerator)
        if copy_refusal:
            raise ValueError(copy_refusal)
        self.autocast = bool(getattr(args, "generation_autocast", False))
        self.active = self.merge or self.autocast or self.bf16_copy

    def generate_single_turn(self, inner, *args, **kwargs):
        trainer = self.trainer
        with ExitStack() as stack:
            unwrapped = trainer.accelerator.unwrap_model(trainer.model)
            if self.bf16_copy:  # a bf16 copy (the adapter merged into it)
                merged = adapted_layers(unwrapped) if self.merge else ()
                stack.enter_context(decode_precision.decoding_copy(unwrapped, merged, delta_weight))
            elif self.merge:
                stack.enter_context(merged_adapter(unwrapped))
            if self.autocast:
                stack.enter_context(trainer.accelerator.autocast())
            return inner(*args, **kwargs)
