"""generation_autocast: TRL generates outside autocast (so float32 weights decode in fp32, the premise), with the
field the decoding runs under the training forward's bf16 autocast with the weights untouched, a step trains, and
the field is refused with one line where it cannot work."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig

from tests import tiny
from tests.trl_internals import replace_decoding
from trl_zoo import GRPOConfig, GRPOTrainer


def decoding_precisions(generation_autocast: bool) -> tuple[set, set, int]:
    """(the output dtypes of one base linear layer while TRL generates, the weights' dtypes, the steps trained)."""
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    trainer = tiny.make_trainer(GRPOTrainer, GRPOConfig, peft_config=lora, max_steps=1, bf16=True,
                                generation_autocast=generation_autocast)
    generating, seen = [False], set()

    def flagged(*args, **kwargs):
        generating[0] = True
        try:
            return generate(*args, **kwargs)
        finally:
            generating[0] = False

    generate = replace_decoding(trainer, flagged)
    layer = next(m for name, m in trainer.model.named_modules() if name.endswith("q_proj.base_layer"))
    layer.register_forward_hook(lambda module, inputs, output: seen.add(output.dtype) if generating[0] else None)
    trainer.train()
    return seen, {p.dtype for p in trainer.model.parameters()}, trainer.state.global_step


def test_trl_decodes_in_the_weights_dtype_and_the_field_in_the_training_precision():
    assert decoding_precisions(False)[0] == {torch.float32}  # TRL: bf16=True, yet generation runs in fp32
    seen, weights, steps = decoding_precisions(True)
    assert seen == {torch.bfloat16}
    assert weights == {torch.float32} and steps == 1  # the weights are not cast; the step trains


@pytest.mark.parametrize("overrides, fragment", [
    ({"bf16": False}, "bf16=False and fp16=False"),
    ({"bf16": True, "use_vllm": True}, "use_vllm"),
    ({"bf16": True, "use_transformers_continuous_batching": True}, "use_transformers_continuous_batching"),
])
def test_refused_where_it_cannot_work(overrides, fragment):
    with pytest.raises(ValueError, match=f"generation_autocast: not with {fragment}"):
        GRPOConfig(**tiny.config_kwargs(generation_autocast=True, **overrides))


@pytest.mark.parametrize("static", [{"compile_generation": True}, {"cache_implementation": "static"}])
def test_static_cache_refused_only_where_transformers_mixes_the_dtypes(monkeypatch, static):
    import transformers

    kwargs = tiny.config_kwargs(generation_autocast=True, bf16=True, **static)
    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    refusal = r"generation_autocast: not with a static KV cache .*upgrade transformers to >= 5\.24"
    with pytest.raises(ValueError, match=refusal):
        GRPOConfig(**kwargs)
    monkeypatch.setattr(transformers, "__version__", "5.24.0")
    assert GRPOConfig(**kwargs).generation_autocast


def test_static_cache_under_autocast_decodes_where_allowed():
    """The combination the refusal guards: bf16 autocast, a static cache, LoRA; one step trains (transformers
    >= 5.24: keys and values each in their own dtype)."""
    from trl_zoo.config.generation_speed import static_cache_fails_on_mixed_dtypes

    if static_cache_fails_on_mixed_dtypes():
        pytest.skip("this transformers refuses the combination (tested above)")
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    trainer = tiny.make_trainer(GRPOTrainer, GRPOConfig, peft_config=lora, max_steps=1, bf16=True,
                                generation_autocast=True, cache_implementation="static")
    trainer.train()
    assert trainer.state.global_step == 1
