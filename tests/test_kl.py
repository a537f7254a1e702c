"""KL estimators against their formulas, the adaptive coefficient, KL in the reward, and ProRL reference resets on
real (tiny) LoRA and full-model training runs."""

import math

import pytest
import torch
from peft import LoraConfig

import trl_zoo
from tests.test_advantages import full_logit_policy, generate, one_thread  # noqa: F401  (autouse fixture)
from tests.tiny import make_trainer
from tests.trl_internals import completions_log
from trl_zoo.kl import adaptive_kl_coefficient
from trl_zoo.registry import KL_ESTIMATORS


def lora():
    return LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def perturb_adapter(model, seed=7, scale=0.3):
    """Give the (zero-initialised) LoRA B matrices values, so the policy differs from the base reference."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B.default" in name:
                parameter.copy_(scale * torch.randn(parameter.shape, generator=generator))


# ---------------------------------------------------------------------------------------------------- estimators
def test_estimators_match_their_formulas():
    logps = torch.tensor([-0.1, -2.0, -0.5, -3.0], dtype=torch.float64)
    ref_logps = torch.tensor([-0.3, -1.0, -0.5, -0.2], dtype=torch.float64)
    for i in range(4):
        d = float(logps[i] - ref_logps[i])
        assert KL_ESTIMATORS.get("k1").fn(logps, ref_logps)[i].item() == pytest.approx(d)
        assert KL_ESTIMATORS.get("k2").fn(logps, ref_logps)[i].item() == pytest.approx(d * d / 2)
        assert KL_ESTIMATORS.get("k3").fn(logps, ref_logps)[i].item() == pytest.approx(math.exp(-d) + d - 1)


def test_k3_and_k2_are_nonnegative_everywhere_and_zero_on_the_diagonal():
    d = torch.linspace(-30, 30, 6001, dtype=torch.float64)
    zeros = torch.zeros_like(d)
    assert (KL_ESTIMATORS.get("k3").fn(d, zeros) >= 0).all()
    assert (KL_ESTIMATORS.get("k2").fn(d, zeros) >= 0).all()
    assert (KL_ESTIMATORS.get("k1").fn(d, zeros) < 0).any()  # k1 is unbiased but not a per-sample bound
    same = torch.randn(50, dtype=torch.float64)
    for name in ("k1", "k2", "k3"):
        assert (KL_ESTIMATORS.get(name).fn(same, same) == 0).all()


def test_estimators_are_unbiased_or_not_as_documented():
    """E_{y∼π}[k1] = E[k3] = KL(π‖π_ref) exactly on a categorical; k2 is biased."""
    probs = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    ref = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    exact = (probs * (probs / ref).log()).sum()
    expectation = {
        name: (probs * KL_ESTIMATORS.get(name).fn(probs.log(), ref.log())).sum() for name in ("k1", "k2", "k3")
    }
    torch.testing.assert_close(expectation["k1"], exact)
    torch.testing.assert_close(expectation["k3"], exact)
    assert abs(expectation["k2"] - exact) > 1e-3


def test_adaptive_coefficient_rule():
    assert adaptive_kl_coefficient(0.1, observed_kl=0.016, target=0.01) == pytest.approx(0.2)
    assert adaptive_kl_coefficient(0.1, observed_kl=0.006, target=0.01) == pytest.approx(0.05)
    assert adaptive_kl_coefficient(0.1, observed_kl=0.012, target=0.01) == 0.1
    assert adaptive_kl_coefficient(0.1, observed_kl=0.0149, target=0.01) == 0.1
    assert adaptive_kl_coefficient(0.1, observed_kl=0.0067, target=0.01) == 0.1


# ---------------------------------------------------------------------------------------------------- placement
def test_kl_in_the_reward_moves_the_advantages_and_leaves_the_loss_without_kl():
    beta = 0.5
    trainers = {}
    for placement in ("loss", "reward"):
        trainer = make_trainer(
            trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), advantage_estimator="grpo",
            advantage_epsilon=1e-4, beta=beta, kl_placement=placement, loss_type="grpo",
        )
        perturb_adapter(trainer.model)
        trainers[placement] = (trainer, generate(trainer))
    (in_loss, batch_loss), (in_reward, batch_reward) = trainers["loss"], trainers["reward"]
    torch.testing.assert_close(batch_reward["completion_ids"], batch_loss["completion_ids"])
    mask = batch_reward["completion_mask"]

    # advantages: GRPO's on R − β Σ_t k3_t, from the full-logit policy and TRL's reference log-probs
    policy_logps, _ = full_logit_policy(in_reward.model, batch_reward)
    ref_logps = batch_reward["ref_per_token_logps"].double()
    kl = (torch.exp(ref_logps - policy_logps) - (ref_logps - policy_logps) - 1) * mask
    assert kl.sum(-1).min() > 1e-3
    rewards = torch.tensor(completions_log(in_reward)["rewards"]["digit_reward"])[-mask.size(0) :].double()
    penalised = (rewards - beta * kl.sum(-1)).view(-1, 4)
    expected = (penalised - penalised.mean(1, keepdim=True)) / (penalised.std(1, keepdim=True) + 1e-4)
    torch.testing.assert_close(batch_reward["advantages"].double(), expected.view(-1), rtol=1e-4, atol=1e-5)
    assert (batch_reward["advantages"] - batch_loss["advantages"]).abs().max() > 1e-2

    # loss: the same batch through both trainers differs by exactly β · mean_i (1/T_i) Σ_t k3_t
    in_loss.current_gradient_accumulation_steps = in_reward.current_gradient_accumulation_steps = 1
    loss_with_kl = in_loss.compute_loss(in_loss.model, batch_reward)
    loss_without_kl = in_reward.compute_loss(in_reward.model, batch_reward)
    kl_term = beta * (kl.sum(-1) / mask.sum(-1)).mean()
    torch.testing.assert_close((loss_with_kl - loss_without_kl).double(), kl_term, rtol=1e-4, atol=1e-6)
    policy_term = -(batch_reward["advantages"]).mean()  # on-policy GRPO term: −mean_i Â_i
    torch.testing.assert_close(loss_without_kl, policy_term, rtol=1e-5, atol=1e-6)


def test_kl_options_need_a_coefficient():
    for option in (dict(kl_placement="reward"), dict(kl_target=0.01), dict(ref_reset_steps=2)):
        with pytest.raises(ValueError, match=next(iter(option)) + ": needs a KL coefficient"):
            make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), beta=0.0, **option)
    with pytest.raises(ValueError, match="ref_reset_steps: TRL's sync_ref_model"):
        make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, beta=0.1, ref_reset_steps=2, sync_ref_model=True)


# ---------------------------------------------------------------------------------------------------- per step
def test_adaptive_beta_halves_then_doubles():
    """Full model with a reference copy: step 1 is on the reference (KL = 0 < target/1.5, β halves); step 2 has
    moved away (KL > 1.5·target, β doubles)."""
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, beta=0.2, kl_target=1e-9, learning_rate=3e-2)
    trainer.train()
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert logs[0]["kl"] == pytest.approx(0.0, abs=1e-12) and logs[1]["kl"] > 1.5e-9
    assert [log["kl_coef"] for log in logs] == pytest.approx([0.1, 0.2])
    assert trainer.zoo_state["kl_coef"] == pytest.approx(0.2)
    assert trainer.kl_coefficient == pytest.approx(0.2)


def test_proportional_controller_closed_form():
    """Ziegler et al.'s rule: β·(1 + K·clip(KL/target − 1, ±0.2)); the error saturates at ±0.2."""
    from trl_zoo.kl import proportional_kl_coefficient

    assert proportional_kl_coefficient(0.5, 0.011, 0.01, gain=0.1) == pytest.approx(0.5 * (1 + 0.1 * 0.1))
    assert proportional_kl_coefficient(0.5, 0.009, 0.01, gain=0.1) == pytest.approx(0.5 * (1 - 0.1 * 0.1))
    assert proportional_kl_coefficient(0.5, 10.0, 0.01, gain=0.1) == pytest.approx(0.5 * 1.02)
    assert proportional_kl_coefficient(0.5, 0.0, 0.01, gain=0.1) == pytest.approx(0.5 * 0.98)
    with pytest.raises(ValueError, match="kl_controller_gain"):
        trl_zoo.GRPOConfig(output_dir="unused", bf16=False, kl_controller_gain=0.0)
    with pytest.raises(ValueError, match="kl_controller"):
        trl_zoo.GRPOConfig(output_dir="unused", bf16=False, kl_controller="pid")


