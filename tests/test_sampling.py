"""Dynamic sampling on one process: resample trains only on groups with reward spread, in batches of exactly the
configured size; exhausted sampling fills (with a warning) or raises; reweight zeroes the zero-spread groups and
scales the others by 1/(1 − p)."""

import warnings

import pytest
import torch

import trl_zoo
from tests.scripts.resample_two_processes import describe, grpo_advantages, half_constant_reward
from tests.tiny import TEST_OUTPUT_DIR, make_trainer
from tests.trl_internals import AfterGenerationBatch, generate_and_score, metric_values
from trl_zoo.reward_shaping import soft_overlong_punishment
from trl_zoo.samplers.base import FILL_WARNING, DynamicSamplingExhausted, group_reward_spread

GROUP_SIZE = 4


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


class Recording(AfterGenerationBatch, trl_zoo.GRPOTrainer):
    """Keeps every trained generation batch, and checks its old log-probs against a fresh forward of its rows."""

    def after_generation_batch(self, batch):
        if self.model.training:
            self.recorded.append(describe(self, batch))
            if "old_per_token_logps" in batch:
                with torch.no_grad():
                    logps = self._policy_forward(self.model, batch, compute_entropy=False).logps
                mask = batch["completion_mask"].bool()
                self.old_logp_error = max(
                    self.old_logp_error, (logps - batch["old_per_token_logps"])[mask].abs().max().item()
                )


def first_generation_batch(trainer):
    torch.manual_seed(0)
    trainer.model.train()
    return next(iter(trainer.get_train_dataloader()))


def test_group_reward_spread_ignores_missing_rewards():
    nan = float("nan")
    rewards = torch.tensor(
        [1, 1, 1, 1, 0, 1, 0, 0, 2, nan, 2, 2, 3, nan, nan, nan, nan, nan, nan, nan, 0.5, 0.5, nan, 0.25]
    )
    assert group_reward_spread(rewards, 4).tolist() == [False, True, False, False, False, True]


def test_resample_trains_only_groups_with_spread_in_full_batches():
    trainer = make_trainer(
        Recording,
        trl_zoo.GRPOConfig,
        reward_funcs=half_constant_reward,
        dynamic_sampling="resample",
        dynamic_sampling_max_rounds=20,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        steps_per_generation=2,
        num_iterations=2,
        max_steps=4,
        max_completion_length=6,
    )
    trainer.recorded, trainer.old_logp_error = [], 0.0
    trainer.train()

    assert len(trainer.recorded) == 2  # a generation every steps_per_generation × num_iterations = 4 micro-steps
    for batch in trainer.recorded:
        prompts, completions = batch["prompts"], batch["completions"]
        assert len(prompts) == trainer.args.generation_batch_size == 8
        rewards = half_constant_reward(prompts, completions)
        for start in range(0, len(prompts), GROUP_SIZE):
            group = slice(start, start + GROUP_SIZE)
            assert len(set(prompts[group])) == 1
            assert int(prompts[start].split("+")[0]) % 2 == 1  # the zero-spread prompts never reach training
            assert max(rewards[group]) > min(rewards[group])
        assert batch["advantages"] == pytest.approx(grpo_advantages(rewards, GROUP_SIZE), abs=1e-4)
        assert batch["num_items_in_batch"] == batch["mask_tokens"]
    assert trainer.old_logp_error < 1e-5  # old log-probs travelled with their rows

    logged = [row for row in trainer.state.log_history if "dynamic_sampling/generation_rounds" in row]
    assert logged
    for row in logged:  # every round of 2 groups; an even prompt is one of the 8 of 16, so rounds > 1 is typical
        assert row["dynamic_sampling/generated_per_trained"] == pytest.approx(
            row["dynamic_sampling/generation_rounds"]
        )
        assert row["dynamic_sampling/informative_share"] * row["dynamic_sampling/generation_rounds"] >= 1.0 - 1e-6


