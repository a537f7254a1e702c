"""Component: compiled decoder layers (`CompiledLayers`), the policy's decoder layers under `torch.compile` in the
training passes (regional compilation).

Every decoder layer of a transformers model is the same module class, so one compiled graph serves them all
(`nn.Module.compile` of each layer; torch treats a layer's parameters as the graph's inputs): the first optimizer step
pays one compile per mode it meets (with and without gradients, a second when the lengths change, after which the
lengths are symbolic), and every step after runs the layers' normalisations, activations, residual adds and LoRA
branches as fused kernels instead of one kernel per elementwise operation. Under gradient checkpointing the compiled
layer is what is recomputed. The loss and gradients are the eager layers' up to rounding (the fused kernels keep
float32 where the eager ones do).

Decoding with transformers runs the layers eagerly: its shapes change every token (and `compile_generation`'s own
graph or CUDA graph wraps the whole model), so the policy's `generate` (and `generate_batch`, TRL's continuous
batching) set the compiled graphs aside and put them back after, whoever calls it: TRL's generation, the held-out
evaluation, a user's callback. vLLM's generation runs vLLM's own model and is not touched.

The decoder layers are the model's largest `nn.ModuleList` whose modules are all of one class (`model.layers` of
Llama, Qwen, Gemma, Mistral; `transformer.h` of GPT-2). Set by the user, `compiled_layers` refuses in one line a
model with no such list, a quantized base (bitsandbytes' layers break torch's graphs) and sharded weights (DeepSpeed
ZeRO-3, FSDP: their hooks gather parameters inside the layer); set by `speed_recipe`, it compiles nothing there.

Tests: tests/test_compiled_layers.py.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager

import torch

from ..config.speed_recipe import refusal_words, set_by_recipe
from ..hooks.component import Component
from .weight_layout import is_quantized, policy_base, sharding


def decoder_layers(model) -> torch.nn.ModuleList | None:
    """The largest `nn.ModuleList` of `model` whose modules share one class (module docstring), or None."""
    lists = [
        module for module in model.modules()
        if isinstance(module, torch.nn.ModuleList) and len(module) > 0 and len({type(m) for m in module}) == 1
    ]
    return max(lists, key=len, default=None)


@contextmanager
def eager_layers(layers):
    """The layers' compiled calls set aside (`nn.Module.compile` keeps it in `_compiled_call_impl`), then back."""
    kept = [layer._compiled_call_impl for layer in layers]
    for layer in layers:
        layer._compiled_call_impl = None
    try:
        yield
    finally:
        for layer, compiled in zip(layers, kept):
            layer._compiled_call_impl = compiled


class CompiledLayers(Component):
    """The policy's decoder layers compiled for the training passes (module docstring); `compiled` counts them."""

    name = "compiled_layers"

    def __init__(self, trainer):
        super().__init__(trainer)
        args = trainer.args
        self.active = False
        self.layers = ()
        if not getattr(args, "compiled_layers", False):
            return
        field, fix = refusal_words(args, "compiled_layers")
        by_recipe = set_by_recipe(args, "compiled_layers")
        base = policy_base(trainer.model, trainer.accelerator)
        layers = decoder_layers(base)
        sharded_by = sharding(trainer.accelerator)
        why = ("the model has no list of decoder layers of one class" if layers is None
               else "the base model is quantized (its layers break torch's graphs)" if is_quantized(base)
               else f"not with {sharded_by} (sharded weights)" if sharded_by is not None else None)
        if why is not None:
            if by_recipe:
                return
            raise ValueError(f"{field}: {why}; {fix}.")
        for layer in layers:
            layer.compile()
        self.layers = tuple(layers)
        policy = trainer.accelerator.unwrap_model(trainer.model)
        for name in ("generate", "generate_batch"):
            if callable(getattr(policy, name, None)):
                setattr(policy, name, self._eager(getattr(policy, name)))

    @property
    def compiled(self) -> int:
        return len(self.layers)

    def _eager(self, decode):
        @functools.wraps(decode)
        def eagerly(*args, **kwargs):
            with eager_layers(self.layers):
                return decode(*args, **kwargs)

        return eagerly