def test_proportional_controller_moves_beta_by_the_clipped_error():
    """Step 1 is on the reference (KL = 0: error −0.2, β·(1 − 0.2K)); step 2 has moved far away (error +0.2)."""
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, beta=0.2, kl_target=1e-9, kl_controller="proportional",
        kl_controller_gain=0.5, learning_rate=3e-2,
    )
    trainer.train()
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert logs[0]["kl"] == pytest.approx(0.0, abs=1e-12) and logs[1]["kl"] > 1.2e-9
    assert [log["kl_coef"] for log in logs] == pytest.approx([0.2 * 0.9, 0.2 * 0.9 * 1.1])


def test_reference_reset_with_lora_zeroes_the_next_kl():
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), beta=0.1, ref_reset_steps=1,
        ref_reset_optimizer=True, learning_rate=3e-2,
    )
    perturb_adapter(trainer.model)
    trainer.train()
    logs = [log for log in trainer.state.log_history if "loss" in log]
    model = trainer.model
    assert logs[0]["kl"] > 1e-4  # step 1: against the base model (adapters disabled)
    assert logs[1]["kl"] == pytest.approx(0.0, abs=1e-9)  # step 2: against the copy made after step 1
    assert [log["ref_resets"] for log in logs] == [1.0, 2.0]

    adapters = {}
    for name, parameter in model.named_parameters():
        if ".ref." in name:
            assert not parameter.requires_grad
            adapters[name] = parameter
    assert adapters
    for name, parameter in adapters.items():
        assert torch.equal(parameter, model.get_parameter(name.replace(".ref.", ".default."))), name
    assert model.active_adapter == "default"
    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    assert len(optimizer.state) == 0  # cleared by the last reset

    # the policy really moved: the reset reference differs from the base model
    output = generate(trainer)
    with model.disable_adapter():
        base_logps, _ = full_logit_policy(model, output)
    policy_logps, _ = full_logit_policy(model, output)
    assert (base_logps - policy_logps).abs().max() > 1e-3
    torch.testing.assert_close(
        output["ref_per_token_logps"].double(), policy_logps * output["completion_mask"], atol=1e-5, rtol=1e-5
    )


