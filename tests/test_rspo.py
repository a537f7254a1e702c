"""RSPO: the router-shift weight γ against its closed form, RSPO = GMPO when γ ≡ 1, damping for both advantage
signs, and the trainer's router hooks on a tiny Qwen3-MoE model (old top-K recorded once per generation batch and
checked against the model's own router logits; current routers captured inside the single loss forward)."""

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
from trl.trainer.utils import split_tensor_dict

import trl_zoo
from tests import tiny
from tests.trl_internals import generate_and_score, metric_values
from trl_zoo.losses.base import PolicyBatch
from trl_zoo.losses.gmpo import gmpo_loss
from trl_zoo.losses.rspo import router_shift_weight, rspo_loss
from trl_zoo.registry import LOSSES

ARGS = SimpleNamespace(gmpo_epsilon=0.4, rspo_gamma_min=0.1)
NUM_LAYERS, TOP_K, NUM_EXPERTS = 2, 2, 4


# ---------------------------------------------------------------------------------------------- the loss alone
def _batch(seed=0, router_drift=0.0, B=4, T=5):
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, T)
    mask[1, 3:] = 0
    mask[3, 1:] = 0
    old_router = torch.randn(B, T, NUM_LAYERS, TOP_K, generator=generator).log_softmax(-1)
    current_router = old_router + router_drift * torch.randn(old_router.shape, generator=generator)
    return PolicyBatch(
        logps=(0.3 * torch.randn(B, T, generator=generator) - 1.0).requires_grad_(),
        old_logps=0.3 * torch.randn(B, T, generator=generator) - 1.0,
        advantages=torch.tensor([[1.5], [-0.5], [-1.2], [0.7]]),
        mask=mask,
        extras={"old_router_logps": old_router, "router_logps": current_router},
    )


def _loss_and_grad(loss_fn, batch):
    batch = replace(batch, logps=batch.logps.detach().clone().requires_grad_())
    term = loss_fn(batch, ARGS)
    term.loss.sum().backward()
    return term.loss.detach(), batch.logps.grad


def test_registered_as_sequence_level_moe_loss():
    entry = LOSSES.get("rspo")
    assert entry.spec.aggregation == "sequence_mean"
    assert entry.spec.sequence_level is True
    assert entry.spec.requires_moe is True


def test_gamma_matches_closed_form_with_floor():
    batch = _batch(router_drift=1.2)
    gamma, at_floor = router_shift_weight(batch, gamma_min=0.35)
    current, old = batch.extras["router_logps"], batch.extras["old_router_logps"]
    B, T = batch.mask.shape
    floored = 0
    for i in range(B):
        for t in range(T):
            if batch.mask[i, t] == 0:
                assert gamma[i, t] == 1.0 and at_floor[i, t] == 0.0
                continue
            drift = sum(
                abs(current[i, t, layer, k].item() - old[i, t, layer, k].item())
                for layer in range(NUM_LAYERS)
                for k in range(TOP_K)
            ) / (NUM_LAYERS * TOP_K)
            expected = max(torch.exp(torch.tensor(-drift)).item(), 0.35)
            assert gamma[i, t].item() == pytest.approx(expected, abs=1e-6)
            assert at_floor[i, t].item() == float(expected == 0.35)
            floored += expected == 0.35
    assert 0 < floored < batch.mask.sum()  # the drift is large enough that the floor binds on some tokens only
    assert not gamma.requires_grad


def test_equals_gmpo_in_value_and_gradient_when_router_unchanged():
    unchanged = _batch(router_drift=0.0)
    no_router_stats = replace(unchanged, extras={})
    gmpo_value, gmpo_grad = _loss_and_grad(gmpo_loss, unchanged)
    for batch in (unchanged, no_router_stats):
        value, grad = _loss_and_grad(rspo_loss, batch)
        assert torch.equal(value, gmpo_value)
        assert torch.equal(grad, gmpo_grad)
    assert gmpo_grad.abs().sum() > 0


