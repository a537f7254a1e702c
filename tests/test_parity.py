"""Parity: for every loss TRL ships, trl_zoo's trainer gives TRL's loss and gradients on the same batch.

Both trainers start from the same tiny model. TRL's trainer generates and scores one generation batch; both
models are then moved by the same random perturbation (so the batch is off-policy and the clips bite), and every
micro-batch goes through both `compute_loss` + `backward`, accumulating gradients as the training loop does.
"""

import pytest
import torch
import trl
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

import trl_zoo
from tests.tiny import make_trainer, perturb, relative_error
from tests.trl_internals import generate_and_score, last_world_entropy, metric_values

TRL_LOSSES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]

SCHEDULES = {
    "plain": dict(),
    "accumulation": dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, num_iterations=2),
    "steps_per_generation": dict(
        per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=4, num_iterations=2
    ),
    "masked_truncation": dict(mask_truncated_completions=True, num_iterations=2, max_completion_length=6),
}


def run_parity(**config):
    reference = make_trainer(trl.GRPOTrainer, trl.GRPOConfig, **config)
    candidate = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, **config)
    args = reference.args
    torch.manual_seed(0)
    generation_batch = next(iter(reference.get_train_dataloader()))
    reference.model.train()
    batch = generate_and_score(reference, generation_batch)
    batch = shuffle_sequence_dict(batch)
    micro_batches = split_tensor_dict(batch, args.steps_per_generation)
    if args.num_iterations > 1 or "old_per_token_logps" in batch:
        perturb(reference.model)
        perturb(candidate.model)
    candidate.model.train()
    steps = args.gradient_accumulation_steps
    losses = []
    for index, micro_batch in enumerate(micro_batches[:steps]):
        for trainer in (reference, candidate):
            trainer.current_gradient_accumulation_steps = steps
            loss = trainer.compute_loss(trainer.model, micro_batch)
            loss.backward()
            losses.append(loss.detach())
        assert torch.isfinite(losses[-1])
        assert relative_error(losses[-1], losses[-2]) <= 1e-6, (index, losses[-2], losses[-1])
    named = dict(reference.model.named_parameters())
    checked = 0
    for name, parameter in candidate.model.named_parameters():
        if parameter.grad is None:
            assert named[name].grad is None
            continue
        assert relative_error(parameter.grad, named[name].grad) <= 1e-6, name
        checked += 1
    assert checked > 0
    return reference, candidate


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("loss_type", TRL_LOSSES)
def test_loss_and_gradients_match_trl(loss_type, schedule):
    config = dict(loss_type=loss_type, **SCHEDULES[schedule])
    if loss_type == "cispo":
        config["epsilon_high"] = 1.05  # an absolute cap that bites after the perturbation
    run_parity(**config)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "cispo", "sapo", "luspo"])
def test_sequence_level_importance_sampling_matches_trl(loss_type):
    run_parity(loss_type=loss_type, importance_sampling_level="sequence", num_iterations=2)


def test_trl_features_match_trl():
    """KL to the reference, entropy masking, off-policy masking, two-sided clip and an entropy bonus together."""
    reference, candidate = run_parity(
        loss_type="grpo",
        beta=0.04,
        top_entropy_quantile=0.5,
        off_policy_mask_threshold=0.01,
        delta=1.2,
        entropy_coef=0.01,
        num_iterations=2,
    )
    assert metric_values(candidate)["kl"] == pytest.approx(metric_values(reference)["kl"], rel=1e-6)
    assert metric_values(candidate)["entropy"] == pytest.approx(metric_values(reference)["entropy"], rel=1e-6)


def test_clip_metrics_match_trl():
    reference, candidate = run_parity(loss_type="dapo", epsilon=0.02, epsilon_high=0.02, num_iterations=2)
    for name in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "clip_ratio/high_max"):
        assert metric_values(candidate)[name] == pytest.approx(metric_values(reference)[name], rel=1e-6)
    assert max(metric_values(reference)["clip_ratio/region_mean"]) > 0  # the clip really bit


def test_training_runs_match_trl():
    """Three full optimizer steps through `train()`: same logged losses and the same final weights."""
    config = dict(loss_type="dapo", max_steps=3, gradient_accumulation_steps=2, per_device_train_batch_size=4)
    reference = make_trainer(trl.GRPOTrainer, trl.GRPOConfig, **config)
    candidate = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, **config)
    torch.manual_seed(0)
    reference.train()
    torch.manual_seed(0)
    candidate.train()
    reference_losses = [log["loss"] for log in reference.state.log_history if "loss" in log]
    candidate_losses = [log["loss"] for log in candidate.state.log_history if "loss" in log]
    assert candidate_losses == pytest.approx(reference_losses, rel=1e-5, abs=1e-7)
    for (name, a), b in zip(candidate.model.named_parameters(), reference.model.parameters()):
        assert relative_error(a.detach(), b.detach()) <= 1e-5, name


def test_adaptive_entropy_controller_matches_trl():
    """TRL's adaptive entropy bonus through `train()`: the coefficient moves once per optimizer step (here up by δ
    each step, the entropy being below its target) and the losses and weights stay TRL's."""
    config = dict(
        loss_type="dapo", max_steps=3, gradient_accumulation_steps=2, per_device_train_batch_size=4,
        use_adaptive_entropy=True, entropy_coef=0.05, entropy_coef_delta=0.01, entropy_target=10.0,
    )
    reference = make_trainer(trl.GRPOTrainer, trl.GRPOConfig, **config)
    candidate = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, **config)
    torch.manual_seed(0)
    reference.train()
    torch.manual_seed(0)
    candidate.train()
    coefficients = [log["entropy_coef"] for log in candidate.state.log_history if "entropy_coef" in log]
    assert coefficients == pytest.approx([0.06, 0.07, 0.08], abs=1e-9)
    assert coefficients == [log["entropy_coef"] for log in reference.state.log_history if "entropy_coef" in log]
    assert candidate.entropy_coef == reference.entropy_coef
    assert last_world_entropy(candidate) == pytest.approx(last_world_entropy(reference), rel=1e-6)
    reference_losses = [log["loss"] for log in reference.state.log_history if "loss" in log]
    candidate_losses = [log["loss"] for log in candidate.state.log_history if "loss" in log]
    assert candidate_losses == pytest.approx(reference_losses, rel=1e-5, abs=1e-7)
    for (name, a), b in zip(candidate.model.named_parameters(), reference.model.parameters()):
        assert relative_error(a.detach(), b.detach()) <= 1e-5, name
