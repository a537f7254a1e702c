"""fused_lora: LoraAdd is y = base + s·(x Aᵀ)Bᵀ with its closed-form gradients; a fused model gives peft's logits
and gradients (float32, and bf16 under autocast within its rounding) with no elementwise pass over a LoRA layer's
activations; disabled and merged adapters run peft's own forward; a trainer with fused_lora keeps every optimizer
step's loss and gradient; what cannot be fused is refused in one line."""

import copy

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from torch.utils._python_dispatch import TorchDispatchMode
from trl.trainer.utils import split_tensor_dict

import trl_zoo
from tests.test_advantages import lora
from tests.test_length_bucketing import _assert_steps_close, _per_step_losses_and_gradients
from tests.test_prompt_once import PROMPTS, _generation_batch
from tests.tiny import make_trainer, model, perturb, relative_error
from tests.tiny import tokenizer as tiny_tokenizer
from trl_zoo.components.fused_lora import LoraAdd, fuse, unfuse
from trl_zoo.components.weight_layout import adapted_layers

IDS = torch.tensor([[5, 9, 12, 7, 3, 14, 6, 11], [8, 4, 10, 13, 9, 5, 7, 12]])


def test_lora_add_is_the_closed_form_and_its_gradients():
    generator = torch.Generator().manual_seed(0)
    rand = lambda *shape: torch.randn(*shape, generator=generator, dtype=torch.float64)  # noqa: E731
    base, x, a, b, w = rand(2, 3, 5), rand(2, 3, 4), rand(2, 4), rand(5, 2), rand(2, 3, 5)
    s = 0.7
    inputs = [t.clone().requires_grad_() for t in (base, x, a, b)]
    y = LoraAdd.apply(*inputs, s)
    torch.testing.assert_close(y, base + s * (x @ a.t()) @ b.t(), rtol=1e-12, atol=1e-12)
    grads = torch.autograd.grad((y * w).sum(), inputs)
    x2, w2 = x.reshape(-1, 4), w.reshape(-1, 5)
    expected = (w, s * (w @ b) @ a, s * (w2 @ b).t() @ x2, s * w2.t() @ (x2 @ a.t()))
    for measured, closed_form in zip(grads, expected):
        torch.testing.assert_close(measured, closed_form, rtol=1e-12, atol=1e-12)


def _peft_model(dtype=torch.float32, **lora_settings):
    torch.manual_seed(0)
    settings = dict(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0)
    peft_model = get_peft_model(model(0).to(dtype), LoraConfig(**{**settings, **lora_settings}))
    perturb(peft_model, scale=0.05)  # B starts at 0: move it so the adapter's branch counts
    return peft_model


def _logits_and_gradients(peft_model, autocast=False):
    peft_model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = peft_model(input_ids=IDS).logits
    weights = torch.linspace(-1.0, 1.0, logits.numel()).view_as(logits)
    (logits.float() * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in peft_model.named_parameters() if p.grad is not None}
    return logits.detach().float(), grads


def test_a_fused_model_gives_peft_logits_and_gradients_in_float32():
    plain = _peft_model()
    fused = copy.deepcopy(plain)
    assert fuse(fused) == len(adapted_layers(fused)) > 0
    expected_logits, expected_grads = _logits_and_gradients(plain)
    logits, grads = _logits_and_gradients(fused)
    torch.testing.assert_close(logits, expected_logits, rtol=1e-5, atol=1e-5)
    assert grads.keys() == expected_grads.keys() and all("lora_" in name for name in grads)
    for name, grad in grads.items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(grad, expected_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_under_bf16_autocast_it_is_peft_within_bf16_rounding_and_adapter_gradients_keep_their_dtype():
    plain = _peft_model(torch.bfloat16)
    assert {p.dtype for n, p in plain.named_parameters() if "lora_" in n} == {torch.float32}  # peft upcasts them
    fused = copy.deepcopy(plain)
    fuse(fused)
    expected_logits, expected_grads = _logits_and_gradients(plain, autocast=True)
    logits, grads = _logits_and_gradients(fused, autocast=True)
    assert relative_error(logits, expected_logits) < 2e-2
    for name, grad in grads.items():
        assert grad.dtype == torch.float32, name
        assert relative_error(grad, expected_grads[name]) < 5e-2, name


class _ActivationPasses(TorchDispatchMode):
    """Counts the ops other than matrix products whose output has at least `size` elements."""

    PRODUCTS = {"mm", "addmm", "bmm", "t", "view", "_unsafe_view", "reshape", "expand", "transpose", "detach"}

    def __init__(self, size):
        super().__init__()
        self.size, self.ops = size, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if isinstance(out, torch.Tensor) and out.numel() >= self.size and name not in self.PRODUCTS:
            self.ops.append(name)
        return out


@pytest.mark.parametrize("autocast", [False, True], ids=["bf16", "bf16-autocast"])
def test_a_fused_layer_makes_no_elementwise_pass_over_its_activations(autocast):
    plain = _peft_model(torch.bfloat16)
    layer = adapted_layers(plain)[0]
    x = torch.randn(64, layer.in_features, dtype=torch.bfloat16)
    size = x.size(0) * min(layer.in_features, layer.out_features)

    def passes(module):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast), _ActivationPasses(size) as counter:
            module(x)
        return counter.ops

    peft_ops = passes(layer)
    fuse(plain)
    assert len(peft_ops) >= 2 and passes(layer) == [], peft_ops


