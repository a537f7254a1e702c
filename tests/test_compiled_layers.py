"""compiled_layers: the decoder layers are found (the largest list of one class); a trainer with them compiled keeps
every optimizer step's loss and gradient, and its passes run compiled graphs; decoding runs the layers eagerly and
gives the compiled calls back; what cannot be compiled is refused in one line, or left eager under a recipe."""

import pytest
import torch
from datasets import Dataset
from trl.trainer.utils import split_tensor_dict

import trl_zoo
from tests.test_advantages import lora
from tests.test_length_bucketing import _assert_steps_close, _per_step_losses_and_gradients
from tests.test_prompt_once import PROMPTS, _generation_batch
from tests.tiny import make_trainer, perturb
from tests.tiny import tokenizer as tiny_tokenizer
from trl_zoo.components import compiled_layers
from trl_zoo.components.compiled_layers import decoder_layers, eager_layers


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Every trainer of a process compiles the same code (nn.Module's call): torch's recompile limit is shared."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _trainer(**overrides):
    return make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=overrides.pop("peft_config", lora()),
        per_device_train_batch_size=4, num_generations=4, steps_per_generation=4, gradient_accumulation_steps=2,
        max_completion_length=12, loss_type="dapo", beta=0.04, dataset=Dataset.from_dict({"prompt": PROMPTS}),
        **overrides,
    )


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.ReLU()])  # two classes: not the layers


class _GPT2Like(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(2)])
        self.h = torch.nn.ModuleList([_Block() for _ in range(3)])


def test_the_decoder_layers_are_the_largest_list_of_one_class():
    trainer = _trainer()
    layers = decoder_layers(trainer.model)
    assert layers is trainer.model.get_base_model().model.layers and len(layers) == 2
    gpt2_like = _GPT2Like()
    assert decoder_layers(gpt2_like) is gpt2_like.h
    assert decoder_layers(torch.nn.Sequential(torch.nn.Linear(2, 2))) is None


def test_a_trainer_with_compiled_layers_keeps_every_steps_loss_and_gradient_through_compiled_graphs():
    trainer = _trainer(compiled_layers=True, fused_lora=True)
    component = trainer.pipeline.get("compiled_layers")
    assert component.compiled == 2
    batch = _generation_batch(trainer)
    perturb(trainer.model, scale=0.02)
    micro_batches = split_tensor_dict(batch, trainer.args.steps_per_generation)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    measured = _per_step_losses_and_gradients(trainer, micro_batches)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > graphs  # the passes ran compiled layers
    with eager_layers(component.layers):
        expected = _per_step_losses_and_gradients(trainer, micro_batches)
    _assert_steps_close(measured, expected, 2, loss_tolerance=(1e-5, 1e-7))


def test_decoding_runs_the_layers_eagerly_and_gives_their_compiled_calls_back():
    trainer = _trainer(compiled_layers=True)
    layers = trainer.pipeline.get("compiled_layers").layers
    seen = []
    body = trainer.model.get_base_model().model  # not compiled: its hook runs in Python
    handle = body.register_forward_pre_hook(lambda *_: seen.append([layer._compiled_call_impl for layer in layers]))
    ids = tiny_tokenizer()(["12+30="], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        trainer.model.generate(input_ids=ids, max_new_tokens=3, do_sample=False)
    handle.remove()
    assert len(seen) == 3 and all(call is None for calls in seen for call in calls)
    assert all(layer._compiled_call_impl is not None for layer in layers)


@pytest.mark.parametrize(
    "patched, value, words",
    [
        ("decoder_layers", None,
         "compiled_layers: the model has no list of decoder layers of one class; set it False."),
        ("is_quantized", True,
         "compiled_layers: the base model is quantized (its layers break torch's graphs); set it False."),
        ("sharding", "FSDP", "compiled_layers: not with FSDP (sharded weights); set it False."),
    ],
    ids=["no-layers", "quantized", "sharded"],
)
def test_refused_in_one_line_or_left_eager_by_the_recipe(monkeypatch, patched, value, words):
    from tests import vllm_stand_in

    monkeypatch.setattr(compiled_layers, patched, lambda *_: value)
    with pytest.raises(ValueError) as error:
        _trainer(compiled_layers=True)
    assert str(error.value) == words
    vllm_stand_in.install(monkeypatch)
    recipe = _trainer(speed_recipe="vllm", use_vllm=True, vllm_mode="colocate")
    assert recipe.args.compiled_layers and recipe.pipeline.get("compiled_layers").compiled == 0


def test_the_vllm_recipe_compiles_the_layers(monkeypatch):
    from tests import vllm_stand_in

    vllm_stand_in.install(monkeypatch)
    trainer = _trainer(speed_recipe="vllm", use_vllm=True, vllm_mode="colocate")
    layers = trainer.pipeline.get("compiled_layers").layers
    assert len(layers) == 2 and all(layer._compiled_call_impl is not None for layer in layers)
