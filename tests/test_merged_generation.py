"""merge_adapter_for_generation: merged and unmerged LoRA compute the same function (logits within float rounding,
the same completions for a fixed seed), the base and adapter weights are restored exactly, the loss is unchanged,
and the option is refused where it cannot work."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig, get_peft_model

from tests import tiny
from tests.trl_internals import generate_and_score
from trl_zoo import GRPOConfig, GRPOTrainer
from trl_zoo.components import merge_residue
from trl_zoo.components.generation_speed import (
    compile_refusal,
    fields_a_quantized_base_drops,
    merge_refusal,
    merged_adapter,
)
from trl_zoo.tasks.tiny import build_tiny_causal_lm


def lora():
    return LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def nonzero_adapter(model, seed=3):
    """LoRA's B starts at zero (merged = unmerged trivially); give it weights so the test can fail."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator))


def snapshot(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_merged_logits_match_and_weights_restored_exactly():
    model = get_peft_model(tiny.model(0), lora())
    nonzero_adapter(model)
    ids = torch.tensor([[5, 9, 12, 7, 3, 11]])
    before = snapshot(model)
    with torch.no_grad():
        unmerged = model(input_ids=ids).logits
        with merged_adapter(model):
            merged = model(input_ids=ids).logits
            moved = max((p - before[n]).abs().max().item() for n, p in model.named_parameters() if "base_layer" in n)
        restored = model(input_ids=ids).logits
    assert moved > 1e-3  # the merge really wrote into the base weights
    assert (merged - unmerged).abs().max().item() < 1e-5
    assert (merged - unmerged).abs().max().item() < 1e-2 * (unmerged.abs().max().item())
    torch.testing.assert_close(restored, unmerged, rtol=0, atol=0)
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(parameter, before[name], rtol=0, atol=0)
    assert not any(getattr(m, "merged", False) for m in model.modules())


def trainer(merge: bool):
    t = tiny.make_trainer(GRPOTrainer, GRPOConfig, peft_config=lora(), merge_adapter_for_generation=merge, max_steps=1)
    nonzero_adapter(t.model)
    return t


def generated(t):
    torch.manual_seed(11)
    inputs = [{"prompt": p} for p in tiny.prompts_dataset(2)["prompt"] for _ in range(4)]
    t.model.train()
    return generate_and_score(t, inputs)


def test_generation_and_loss_same_with_and_without_merge():
    off, on = trainer(False), trainer(True)
    before = snapshot(on.model)
    batch_off, batch_on = generated(off), generated(on)
    # merged and unmerged weights give the same logits up to float rounding, so a sampled token may flip where two
    # tokens are nearly tied (more likely on some CPUs than others); nearly every completion is the same
    ids_on, ids_off = batch_on["completion_ids"], batch_off["completion_ids"]
    width = max(ids_on.size(1), ids_off.size(1))
    ids_on, ids_off = (torch.nn.functional.pad(ids, (0, width - ids.size(1)), value=-1) for ids in (ids_on, ids_off))
    same_rows = (ids_on == ids_off).all(dim=1).float().mean()
    assert same_rows >= 0.75, f"only {same_rows:.0%} of the completions are the same with the adapter merged"
    assert batch_on["completion_mask"].sum() > 0
    for name, parameter in on.model.named_parameters():  # adapter and base weights restored exactly
        torch.testing.assert_close(parameter, before[name], rtol=0, atol=1e-6)
    if batch_off.get("old_per_token_logps") is not None:
        torch.testing.assert_close(
            batch_on["old_per_token_logps"], batch_off["old_per_token_logps"], atol=1e-5, rtol=0
        )
    losses, grads = [], []
    for t in (off, on):
        t.model.zero_grad()
        t.current_gradient_accumulation_steps = 1  # set by Trainer.train; one micro-batch here
        loss = t.compute_loss(t.model, batch_off)
        loss.backward()
        losses.append(loss.detach())
        grads.append(torch.cat([p.grad.flatten() for n, p in t.model.named_parameters() if p.grad is not None]))
    assert grads[0].abs().max() > 0
    torch.testing.assert_close(losses[1], losses[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=0)


def test_training_runs_with_merge():
    t = trainer(True)
    before = {n: p.detach().clone() for n, p in t.model.named_parameters() if "lora_" in n}
    t.train()
    assert t.state.global_step == 1
    assert any(not torch.equal(p, before[n]) for n, p in t.model.named_parameters() if "lora_" in n)


def test_refused_without_peft():
    with pytest.raises(ValueError, match="merge_adapter_for_generation: the policy has no PEFT adapter"):
        tiny.make_trainer(GRPOTrainer, GRPOConfig, merge_adapter_for_generation=True, max_steps=1)


def test_refused_with_vllm_when_the_config_is_built():
    with pytest.raises(ValueError, match="merge_adapter_for_generation: not with use_vllm=True"):
        GRPOConfig(**tiny.config_kwargs(merge_adapter_for_generation=True, use_vllm=True))


@pytest.mark.parametrize(
    "base_attrs, state, fragment",
    [
        ({"is_loaded_in_4bit": True}, {}, "quantized"),
        ({}, {"deepspeed_plugin": SimpleNamespace(zero_stage=3)}, "ZeRO-3"),
        ({}, {"fsdp_plugin": object()}, "FSDP"),
        ({}, {"deepspeed_plugin": SimpleNamespace(zero_stage=2)}, None),
    ],
)
def test_refusals_need_the_model_or_launch(base_attrs, state, fragment):
    model = get_peft_model(tiny.model(0), lora())
    for name, value in base_attrs.items():
        setattr(model.get_base_model(), name, value)
    accelerator = SimpleNamespace(unwrap_model=lambda m: m, state=SimpleNamespace(**state), is_fsdp2=False)
    args = SimpleNamespace(use_vllm=False)
    refusal = merge_refusal(model, args, accelerator)
    if fragment is None:
        assert refusal is None
    else:
        assert refusal.startswith("merge_adapter_for_generation:") and fragment in refusal


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("scale", [1e-4, 1e-1, 30.0])
def test_the_residue_undoes_the_update_bit_for_bit(dtype, scale):
    """W ← fl(W + Δ) and back, exactly, for updates far below, near and far above the weights; zeros, infinities and a
    NaN among them; the residue is 2 bits an element while |Δ| stays below |W|."""
    generator = torch.Generator().manual_seed(7)
    weight = (0.02 * torch.randn(129, 67, generator=generator)).to(dtype)
    weight[0, :4] = torch.tensor([0.0, -0.0, float("inf"), float("nan")])
    delta = 0.02 * scale * torch.randn(129, 67, generator=generator)
    original = weight.clone()
    residue = merge_residue.merge(weight, delta)
    assert torch.equal(merge_residue.bits(weight), merge_residue.bits(original.clone().add_(delta)))
    merge_residue.restore(weight, delta, residue)
    assert torch.equal(merge_residue.bits(weight), merge_residue.bits(original))
    if scale < 1:
        assert residue.packed.numel() == -(-weight.numel() // 4)
        assert residue.exception_index.numel() < 0.05 * weight.numel()


def test_pack_and_unpack_are_inverse():
    codes = torch.randint(0, 4, (4 * 9 + 3,), dtype=torch.uint8)
    assert torch.equal(merge_residue.unpack(merge_residue.pack(codes), codes.numel()), codes)


def test_the_merge_adds_only_a_small_residue_and_restores_exactly_across_updates():
    """The merge keeps no copy of the weights: its residue is an eighth of the adapted bf16 weights' bytes (plus rare
    exceptions); after each merge the base weights are back bit for bit, after an optimizer-like update in between
    too."""
    model = get_peft_model(tiny.model(0).to(torch.bfloat16), lora())
    nonzero_adapter(model)
    with torch.no_grad():  # an update a few percent of the weights, as LoRA's are
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.mul_(0.01)
    ids = torch.tensor([[5, 9, 12, 7, 3, 11]])
    sizes = []
    real_merge = merge_residue.merge

    def measured(weight, delta):
        residue = real_merge(weight, delta)
        sizes.append((residue.nbytes, weight.numel() * weight.element_size()))
        return residue

    merge_residue.merge = measured
    try:
        for _ in range(3):
            before = snapshot(model)
            with torch.no_grad():
                unmerged_logits = model(input_ids=ids).logits
                with merged_adapter(model):
                    merged_logits = model(input_ids=ids).logits
            for name, parameter in model.named_parameters():
                torch.testing.assert_close(parameter, before[name], rtol=0, atol=0)
            assert (merged_logits - unmerged_logits).abs().max().item() < 0.1 * unmerged_logits.abs().max().item()
            with torch.no_grad():
                for name, parameter in model.named_parameters():
                    if "lora_B" in name:
                        parameter.add_(1e-3)
    finally:
        merge_residue.merge = real_merge
    residue_bytes, weight_bytes = map(sum, zip(*sizes))
    assert residue_bytes < 0.2 * weight_bytes


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU's matmul at the restore is the question")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_merge_restores_the_weights_bit_for_bit_on_a_gpu(dtype):
    """The restore recomputes Δ = s·BA with the same cuBLAS call as the merge; the weights come back bit for bit for
    layers of a real model's width (where cuBLAS picks split or tiled kernels), across repeated merges."""
    base = build_tiny_causal_lm(tiny.tokenizer(), hidden_size=1024, num_layers=2, num_heads=16, seed=0)
    model = get_peft_model(base.to("cuda", dtype), LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    nonzero_adapter(model)
    before = snapshot(model)
    ids = torch.randint(0, base.config.vocab_size, (4, 32), device="cuda")
    for _ in range(3):
        with torch.no_grad(), merged_adapter(model):
            model(input_ids=ids)
        for name, parameter in model.named_parameters():
            assert torch.equal(merge_residue.bits(parameter), merge_residue.bits(before[name])), name


def test_dora_is_refused():
    model = get_peft_model(tiny.model(0), LoraConfig(r=4, target_modules=["q_proj"], use_dora=True))
    accelerator = SimpleNamespace(unwrap_model=lambda m: m, state=SimpleNamespace(), is_fsdp2=False)
    refusal = merge_refusal(model, SimpleNamespace(use_vllm=False), accelerator)
    assert refusal.startswith("merge_adapter_for_generation:") and "DoRA" in refusal


@pytest.mark.parametrize("recipe, quantized, compileable, expected", [
    ("lora_graphed", True, False, ["merge_adapter_for_generation", "compile_generation"]),
    ("lora_graphed", True, True, ["merge_adapter_for_generation"]),
    ("lora", True, False, ["merge_adapter_for_generation"]),
    ("lora_graphed", False, False, []),
    (None, True, False, []),
])
def test_a_recipe_on_a_quantized_base_drops_what_cannot_apply(recipe, quantized, compileable, expected):
    """QLoRA under a speed recipe: the merge (lossy into 4-bit weights) and, where transformers does not compile the
    quantization (bitsandbytes), compiled decoding are dropped; the recipe's other fields apply. Set by the user
    instead, each is refused in one line."""
    from trl_zoo.config.speed_recipe import SPEED_RECIPES

    model = get_peft_model(tiny.model(0), lora())
    if quantized:
        model.get_base_model().is_loaded_in_4bit = True
        model.get_base_model().hf_quantizer = SimpleNamespace(is_compileable=compileable)
    accelerator = SimpleNamespace(unwrap_model=lambda m: m)
    args = SimpleNamespace(**{"speed_recipe": recipe, "merge_adapter_for_generation": False,
                              "compile_generation": False, **SPEED_RECIPES.get(recipe, {})})
    assert fields_a_quantized_base_drops(model, args, accelerator) == expected
    user = SimpleNamespace(speed_recipe=None, compile_generation=True)
    refusal = compile_refusal(model, user, accelerator)
    assert (refusal is not None) == (quantized and not compileable)
    if refusal:
        assert refusal.startswith("compile_generation:") and "\n" not in refusal