@pytest.mark.parametrize("state", ["disabled", "merged"])
def test_a_disabled_or_merged_adapter_runs_pefts_own_forward(state):
    plain = _peft_model()
    fused = copy.deepcopy(plain)
    fuse(fused)
    for peft_model in (plain, fused):
        if state == "merged":
            peft_model.merge_adapter()
    with plain.disable_adapter() if state == "disabled" else torch.no_grad():
        expected = plain(input_ids=IDS).logits
    with fused.disable_adapter() if state == "disabled" else torch.no_grad():
        measured = fused(input_ids=IDS).logits
    torch.testing.assert_close(measured, expected, rtol=1e-6, atol=1e-6)
    if state == "disabled":  # and not what the adapter gives
        assert relative_error(measured, fused(input_ids=IDS).logits) > 1e-3


def _trainer(peft_config="q_proj and v_proj", **overrides):
    return make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora() if peft_config == "q_proj and v_proj" else
        peft_config, per_device_train_batch_size=4,
        num_generations=4, steps_per_generation=4, gradient_accumulation_steps=2, max_completion_length=12,
        loss_type="dapo", beta=0.04, dataset=Dataset.from_dict({"prompt": PROMPTS}), **overrides,
    )


def test_a_trainer_with_fused_lora_keeps_every_steps_loss_and_gradient():
    trainer = _trainer(fused_lora=True)
    component = trainer.pipeline.get("fused_lora")
    assert component.fused == len(adapted_layers(trainer.model)) == 4  # q_proj and v_proj of 2 layers
    batch = _generation_batch(trainer)
    perturb(trainer.model, scale=0.02)
    micro_batches = split_tensor_dict(batch, trainer.args.steps_per_generation)
    measured = _per_step_losses_and_gradients(trainer, micro_batches)
    unfuse(trainer.model)
    expected = _per_step_losses_and_gradients(trainer, micro_batches)
    _assert_steps_close(measured, expected, 2, loss_tolerance=(1e-5, 1e-7))


@pytest.mark.parametrize(
    "settings, words",
    [
        (dict(peft_config=None), "fused_lora: the policy has no PEFT adapter (pass a peft_config); set it False."),
        (dict(peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], lora_dropout=0.1)),
         "fused_lora: a LoRA layer has lora_dropout=0.1 (set lora_dropout=0 in the LoraConfig); set it "
         "False."),
        (dict(peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], use_dora=True)),
         "fused_lora: a LoRA layer has a LoRA variant (DoRA); set it False."),
    ],
    ids=["no-peft", "dropout", "dora"],
)
def test_refused_in_one_line(settings, words):
    with pytest.raises(ValueError) as error:
        make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, fused_lora=True, **settings)
    assert str(error.value) == words


def test_set_by_a_recipe_it_fuses_what_it_can_and_leaves_the_rest(monkeypatch):
    from tests import vllm_stand_in

    graphed = _trainer(speed_recipe="lora_graphed")
    assert graphed.pipeline.get("fused_lora").fused == 4
    dropout = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.1)
    left = _trainer(speed_recipe="lora_graphed", peft_config=dropout)  # not refused: peft computes every layer
    assert left.pipeline.get("fused_lora").fused == 0 and "fused_lora" not in left.pipeline.active()
    vllm_stand_in.install(monkeypatch)
    full = _trainer(speed_recipe="vllm", use_vllm=True, vllm_mode="colocate", peft_config=None)
    assert full.args.fused_lora and full.pipeline.get("fused_lora").fused == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA device")
def test_on_cuda_under_bf16_autocast_it_is_peft_within_rounding_at_no_more_memory():
    plain = _peft_model(torch.bfloat16).cuda()
    fused = copy.deepcopy(plain)
    fuse(fused)
    ids = torch.randint(3, len(tiny_tokenizer()), (16, 64), generator=torch.Generator().manual_seed(0)).cuda()

    def run(peft_model):
        peft_model.zero_grad()
        torch.cuda.reset_peak_memory_stats()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = peft_model(input_ids=ids).logits
        (logits.float() * torch.linspace(-1.0, 1.0, logits.numel(), device="cuda").view_as(logits)).sum().backward()
        grads = {n: p.grad.float().cpu() for n, p in peft_model.named_parameters() if p.grad is not None}
        return logits.detach().float().cpu(), grads, torch.cuda.max_memory_allocated()

    expected_logits, expected_grads, expected_peak = run(plain)
    logits, grads, peak = run(fused)
    assert relative_error(logits, expected_logits) < 2e-2 and peak <= expected_peak
    for name, grad in grads.items():
        assert relative_error(grad, expected_grads[name]) < 5e-2, name