def test_router_shift_damps_value_and_gradient_for_both_advantage_signs():
    drifted = _batch(router_drift=0.3)
    gamma, _ = router_shift_weight(drifted, ARGS.rspo_gamma_min)
    damping = torch.exp((torch.log(gamma) * drifted.mask).sum(-1, keepdim=True) / drifted.mask.sum(-1, keepdim=True))
    assert (damping < 1).all() and (damping >= ARGS.rspo_gamma_min).all()

    gmpo_value, gmpo_grad = _loss_and_grad(gmpo_loss, drifted)
    value, grad = _loss_and_grad(rspo_loss, drifted)
    torch.testing.assert_close(value, damping * gmpo_value, rtol=1e-6, atol=0)
    torch.testing.assert_close(grad, damping * gmpo_grad, rtol=1e-6, atol=0)
    signs = drifted.advantages.sign().squeeze(1)
    assert set(signs.tolist()) == {1.0, -1.0}
    assert (value.abs() < gmpo_value.abs()).all()  # Â > 0 and Â < 0 alike


def test_half_present_router_statistics_are_an_error():
    batch = _batch(router_drift=0.1)
    del batch.extras["router_logps"]
    with pytest.raises(ValueError, match="'old_router_logps' but not 'router_logps'"):
        rspo_loss(batch, ARGS)


def test_recipe_builds_a_valid_config():
    recipe = yaml.safe_load((Path(__file__).parent.parent / "configs" / "rspo.yaml").read_text())
    args = trl_zoo.GRPOConfig(**tiny.config_kwargs(**recipe))
    assert args.loss_type == "rspo" and args.num_iterations > 1


# ---------------------------------------------------------------------------------------------- with the trainer
def moe_model(seed=0):
    """A tiny Qwen3-MoE: hidden 32, 2 layers, 4 experts, top-2, the character vocabulary."""
    tokenizer = tiny.tokenizer()
    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=32,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        num_experts=NUM_EXPERTS,
        num_experts_per_tok=TOP_K,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def moe_trainer(peft_config=None, **overrides):
    torch.manual_seed(0)
    return trl_zoo.GRPOTrainer(
        model=moe_model(),
        reward_funcs=tiny.digit_reward,
        args=trl_zoo.GRPOConfig(**tiny.config_kwargs(loss_type="rspo", **overrides)),
        train_dataset=tiny.prompts_dataset(),
        processing_class=tiny.tokenizer(),
        peft_config=peft_config,
    )


def _router_logps_at_completion(model, batch):
    """Direct computation: the model's own router logits, log_softmax at the positions predicting completion tokens."""
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    B, S = input_ids.shape
    T = batch["completion_ids"].size(1)
    with torch.no_grad():
        outputs = model(input_ids=input_ids, attention_mask=attention_mask, output_router_logits=True)
    router_logits = outputs.router_logits
    assert len(router_logits) == NUM_LAYERS
    return torch.stack([logits.reshape(B, S, -1)[:, S - T - 1 : S - 1].log_softmax(-1) for logits in router_logits], 2)


def _spy_on_loss(trainer):
    """Replace the trainer's loss entry with one that keeps the router statistics each call saw."""
    seen = []

    def spy(batch, args):
        keys = ("router_logps", "old_router_logps")
        seen.append({key: batch.extras[key].clone() for key in keys if key in batch.extras})
        return rspo_loss(batch, args)

    trainer.plan = replace(trainer.plan, loss_entry=replace(trainer.plan.loss_entry, fn=spy))
    return seen


def test_dense_model_is_rejected_with_one_line_error():
    with pytest.raises(ValueError, match=r"loss_type: 'rspo' needs a Mixture-of-Experts model") as error:
        tiny.make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, loss_type="rspo")
    assert "\n" not in str(error.value) and "Qwen2ForCausalLM" in str(error.value)


def test_skipping_zero_advantage_rows_is_rejected():
    with pytest.raises(ValueError, match=r"skip_zero_advantage: not supported with loss_type 'rspo'"):
        moe_trainer(skip_zero_advantage=True, router_aux_loss_coef=0.0)


