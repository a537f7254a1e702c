"""Component: fused LoRA layers (`FusedLora`), the policy's LoRA layers computed in two matrix products with no
elementwise pass over the activations.

A LoRA layer is y = W x + b + s · B (A x), s = lora_alpha / r. peft computes it as five kernels over the activations
and, with its float32 adapter weights (peft keeps them so when the base is bf16), two more:

    peft:   x → float32 copy → (autocast: bf16 copy) → A x → B (A x) → · s → base + · → cast back
    fused:  base = W x + b;   xa = A x;   y = addmm(base, xa, Bᵀ, α = s)          (the add and · s in the epilogue)

and its backward, with dy the gradient of y and g = s · (dy B) (rows × r, small):

    ∂L/∂base = dy          ∂L/∂x (LoRA branch) = g A          ∂L/∂A = gᵀ x          ∂L/∂B = s · dyᵀ xa

one product each, the branch's ∂L/∂x added to the base layer's by autograd. Everything runs in the compute dtype
(autocast's when autocast is on, else x's), as autocast runs peft's products; the adapter's gradients are cast to
its weights' dtype. Saved for the backward: x itself and xa (rows × r), not peft's copies of x.

A layer is fused when it is peft's LoRA `Linear` over a `torch.nn.Linear` (not a quantized base: QLoRA keeps peft's
forward) and its active adapter is plain LoRA: no DoRA or other variant, no `lora_bias`, no dropout (p = 0, peft's
default) and one active adapter. While the adapter is disabled (TRL's reference pass), merged
(`merge_adapter_for_generation`) or called with `adapter_names`, the layer runs peft's own forward. Set by the user,
`fused_lora` refuses in one line a policy without a PEFT adapter, sharded weights (DeepSpeed ZeRO-3, FSDP) and any
LoRA layer that cannot be fused (naming why); set by `speed_recipe`, it fuses the layers that can be, leaves the
others to peft and does nothing where no layer can be (no adapter, sharded weights).

Tests: tests/test_fused_lora.py.
"""

from __future__ import annotations

import types

import torch

from ..config.speed_recipe import refusal_words, set_by_recipe
from ..hooks.component import Component
from .weight_layout import adapted_layers, peft_policy, sharding


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype autocast would run a matrix product of `x` in, or x's own where autocast is off."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


class LoraAdd(torch.autograd.Function):
    """y = base + s · (x Aᵀ) Bᵀ in two products (module docstring); x of any leading shape, base of x's."""

    @staticmethod
    def forward(ctx, base, x, lora_a, lora_b, scaling):
        dtype = compute_dtype(x)
        shape = base.shape
        with torch.autocast(x.device.type, enabled=False):
            x2 = x.reshape(-1, x.shape[-1]).to(dtype)
            a, b = lora_a.to(dtype), lora_b.to(dtype)
            xa = x2 @ a.t()
            y = torch.addmm(base.reshape(-1, shape[-1]).to(dtype), xa, b.t(), alpha=scaling)
        ctx.save_for_backward(x2, xa, a, b)
        ctx.scaling, ctx.x_shape, ctx.x_dtype = scaling, x.shape, x.dtype
        ctx.weight_dtypes, ctx.base_dtype = (lora_a.dtype, lora_b.dtype), base.dtype
        return y.view(shape)

    @staticmethod
    def backward(ctx, dy):
        x2, xa, a, b = ctx.saved_tensors
        need_base, need_x, need_a, need_b, _ = ctx.needs_input_grad
        dy2 = dy.reshape(-1, dy.shape[-1]).to(x2.dtype)
        g = (dy2 @ b).mul_(ctx.scaling)  # rows × r
        d_base = dy.to(ctx.base_dtype) if need_base else None
        d_x = (g @ a).view(ctx.x_shape).to(ctx.x_dtype) if need_x else None
        d_a = (g.t() @ x2).to(ctx.weight_dtypes[0]) if need_a else None
        d_b = (dy2.t() @ xa).mul_(ctx.scaling).to(ctx.weight_dtypes[1]) if need_b else None
        return d_base, d_x, d_a, d_b, None


def fused_forward(layer, x, *args, **kwargs):
    """The forward a fused layer gets: peft's own while its adapter is off, merged or mixed, else `LoraAdd`."""
    adapters = layer.active_adapters
    plain = not (layer.disable_adapters or layer.merged or args or kwargs)
    if not plain or len(adapters) != 1 or adapters[0] not in layer.lora_A:
        return type(layer).forward(layer, x, *args, **kwargs)
    name = adapters[0]
    return LoraAdd.apply(layer.base_layer(x), x, layer.lora_A[name].weight, layer.lora_B[name].weight,
                         layer.scaling[name])


def unfusable(layer) -> str | None:
    """Why this LoRA layer cannot be fused, or None."""
    from peft.tuners.lora.layer import Linear

    if type(layer) is not Linear or not isinstance(layer.base_layer, torch.nn.Linear):
        return f"a {type(layer.base_layer).__name__} base (only torch.nn.Linear layers are fused)"
    adapters = list(layer.active_adapters)
    if len(adapters) != 1:
        return f"{len(adapters)} active adapters"
    name = adapters[0]
    if name in layer.lora_variant:
        return "a LoRA variant (DoRA)"
    if layer.lora_bias.get(name, False):
        return "lora_bias"
    dropout = layer.lora_dropout[name]
    if getattr(dropout, "p", 0.0) > 0:
        return f"lora_dropout={dropout.p} (set lora_dropout=0 in the LoraConfig)"
    return None


def fuse(peft_model, refuse=None) -> int:
    """Give every LoRA layer of `peft_model` that can be fused `fused_forward`; how many got it. With `refuse` (a
    function of the reason), a layer that cannot be fused calls it first, before any layer is changed."""
    layers = [(layer, unfusable(layer)) for layer in adapted_layers(peft_model)]
    for layer, why in layers:
        if why is not None and refuse is not None:
            refuse(f"a LoRA layer has {why}")
    fusable = [layer for layer, why in layers if why is None]
    for layer in fusable:
        layer.forward = types.MethodType(fused_forward, layer)
    return len(fusable)


def unfuse(peft_model) -> None:
    """Every LoRA layer of `peft_model` back to peft's own forward (`fuse` undone)."""
    for layer in adapted_layers(peft_model):
        layer.__dict__.pop("forward", None)


class FusedLora(Component):
    """The policy's LoRA layers fused (module docstring); `fused` is how many are."""

    name = "fused_lora"

    def __init__(self, trainer):
        super().__init__(trainer)
        args = trainer.args
        self.active = False
        self.fused = 0
        if not getattr(args, "fused_lora", False):
            return
        field, fix = refusal_words(args, "fused_lora")
        by_recipe = set_by_recipe(args, "fused_lora")

        def refuse(why: str):
            raise ValueError(f"{field}: {why}; {fix}.")

        model = peft_policy(trainer.model, trainer.accelerator)
        sharded_by = sharding(trainer.accelerator)
        if model is None or sharded_by is not None:
            if by_recipe:
                return
            refuse("the policy has no PEFT adapter (pass a peft_config)" if model is None
                   else f"not with {sharded_by} (sharded weights)")
        self.fused = fuse(model, None if by_recipe else refuse)
        self.active = self.fused > 0