@pytest.mark.parametrize("on_exhausted", ["fill", "raise"])
def test_exhausted_sampling_fills_with_a_warning_or_raises(on_exhausted):
    # The soft overlong punishment makes the total rewards differ, but it is not a task reward: still no spread.
    trainer = make_trainer(
        trl_zoo.GRPOTrainer,
        trl_zoo.GRPOConfig,
        reward_funcs=constant_reward,
        dynamic_sampling="resample",
        dynamic_sampling_max_rounds=2,
        dynamic_sampling_on_exhausted=on_exhausted,
        overlong_buffer_length=4,
        max_completion_length=6,
    )
    inputs = first_generation_batch(trainer)
    if on_exhausted == "raise":
        with pytest.raises(
            DynamicSamplingExhausted, match="dynamic_sampling_max_rounds: after 2 generation rounds only 0"
        ):
            generate_and_score(trainer, inputs)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own filter: the same text from the same place is shown once
        batch = generate_and_score(trainer, inputs)
        generate_and_score(trainer, first_generation_batch(trainer))
    assert [str(w.message) for w in caught if "dynamic_sampling" in str(w.message)] == [FILL_WARNING]
    assert batch["completion_ids"].size(0) == 8
    # the punishment still shapes the advantages (it is part of the reward), here alone
    lengths = batch["completion_mask"].sum(1).tolist()
    rewards = [1.0 + soft_overlong_punishment(length, 6, 4) for length in lengths]
    assert batch["advantages"].tolist() == pytest.approx(grpo_advantages(rewards, GROUP_SIZE), abs=1e-4)
    assert batch["num_items_in_batch"].item() == batch["completion_mask"].sum().item()
    metrics = metric_values(trainer)
    assert metrics["dynamic_sampling/generation_rounds"][-1] == 2
    assert metrics["dynamic_sampling/filled_groups"][-1] == 2
    assert metrics["dynamic_sampling/informative_share"][-1] == 0
    overlong = metrics["rewards/soft_overlong_punishment/std"]
    assert any(value > 0 for value in overlong)  # the total reward did vary inside groups


def test_reweight_zeroes_zero_spread_groups_and_scales_the_rest():
    trainer = make_trainer(
        trl_zoo.GRPOTrainer,
        trl_zoo.GRPOConfig,
        reward_funcs=half_constant_reward,
        dynamic_sampling="reweight",
        per_device_train_batch_size=8,
        steps_per_generation=2,
        max_completion_length=6,
    )
    inputs = first_generation_batch(trainer)
    sampler = trainer.pipeline.get("dynamic_sampling").sampler
    trainer.pipeline.get("dynamic_sampling").sampler = None  # TRL's batch
    torch.manual_seed(1)
    plain = generate_and_score(trainer, [dict(row) for row in inputs])
    trainer.pipeline.get("dynamic_sampling").sampler = sampler
    torch.manual_seed(1)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="dynamic_sampling")  # reweight never generates more, never warns
        reweighted = generate_and_score(trainer, [dict(row) for row in inputs])

    assert torch.equal(plain["completion_ids"], reweighted["completion_ids"])  # same rows, same size
    even = torch.tensor([int(row["prompt"].split("+")[0]) % 2 == 0 for row in inputs])
    dropped = even.view(-1, GROUP_SIZE)[:, 0].float().mean().item()
    assert 0 < dropped < 1, "the batch should mix prompts with and without spread"
    expected = torch.where(even, 0.0, plain["advantages"] / (1 - dropped))
    assert torch.allclose(reweighted["advantages"], expected, rtol=1e-6, atol=0)
    assert torch.all(reweighted["advantages"][even] == 0) and torch.all(reweighted["advantages"][~even] != 0)
    assert metric_values(trainer)["dynamic_sampling/informative_share"][-1] == pytest.approx(1 - dropped)
    assert metric_values(trainer)["dynamic_sampling/generated_per_trained"][-1] == pytest.approx(1 / (1 - dropped))


def test_reweight_on_batches_without_spread_logs_numbers_only():
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=constant_reward, dynamic_sampling="reweight",
        logging_steps=1,
    )
    trainer.train()
    logged = [log for log in trainer.state.log_history if "dynamic_sampling/informative_share" in log]
    assert len(logged) == 2 and all(log["dynamic_sampling/informative_share"] == 0 for log in logged)
    for log in logged:
        assert "dynamic_sampling/generated_per_trained" not in log  # no group trained: no ratio
        assert all(value is not None and value == value for value in log.values())


def test_unknown_sampler_is_a_config_error():
    with pytest.raises(ValueError, match="dynamic_sampling: unknown sampler 'resampel'. Did you mean 'resample'"):
        trl_zoo.GRPOConfig(output_dir=TEST_OUTPUT_DIR, dynamic_sampling="resampel", use_cpu=True, report_to="none")