def test_old_routers_recorded_and_current_routers_captured_in_the_loss_forward():
    trainer = moe_trainer(num_iterations=2)
    trainer.model.train()
    torch.manual_seed(0)
    batch = generate_and_score(trainer, next(iter(trainer.get_train_dataloader())))
    B, T = batch["completion_ids"].shape
    experts, old_logps = batch["old_router_experts"], batch["old_router_logps"]
    assert experts.shape == old_logps.shape == (B, T, NUM_LAYERS, TOP_K)
    assert experts.dtype == torch.int16 and old_logps.dtype == torch.float32

    direct = _router_logps_at_completion(trainer.model, batch)
    direct_top, direct_experts = direct.topk(TOP_K, dim=-1)
    assert torch.equal(experts.long(), direct_experts)
    torch.testing.assert_close(old_logps, direct_top, rtol=0, atol=1e-6)

    seen = _spy_on_loss(trainer)
    forwards = []
    trainer.model.register_forward_pre_hook(lambda module, args: forwards.append(1))
    micro_batch = split_tensor_dict(batch, 2)[0]
    trainer.current_gradient_accumulation_steps = 1
    trainer.compute_loss(trainer.model, micro_batch)  # policy not moved yet: same routers
    assert len(forwards) == 1  # the router statistics come from the loss's own forward
    assert "router_logps" not in micro_batch
    torch.testing.assert_close(seen[-1]["router_logps"], seen[-1]["old_router_logps"], rtol=0, atol=1e-6)
    assert metric_values(trainer)["rspo/gamma_mean"][-1] == pytest.approx(1.0, abs=1e-6)

    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for router in trainer.pipeline.get("router").routers:
            router.module.weight.add_(0.5 * torch.randn(router.module.weight.shape, generator=generator))
    trainer.compute_loss(trainer.model, micro_batch)
    assert len(forwards) == 2
    half = micro_batch["completion_ids"].size(0)
    moved = _router_logps_at_completion(trainer.model, micro_batch).gather(-1, experts[:half].long())
    torch.testing.assert_close(seen[-1]["router_logps"], moved, rtol=0, atol=1e-6)
    mask = micro_batch["completion_mask"]
    drift = (moved - old_logps[:half]).abs().mean(dim=(-1, -2))
    gamma = torch.exp(-drift).clamp(min=trainer.args.rspo_gamma_min)
    expected_mean = ((gamma * mask).sum() / mask.sum()).item()
    assert expected_mean < 0.95
    assert metric_values(trainer)["rspo/gamma_mean"][-1] == pytest.approx(expected_mean, abs=1e-6)


def test_on_policy_training_has_gamma_exactly_one_and_records_nothing():
    trainer = moe_trainer(max_steps=2)  # num_iterations=1, aligned steps: every micro-batch is on-policy
    trainer.model.train()
    batch = generate_and_score(trainer, next(iter(trainer.get_train_dataloader())))
    assert "old_router_experts" not in batch and "old_per_token_logps" not in batch
    trainer.train()
    logs = [log for log in trainer.state.log_history if "rspo/gamma_mean" in log]
    assert len(logs) == 2
    assert all(log["rspo/gamma_mean"] == 1.0 and log["rspo/gamma_min"] == 1.0 for log in logs)


def test_off_policy_training_damps_reused_batches_and_respects_the_floor():
    # num_iterations=2: step 1 trains on a fresh batch, step 2 reuses it after an update.
    # gradient checkpointing recomputes the routers in backward: the hooks must not record that recomputation.
    trainer = moe_trainer(
        num_iterations=2, max_steps=2, learning_rate=5e-2, rspo_gamma_min=0.7, gradient_checkpointing=True
    )
    trainer.train()
    for router in trainer.pipeline.get("router").routers:  # the recorder's hooks live only while a forward is recorded
        assert not [
            hook for hook in router.module._forward_hooks.values() if "RouterLogpsRecorder" in hook.__qualname__
        ]
    fresh, reused = [log for log in trainer.state.log_history if "rspo/gamma_mean" in log]
    for log in (fresh, reused):
        assert 0.7 - 1e-6 <= log["rspo/gamma_min"] <= log["rspo/gamma_mean"] <= 1.0
    assert fresh["rspo/gamma_mean"] == pytest.approx(1.0, abs=1e-6)
    assert fresh["rspo/gamma_floor_fraction"] == 0.0
    assert reused["rspo/gamma_mean"] < 0.95
    assert 0 < reused["rspo/gamma_floor_fraction"] < 1
    assert reused["rspo/gamma_min"] == pytest.approx(0.7, abs=1e-6)


def test_lora_policy_routers_found_and_damped():
    from peft import LoraConfig

    trainer = moe_trainer(
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        num_iterations=2,
        max_steps=2,
        learning_rate=1e-1,
    )
    names = [router.name for router in trainer.pipeline.get("router").routers]
    assert names == [f"base_model.model.model.layers.{layer}.mlp.gate" for layer in range(NUM_LAYERS)]
    trainer.train()
    logs = [log for log in trainer.state.log_history if "rspo/gamma_mean" in log]
    assert logs[0]["rspo/gamma_mean"] == pytest.approx(1.0, abs=1e-6)
    assert logs[1]["rspo/gamma_mean"] < 1.0 - 1e-4  # only attention moved, yet the routers' inputs did
