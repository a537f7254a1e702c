"""Component: the generation-speed component, three switches around TRL's decoding (`GenerationSpeed`), each off by
default and each independent of the others:

    merge_adapter_for_generation   the LoRA adapter merged into the base weights while TRL generates with
                                   `model.generate`, the base weights restored exactly afterwards
    generation_autocast            TRL's generation under the training forward's mixed precision
    compile_generation             TRL's `model.generate` decoding compiled with a static KV cache

TRL's one decoding of a batch of prompts, `_generate_single_turn` (its hook point `generate_single_turn`, no
log-probs), runs inside the merge (outermost) and autocast; compilation is switched on once, in the generation config
TRL built.

## merge_adapter_for_generation

An unmerged LoRA layer computes y = W x + s · B (A x) (s = lora_alpha / r): two extra small matmuls per targeted
projection per decoded token, each a kernel launch that dominates decoding of a small model. Merged, the layer
computes y = (W + s · B A) x, the same function up to float rounding, in one matmul.

    switch off: each LoRA layer computes W x alone     peft's `disable_adapter()`
    merge:      W ← fl(W + s · B A) in place            `merge_residue.merge`: and a residue of 2 bits an element
    generate    TRL's `_generate_single_turn` (the transformers paths: `generate`, `generate_batch`)
    restore:    W ← fl(W − s · B A) + residue = W₀      `merge_residue.restore`, bit for bit

Restoring W₀ exactly rather than trusting W + s·BA − s·BA keeps the base weights bit-identical from step to step (in
bfloat16 the round trip alone would move W by up to half an ulp of W at every generation batch). The residue
(`hooks/merge_residue.py`) is what the round trip loses, in units of W's last bit: 1/8 of the adapted weights' bytes
in bf16, 1/16 in fp32, held on their device during the decoding only and freed at the restore, when the training
forward's memory is needed; nothing crosses to the host. (An earlier version kept a full copy of W₀ in host
memory: two transfers of every adapted weight per generation batch, 28 GB each way for a 7 B model in fp32, which
made the merge slower than no merge at that size.) The old log-probs, the reference and the loss are computed after
the restore, by the unmerged model, as without the option.

Refused (one line, at construction) where it cannot work: no PEFT adapter; vLLM (TRL already syncs merged weights to
vLLM); a LoRA variant whose update is not W + s·BA (DoRA) or a LoRA bias; DeepSpeed ZeRO-3 or FSDP (sharded weights);
a quantized base (merging into 4/8-bit weights is lossy) — where `speed_recipe` set the field, a quantized base
(QLoRA) instead keeps the recipe's other fields and generates unmerged, saying so in one line
(`fields_a_quantized_base_drops`), and without compiled decoding where transformers does not compile the
quantization (bitsandbytes: its quantizer is not compileable, so transformers never calls the compiled-decoding hook
and the static cache only costs: the size ladder in docs/benchmarks.md).

## generation_autocast

TRL computes the old log-probs and the loss under accelerate's autocast (`_get_per_token_logps_and_entropies`), but
generates outside it: `Trainer.training_step` calls `_prepare_inputs` before its autocast context, and accelerate's
autocast wrapper sits on the wrapped model's `forward`, which `model.generate` does not call. With float32 weights
(TRL's default `ModelConfig.dtype`) every decoding matmul therefore runs in fp32, while every other forward of the
step runs in bf16 (or fp16). With the field on, the component runs TRL's `_generate_single_turn` inside
`accelerator.autocast()`:

    decoding:  fp32 weights, fp32 matmuls   →   fp32 weights, bf16 matmuls (the training forward's precision)

The weights are not touched (no copy, no cast in place); the sampler then computes at the precision of the old
log-probs and the loss. It is not the same computation (one token at a time with a KV cache against whole
sequences), so the sampled distribution still differs from the one the loss scores by rounding, as it does in fp32.
Compiled decoding (`compile_generation`) traces the decoding under the same autocast.

Measured (docs/benchmarks.md, the sixth time-to-target study and its decoding probe): compiled, the decoding is
faster in bf16 than in fp32; eager decoding is launch-bound and autocast's casts make it slower, so the field pays
only with `compile_generation`.

Refused when the config is built (`config/`): without bf16 or fp16 (no mixed precision to apply), with vLLM (its
own dtype), with TRL's continuous batching (TRL casts the model for it itself), and with a static KV cache
(`compile_generation`, `cache_implementation="static"`) under transformers < 5.24: under autocast the keys leave
the rotary embedding in fp32 (the fp32 residual stream's cos/sin) while the values stay bf16, and those versions'
`StaticLayer` allocates both in the keys' dtype, so the first cache update fails in `index_copy_` (transformers
5.17: docs/benchmarks.md, the sixth study's decoding probe); 5.24 allocates each in its own dtype.

The config refuses that pair under such a transformers (`static_cache_fails_on_mixed_dtypes`,
config/generation_speed.py).

## compile_generation

transformers compiles a model's decoding forward by itself when `generate` runs with a compileable (static) cache,
unless the generation config says `disable_compile` (`GenerationMixin._valid_auto_compile_criteria`); its
`CompileConfig` defaults to inductor with `mode="reduce-overhead"`, i.e. generated kernels and CUDA graphs, which
replace the kernel launches that dominate the decoding of a small model. TRL 1.16 builds its generation config with
`disable_compile=True` (`GRPOTrainer.__init__`), so the `model.generate` path never compiles, and passing
`generation_kwargs={"disable_compile": False}` is a duplicate keyword there. With the field on, the component sets, on
the generation config TRL built (`switch_on_compiled_decoding`, `hooks/trl_access.py`):

    disable_compile = False,  cache_implementation = "static" (when unset),  compile_config = CompileConfig()

`compile_generation_backend="cudagraphs"` sets `CompileConfig(backend="cudagraphs", mode=None)` instead: torch
traces the decoding and replays it as CUDA graphs without generating kernels. On a CPU that backend runs the traced
graph eagerly.

`compile_generation_backend="cuda_graph"` compiles nothing: transformers' compiled-decoding hook
(`get_compiled_call`) returns trl_zoo's `GraphedDecodeStep` (hooks/decode_graph.py), which records the decode
forward as a CUDA graph once per generation batch (one eager step and one recording, no tracing) and replays it for
every later token.

Measured (benchmarks/compiled_decoding.py; docs/benchmarks.md, the fifth time-to-target study): inductor decodes
faster than "cudagraphs" after a longer first call, less with the compile cache a previous process left: the graphs
remove the launches, inductor's fused kernels most of the rest.

The prefill stays eager; the decode forward is compiled once and again for a new shape (after that torch marks the
length dynamic), so the first generation batches pay the compile. On a CPU transformers compiles only with
the compile config's `_compile_all_devices`, which the component sets there too (tests run it; it is no speed lever
there).
The LoRA layers, merged or not (`merge_adapter_for_generation`), are compiled with the rest; the weights are read
at every call, so optimizer updates and the merge reach the compiled decoding.

Refused when the config is built (`config/`): with vLLM (it compiles its own decoding), with TRL's continuous
batching (its own `transformers_continuous_batching_config` has the compile options) and with a cache
implementation other than "static" (the others are not compileable).

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
from . import decode_graph, decode_precision, merge_residue
from .component import Component
from .trl_access import switch_on_compiled_decoding
from .weight_layout import is_quantized, policy_base, sharding

logger = logging.get_logger(__name__)


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


def adapted_layers(peft_model) -> list:
    """Every LoRA layer with an active adapter (the layers a merge writes into)."""
    from peft.tuners.lora import LoraLayer

    return [
        module for module in peft_model.modules()
        if isinstance(module, LoraLayer) and any(name in module.lora_A for name in module.active_adapters)
    ]


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
        dropped = fields_a_quantized_base_drops(trainer.model, args, trainer.accelerator)
        for field in dropped:
            setattr(args, field, False)
        if dropped:
            logger.warning(
                f"speed_recipe={args.speed_recipe!r}: the base model is quantized, so {' and '.join(dropped)} "
                "do not apply (a merge into quantized weights is lossy; transformers does not compile its decoding); "
                "the recipe's other fields do."
            )
        if getattr(args, "compile_generation", False):
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
        self.merge = bool(getattr(args, "merge_adapter_for_generation", False))
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