def test_reference_reset_with_a_reference_model_copies_the_weights():
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, beta=0.1, ref_reset_steps=1, learning_rate=3e-2)
    trainer.train()
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert logs[1]["kl"] == pytest.approx(0.0, abs=1e-9)
    pairs = zip(trainer.ref_model.named_parameters(), trainer.model.named_parameters(), strict=True)
    for (name, ref), (_, policy) in pairs:
        assert torch.equal(ref, policy), name
    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    assert len(optimizer.state) > 0  # ref_reset_optimizer defaults to False


def test_reference_adapter_reset_is_refused_under_zero3_with_what_to_use(monkeypatch):
    from types import SimpleNamespace

    from trl_zoo.components import kl_control

    zero3 = SimpleNamespace(deepspeed_plugin=SimpleNamespace(zero_stage=3))
    monkeypatch.setattr(kl_control, "AcceleratorState", lambda: zero3)
    trainer = SimpleNamespace(args=SimpleNamespace(beta=0.1, ref_reset_steps=2, sync_ref_model=False), ref_model=None)
    with pytest.raises(NotImplementedError, match=r"ref_reset_steps: .*ZeRO-3.*; use ZeRO-2, FSDP2 .* or DDP\."):
        kl_control.check_reference_resets(trainer)
    trainer.ref_model = object()  # a separate reference model is synced by TRL's ZeRO-3-aware callback
    kl_control.check_reference_resets(trainer)
    zero3.deepspeed_plugin.zero_stage = 2
    trainer.ref_model = None
    kl_control.check_reference_resets(trainer)


def test_the_optimizer_step_seam_runs_its_points_in_order():
    """`_on_optimizer_step` runs at GRADIENTS, CLIPPED, UPDATED of every optimizer step, in that order; β (kl_target)
    moves only at UPDATED: halved after each step, its KL being below target/1.5."""
    seen = []

    class Recording(trl_zoo.GRPOTrainer):
        def _on_optimizer_step(self, step):
            super()._on_optimizer_step(step)
            seen.append((step.phase.value, step.global_step, self.zoo_state["kl_coef"]))

    trainer = make_trainer(
        Recording, trl_zoo.GRPOConfig, beta=0.1, kl_target=1.0, max_steps=2, gradient_accumulation_steps=2,
        per_device_train_batch_size=4,
    )
    trainer.train()
    assert seen == [
        ("gradients", 0, 0.1), ("clipped", 0, 0.1), ("updated", 1, 0.05),
        ("gradients", 1, 0.05), ("clipped", 1, 0.05), ("updated", 2, 0.025),
    ]
