"""generation_bf16_copy: the trainer samples the tokens TRL's own trainer samples from the same weights in bf16, the
decoding runs in bf16 while the weights it trains stay float32 and come back bit for bit (the same storage), the
copy's memory is released when TRL's generation returns, and the field is refused where it cannot work."""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import pytest
import torch
import trl
from peft import get_peft_model

from tests import tiny
from tests.test_merged_generation import lora, nonzero_adapter
from tests.trl_internals import generate_and_score, replace_decoding
from trl_zoo import GRPOConfig, GRPOTrainer
from trl_zoo.components import decode_precision
from trl_zoo.components.generation_speed import delta_weight
from trl_zoo.components.weight_layout import adapted_layers


def zoo_trainer(**overrides):
    fields = dict(peft_config=lora(), max_steps=1, bf16=True, generation_bf16_copy=True)
    t = tiny.make_trainer(GRPOTrainer, GRPOConfig, **{**fields, **overrides})
    nonzero_adapter(t.model)
    return t


def bf16_merged_copy(peft_model):
    """What TRL would generate from at bf16 with the adapter merged: the same weights in a fresh model (a deep copy
    would keep a trainer's autocast-wrapped `forward`, bound to the original), merge_and_unload in float32, then
    every parameter cast to bf16 (buffers untouched, as in a model loaded in bf16)."""
    fresh = get_peft_model(tiny.model(0), lora())
    fresh.load_state_dict(peft_model.state_dict())
    merged = fresh.merge_and_unload()
    with torch.no_grad():
        for parameter in merged.parameters():
            parameter.data = parameter.data.to(torch.bfloat16)
    return merged


def completions(trainer, seed=11):
    torch.manual_seed(seed)
    inputs = [{"prompt": p} for p in tiny.prompts_dataset(8)["prompt"] for _ in range(4)]
    trainer.model.train()
    return generate_and_score(trainer, inputs)["completion_ids"]


def test_the_same_tokens_as_trls_sampler_on_the_merged_weights_in_bf16():
    shape = dict(max_completion_length=32, per_device_train_batch_size=32)
    zoo = zoo_trainer(merge_adapter_for_generation=True, **shape)
    policy = zoo.accelerator.unwrap_model(zoo.model)
    with torch.no_grad():  # sharper logits than the random model's near-uniform ones: bf16's rounding moves tokens
        policy.get_output_embeddings().weight.mul_(10)
    reference = trl.GRPOTrainer(
        model=bf16_merged_copy(policy), reward_funcs=tiny.digit_reward,
        args=trl.GRPOConfig(**tiny.config_kwargs(max_steps=1, bf16=True, **shape)),
        train_dataset=tiny.prompts_dataset(), processing_class=tiny.tokenizer(),
    )
    ours, theirs = completions(zoo), completions(reference)
    assert ours.numel() > 0 and torch.equal(ours, theirs)


@pytest.mark.parametrize("overrides", [
    {"merge_adapter_for_generation": True},
    {"merge_adapter_for_generation": False},
    {"speed_recipe": "lora_graphed", "gradient_accumulation_steps": 1},  # a static cache, the graphed step (eager)
])
def test_decodes_in_bf16_trains_in_float32_and_restores_the_same_tensors(overrides):
    trainer = zoo_trainer(**overrides)
    model = trainer.accelerator.unwrap_model(trainer.model)
    base = {name: (p.data_ptr(), p.detach().clone()) for name, p in model.named_parameters() if "lora_" not in name}
    adapter = {name: p.detach().clone() for name, p in model.named_parameters() if "lora_" in name}
    seen, copies, lora_dtypes, generating = set(), [], set(), [False]

    def flagged(*args, **kwargs):
        generating[0] = True
        try:
            return decoding(*args, **kwargs)
        finally:
            generating[0] = False

    def observe(module, args, kwargs):  # every forward of the decoding model while TRL generates
        if generating[0]:
            for name, parameter in model.named_parameters():
                (lora_dtypes if "lora_" in name else seen).add(parameter.dtype)
                if "lora_" not in name:
                    copies.append(weakref.ref(parameter.untyped_storage()))

    decoding = replace_decoding(trainer, flagged)
    model.get_base_model().register_forward_pre_hook(observe, with_kwargs=True)
    result = trainer.train()
    gc.collect()
    assert seen == {torch.bfloat16} and lora_dtypes == {torch.float32}  # bf16 base, the adapter as peft keeps it
    assert copies and all(ref() is None for ref in copies)  # every copy freed once TRL's generation returned
    for name, parameter in model.named_parameters():
        assert parameter.dtype == torch.float32
        if name in base:  # frozen weights: the same storage, the same bits
            assert parameter.data_ptr() == base[name][0] and torch.equal(parameter, base[name][1])
    assert any(not torch.equal(p, adapter[n]) for n, p in model.named_parameters() if n in adapter)  # it trained
    assert trainer.state.global_step == 1 and torch.isfinite(torch.tensor(result.training_loss))


def test_the_copy_holds_the_merged_weights_rounded_once_and_counts_its_bytes():
    model = get_peft_model(tiny.model(0), lora())
    nonzero_adapter(model)
    expected = {name: p.to(torch.bfloat16) for name, p in bf16_merged_copy(model).named_parameters()}
    layers = adapted_layers(model)
    copied = decode_precision.copied_parameters(model)
    with decode_precision.decoding_copy(model, layers, delta_weight) as nbytes:
        inside = {name.replace("base_model.model.", "").replace(".base_layer", ""): p.detach().clone()
                  for name, p in model.named_parameters() if "lora_" not in name}
    assert nbytes == 2 * sum(p.numel() for _, p in copied)
    assert set(inside) == set(expected)
    for name, value in inside.items():
        assert torch.equal(value, expected[name]), name
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.parametrize("overrides, fragment", [
    ({"bf16": False}, "bf16=False"),
    ({"bf16": True, "use_vllm": True}, "use_vllm"),
    ({"bf16": True, "use_transformers_continuous_batching": True}, "use_transformers_continuous_batching"),
])
def test_refused_in_the_config_where_it_cannot_work(overrides, fragment):
    with pytest.raises(ValueError, match=f"^generation_bf16_copy: not with {fragment}"):
        GRPOConfig(**tiny.config_kwargs(generation_bf16_copy=True, **overrides))


@pytest.mark.parametrize("base_attrs, state, fragment", [
    ({"is_loaded_in_4bit": True}, {}, "quantized"),
    ({}, {"deepspeed_plugin": SimpleNamespace(zero_stage=3)}, "ZeRO-3"),
    ({}, {"fsdp_plugin": object()}, "FSDP"),
    ({}, {"deepspeed_plugin": SimpleNamespace(zero_stage=2)}, None),
])
def test_refused_by_the_trainer_for_a_quantized_base_or_sharded_weights(base_attrs, state, fragment):
    model = get_peft_model(tiny.model(0), lora())
    for name, value in base_attrs.items():
        setattr(model.get_base_model(), name, value)
    accelerator = SimpleNamespace(unwrap_model=lambda m: m, state=SimpleNamespace(**state), is_fsdp2=False)
    refusal = decode_precision.refusal(model, accelerator)
    if fragment is None:
        assert refusal is None
    else:
        assert refusal.startswith("generation_bf16_copy:") and fragment in refusal and "\n" not in refusal
