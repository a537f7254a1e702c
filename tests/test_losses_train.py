"""The new losses inside the real trainer: GSPO against TRL, PPO-KL's β per optimizer step, and a short LoRA run
with an adapter save/reload round trip for every loss in the table."""

import math

import pytest
import torch
import trl
from peft import LoraConfig, PeftModel
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

import trl_zoo
from tests import tiny
from tests.tiny import make_trainer, perturb, relative_error
from tests.trl_internals import generate_and_score, metric_values
from trl_zoo.losses.ppo_kl import BETA


@pytest.mark.parametrize(
    "schedule",
    [dict(num_iterations=2), dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, num_iterations=2)],
    ids=["plain", "accumulation"],
)
def test_gspo_equals_trl_grpo_at_sequence_level(schedule):
    """Same generation batch, models moved off-policy: TRL's grpo(sequence) and trl_zoo's gspo, loss and gradients."""
    reference = make_trainer(
        trl.GRPOTrainer, trl.GRPOConfig, loss_type="grpo", importance_sampling_level="sequence", epsilon=0.02,
        **schedule,
    )
    candidate = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, loss_type="gspo", epsilon=0.02, **schedule)
    torch.manual_seed(0)
    reference.model.train()
    batch = generate_and_score(reference, next(iter(reference.get_train_dataloader())))
    micro_batches = split_tensor_dict(shuffle_sequence_dict(batch), reference.args.steps_per_generation)
    perturb(reference.model)
    perturb(candidate.model)
    candidate.model.train()
    steps = reference.args.gradient_accumulation_steps
    for micro_batch in micro_batches[:steps]:
        losses = []
        for trainer in (reference, candidate):
            trainer.current_gradient_accumulation_steps = steps
            loss = trainer.compute_loss(trainer.model, micro_batch)
            loss.backward()
            losses.append(loss.detach())
        assert torch.isfinite(losses[0]) and relative_error(losses[1], losses[0]) <= 1e-6, losses
    named = dict(reference.model.named_parameters())
    for name, parameter in candidate.model.named_parameters():
        assert relative_error(parameter.grad, named[name].grad) <= 1e-6, name
    clipped = metric_values(candidate)["clip_ratio/region_mean"]
    assert clipped == pytest.approx(metric_values(reference)["clip_ratio/region_mean"], rel=1e-6)
    assert max(clipped) > 0  # the sequence clip really bit


def test_ppo_kl_beta_updates_once_per_optimizer_step():
    """On-policy (no old log-probs) the measured KL is 0 < target/1.5, so β halves once per optimizer step:
    three steps of two micro-batches give β/8 (a per-micro-batch update would give β/64)."""
    trainer = make_trainer(
        trl_zoo.GRPOTrainer,
        trl_zoo.GRPOConfig,
        loss_type="ppo_kl",
        ppo_kl_beta=1.0,
        ppo_kl_target=1e-3,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        max_steps=3,
    )
    trainer.train()
    assert trainer.zoo_state[BETA] == 1 / 8
    logs = [log for log in trainer.state.log_history if BETA in log]
    assert [log[BETA] for log in logs] == [1.0, 0.5, 0.25]
    assert [log["ppo_kl/step_kl"] for log in logs] == [0.0, 0.0, 0.0]


LORA = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM")


@pytest.mark.parametrize("name", trl_zoo.LOSSES.names())
def test_lora_training_and_adapter_roundtrip(name, tmp_path):
    if trl_zoo.LOSSES.get(name).spec.requires_moe:
        pytest.skip(f"{name} needs a mixture-of-experts model (requires_moe)")
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=LoraConfig(**LORA), loss_type=name, num_iterations=2,
        **tiny.required_settings(name),
    )
    trainer.train()
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses), losses
    trainer.model.save_pretrained(tmp_path)
    reloaded = PeftModel.from_pretrained(tiny.model(0), tmp_path).eval()
    base = tiny.model(0).eval()
    trained = trainer.model.eval()
    input_ids = tiny.tokenizer()(["12+34=", "7*8=5"], return_tensors="pt", padding=True).input_ids
    with torch.no_grad():
        trained_logits = trained(input_ids=input_ids).logits
        reloaded_logits = reloaded(input_ids=input_ids).logits
        base_logits = base(input_ids=input_ids).logits
    assert torch.isfinite(trained_logits).all()
    torch.testing.assert_close(reloaded_logits, trained_logits, rtol=0, atol=0)
    assert (trained_logits - base_logits).abs().max() > 1e-4  # the adapter learned something


@pytest.mark.parametrize(
    "name, tight, loose",
    [
        ("m2po", dict(m2po_threshold=1e-4), dict(m2po_threshold=1e3)),
        ("dppo", dict(dppo_mask_low=1e-3, dppo_mask_high=1e-3), dict(dppo_mask_low=0.99, dppo_mask_high=0.99)),
    ],
)
def test_trust_region_masks_act_on_the_trainers_off_policy_batch(name, tight, loose):
    """In the real loss step: nothing masked on-policy, part of the tokens once the policy moved, none with a wide
    region; the masked share is logged."""
    metric = f"{name}/masked_fraction"
    shares = {}
    for label, overrides, moved in (("on_policy", tight, False), ("tight", tight, True), ("loose", loose, True)):
        trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, loss_type=name, num_iterations=2, **overrides)
        torch.manual_seed(0)
        trainer.model.train()
        batch = generate_and_score(trainer, next(iter(trainer.get_train_dataloader())))
        if moved:
            perturb(trainer.model)
        trainer.current_gradient_accumulation_steps = 1
        loss = trainer.compute_loss(trainer.model, batch)
        assert torch.isfinite(loss)
        shares[label] = metric_values(trainer)[metric][-1]
    assert shares["on_policy"] == 0.0 and shares["loose"] == 0.0
    assert 0.05 < shares["tight"] < 0.95, shares
