"""What a policy's weights are, for the switches that write, copy or re-route them (the merge, the bf16 copy, the
fused LoRA layers): a PEFT adapter and its LoRA layers, a quantized base (bitsandbytes 4/8-bit, or any
`quantization_config`) or weights sharded across processes (DeepSpeed ZeRO-3, FSDP).

Tests: tests/test_merged_generation.py (the merge's refusals), tests/test_decode_precision.py (the copy's),
tests/test_fused_lora.py (the fusion's).
"""

from __future__ import annotations


def peft_policy(model, accelerator):
    """The (unwrapped) policy when it is a PEFT model, else None."""
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency of the LoRA path
        return None
    unwrapped = accelerator.unwrap_model(model) if accelerator is not None else model
    return unwrapped if isinstance(unwrapped, PeftModel) else None


def adapted_layers(peft_model) -> list:
    """Every LoRA layer with an active adapter (the layers a merge writes into)."""
    from peft.tuners.lora import LoraLayer

    return [
        module for module in peft_model.modules()
        if isinstance(module, LoraLayer) and any(name in module.lora_A for name in module.active_adapters)
    ]


def policy_base(model, accelerator):
    """The policy's base model: under a PEFT wrapper its base, else the (unwrapped) model."""
    unwrapped = accelerator.unwrap_model(model) if accelerator is not None else model
    get_base_model = getattr(unwrapped, "get_base_model", None)
    return get_base_model() if callable(get_base_model) else unwrapped


def is_quantized(base) -> bool:
    """Whether the base model's weights are quantized (bitsandbytes 4/8-bit, or any `quantization_config`)."""
    return bool(
        getattr(base, "is_loaded_in_4bit", False) or getattr(base, "is_loaded_in_8bit", False)
        or getattr(base, "quantization_method", None)
        or getattr(getattr(base, "config", None), "quantization_config", None)
    )


def sharding(accelerator) -> str | None:
    """What shards the weights across processes ("DeepSpeed ZeRO-3", "FSDP"), or None."""
    state = getattr(accelerator, "state", None)
    deepspeed = getattr(state, "deepspeed_plugin", None)
    if deepspeed is not None and getattr(deepspeed, "zero_stage", 0) == 3:
        return "DeepSpeed ZeRO-3"
    if getattr(accelerator, "is_fsdp2", False) or getattr(state, "fsdp_plugin", None) is not None:
        return "FSDP"
    return None
