"""skip_on_policy_old_logps: with steps_per_generation = 2 x gradient_accumulation_steps and one iteration, TRL's
old-log-prob pass is skipped at generation; the micro-batches of the second optimizer step get old log-probs equal
to TRL's right after the buffer is built, those of the first carry none (their ratio is the policy's own, 1) and
train the same gradient; the reference's pass still runs; half the rows go through an old-log-prob pass; a setting
under which the field can never apply is refused when the user set it and ignored when the recipe did; TRL's
buffer rule and old-log-prob condition as config/generation_buffer.py writes them."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig

import trl_zoo
from tests import tiny
from tests.trl_internals import buffered_micro_batches, metric_values, prepare_micro_batch
from trl_zoo import GRPOConfig
from trl_zoo.components.old_logps import OLD_LOGPS, ROWS
from trl_zoo.config.generation_buffer import (
    buffer_entry,
    entries_trained_on_policy,
    generation_cycle,
    generation_on_policy,
    inside_generation_cycle,
    old_logps_pass_runs,
)
from trl_zoo.config.generation_speed import old_logps_skip_applies
from trl_zoo.hooks import trl_access

ACCUMULATION, STEPS_PER_GENERATION, ROWS_PER_MICRO_BATCH = 2, 4, 4
BATCH_ROWS = STEPS_PER_GENERATION * ROWS_PER_MICRO_BATCH


def _trainer(skip: bool | None, **overrides):
    settings = dict(
        per_device_train_batch_size=ROWS_PER_MICRO_BATCH, num_generations=4, gradient_accumulation_steps=ACCUMULATION,
        steps_per_generation=STEPS_PER_GENERATION, skip_on_policy_old_logps=skip,
    )
    settings.update(overrides)
    return tiny.make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, **settings)


def _buffer(trainer) -> list[dict]:
    """TRL's buffer of one generation batch, built as at the first micro-step of training (same seed each time)."""
    trainer.model.train()
    torch.manual_seed(0)
    prepare_micro_batch(trainer, next(iter(trainer.get_train_dataloader())))
    return buffered_micro_batches(trainer)


@pytest.fixture(scope="module")
def runs():
    """(trainer, buffer) with the field on and off, from the same seed: the same rows in the same micro-batches."""
    result = {}
    for skip in (True, False):
        trainer = _trainer(skip, beta=0.1)
        result[skip] = trainer, _buffer(trainer)
    on, off = result[True][1], result[False][1]
    for mine, trls in zip(on, off):
        assert torch.equal(mine["completion_ids"], trls["completion_ids"])
        assert torch.equal(mine["prompt_ids"], trls["prompt_ids"])
    return result


def test_later_micro_batches_get_trls_old_logps_and_the_first_steps_none(runs):
    (_, on), (_, off) = runs[True], runs[False]
    assert all(OLD_LOGPS in batch for batch in off)  # TRL's pass over the whole batch
    for index, (mine, trls) in enumerate(zip(on, off)):
        if index < ACCUMULATION:
            assert OLD_LOGPS not in mine
        else:
            torch.testing.assert_close(mine[OLD_LOGPS], trls[OLD_LOGPS], atol=1e-5, rtol=0)


def test_the_reference_pass_still_runs(runs):
    (_, on), (_, off) = runs[True], runs[False]
    for mine, trls in zip(on, off):
        assert mine["ref_per_token_logps"] is not None
        torch.testing.assert_close(mine["ref_per_token_logps"], trls["ref_per_token_logps"], atol=1e-5, rtol=0)


def test_half_the_rows_go_through_an_old_logps_pass(runs):
    assert metric_values(runs[True][0])[ROWS] == [BATCH_ROWS / 2]
    assert metric_values(runs[False][0])[ROWS] == [float(BATCH_ROWS)]


def _gradient(trainer, micro_batch) -> dict:
    trainer.model.zero_grad()
    trainer.current_gradient_accumulation_steps = ACCUMULATION
    trainer.compute_loss(trainer.model, micro_batch).backward()
    return {name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.grad is not None}


def test_the_first_steps_gradient_is_trls(runs):
    (trainer_on, on), (trainer_off, off) = runs[True], runs[False]
    for name, parameter in trainer_on.model.named_parameters():  # the same weights (nothing trained yet)
        assert torch.equal(parameter, dict(trainer_off.model.named_parameters())[name])
    for index in range(ACCUMULATION):
        mine, trls = _gradient(trainer_on, on[index]), _gradient(trainer_off, off[index])
        assert mine.keys() == trls.keys() and mine
        for name, gradient in mine.items():
            torch.testing.assert_close(gradient, trls[name], rtol=1e-5, atol=1e-7, msg=name)


def test_trls_buffer_rule_and_old_logps_condition_in_the_configs_numbers():
    args = SimpleNamespace(steps_per_generation=4, num_iterations=2, gradient_accumulation_steps=2, use_vllm=False,
                           vllm_importance_sampling_correction=True)
    assert generation_cycle(args) == 8
    assert [inside_generation_cycle(args, step) for step in (0, 1, 7, 8, 9)] == [False, True, True, False, True]
    assert [buffer_entry(args, step) for step in (0, 3, 4, 9)] == [0, 3, 0, 1]
    assert not generation_on_policy(args) and old_logps_pass_runs(args)  # 2 micro-steps an optimizer step, 8 a cycle
    aligned = SimpleNamespace(**{**vars(args), "gradient_accumulation_steps": 16})
    assert generation_on_policy(aligned) and not old_logps_pass_runs(aligned)
    assert old_logps_pass_runs(SimpleNamespace(**{**vars(aligned), "use_vllm": True}))  # vLLM's correction


def test_on_policy_entries_follow_the_optimizer_step_of_the_generation():
    def entries(steps_per_generation, accumulation, step):
        args = SimpleNamespace(steps_per_generation=steps_per_generation, gradient_accumulation_steps=accumulation)
        return entries_trained_on_policy(args, step)

    assert entries(4, 2, 0) == [True, True, False, False]
    assert entries(4, 2, 8) == [True, True, False, False]
    assert entries(3, 2, 3) == [True, False, False]  # generated in the middle of an optimizer step
    assert entries(4, 2, 2) == [False, False, True, True]  # a resume at the second step lost the buffer


def test_the_door_leaves_trls_pass_alone_where_it_is_off():
    trainer = _trainer(False)
    assert not trainer.pipeline.get("old_logps").skip_on_policy and trl_access.trl_computes_old_logps(trainer)


def test_the_recipe_lora_graphed_sets_the_field_and_lora_does_not():
    assert GRPOConfig(**tiny.config_kwargs(speed_recipe="lora_graphed")).skip_on_policy_old_logps
    assert not GRPOConfig(**tiny.config_kwargs(speed_recipe="lora")).skip_on_policy_old_logps
    assert not GRPOConfig(**tiny.config_kwargs(speed_recipe="lora_compiled", bf16=True)).skip_on_policy_old_logps


@pytest.mark.parametrize("overrides, setting", [
    ({"num_iterations": 2}, "num_iterations > 1"),
    ({"steps_per_generation": ACCUMULATION}, "gradient_accumulation_steps a multiple of steps_per_generation"),
    ({"teacher_model": "self"}, "teacher_model"),
    ({"kl_placement": "reward", "beta": 0.1}, "kl_placement='reward'"),
])
def test_a_setting_it_cannot_apply_under_is_refused_when_the_user_set_it(overrides, setting):
    settings = {"gradient_accumulation_steps": ACCUMULATION, "steps_per_generation": STEPS_PER_GENERATION, **overrides}
    with pytest.raises(ValueError) as error:
        GRPOConfig(**tiny.config_kwargs(skip_on_policy_old_logps=True, **settings))
    message = str(error.value)
    assert message.startswith(f"skip_on_policy_old_logps: not with {setting} (")
    assert message.endswith("; set skip_on_policy_old_logps=False.") and "\n" not in message
    by_recipe = GRPOConfig(**tiny.config_kwargs(speed_recipe="lora_graphed", **settings))
    assert by_recipe.skip_on_policy_old_logps and not old_logps_skip_applies(by_recipe, requires_moe=False)


def test_with_two_iterations_from_the_recipe_trls_pass_runs():
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    trainer = _trainer(None, num_iterations=2, speed_recipe="lora_graphed", peft_config=lora)  # the recipe's
    assert trainer.args.skip_on_policy_old_logps and not trainer.pipeline.get("old_logps").skip_on_policy
    buffer = _buffer(trainer)
    assert all(OLD_LOGPS in batch for batch in buffer)
    assert metric_values(trainer)[ROWS] == [float(BATCH_ROWS)]


def test_a_short_run_with_the_field_on_has_a_finite_loss(tmp_path):
    trainer = _trainer(True, max_steps=4, output_dir=str(tmp_path / "run"))
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 4 and all(math.isfinite(loss) for loss in losses)
    rows = [entry[ROWS] for entry in trainer.state.log_history if ROWS in entry]
    assert rows and all(value == BATCH_ROWS / 2 for value in rows)


def test_the_peft_reference_pass_on_the_policy_itself_still_runs():
    """With a PEFT adapter the reference's pass is a second call on the policy (adapter off), after the skipped one;
    at initialisation (LoRA's B = 0) the policy's old log-probs equal the reference's."""
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    trainer = _trainer(True, beta=0.1, peft_config=lora)
    buffer = _buffer(trainer)
    assert metric_values(trainer)[ROWS] == [BATCH_ROWS / 2]
    for index, batch in enumerate(buffer):
        assert batch["ref_per_token_logps"] is not None and torch.isfinite(batch["ref_per_token_logps"]).all()
        if index >= ACCUMULATION:
            torch.testing.assert_close(batch[OLD_LOGPS], batch["ref_per_token_logps"], atol=1e-5, rtol=0)


def test_dynamic_sampling_rounds_skip_the_pass_and_trained_rows_get_old_logps():
    from tests.scripts.resample_two_processes import half_constant_reward

    trainer = _trainer(True, reward_funcs=half_constant_reward, dynamic_sampling="resample",
                       dynamic_sampling_max_rounds=20)
    buffer = _buffer(trainer)
    assert [OLD_LOGPS in batch for batch in buffer] == [False, False, True, True]
    assert metric_values(trainer)[ROWS] == [BATCH_ROWS / 2]


def test_a_resume_inside_the_generation_batch_trains_the_same_second_step(tmp_path):
    """The checkpoint after the first optimizer step holds the buffer with the second step's old log-probs."""
    options = dict(max_steps=2, save_strategy="steps", save_steps=1, output_dir=str(tmp_path / "run"))
    full = _trainer(True, **options)
    full.train()
    resumed = _trainer(True, **options)
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-1"))

    def second_step_loss(trainer):
        return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry and entry["step"] == 2]

    assert second_step_loss(resumed) == pytest.approx(second_step_loss(full), rel=1e-5)
    assert len(second_step_loss(full)) == 1
    assert [OLD_LOGPS in batch for batch in buffered_micro_batches(resumed)] == [False, False, True, True]


# --------------------------------------------------------------------------------------------- under vLLM's correction
def _vllm_runs(monkeypatch, mode: str, clip_max: float) -> dict:
    """(trainer, buffer) with the field on and off, TRL's vLLM path through the stand-in, whose log-probs sit
    0.05 · (id mod 4) below the policy's, so every row carries its own correction."""
    from tests import vllm_stand_in
    from tests.test_vllm_paths import token_offset

    vllm_stand_in.install(monkeypatch, logprob_offset=token_offset)
    correction = dict(use_vllm=True, vllm_mode="colocate", vllm_importance_sampling_correction=True,
                      vllm_importance_sampling_mode=mode, vllm_importance_sampling_clip_max=clip_max)
    result = {}
    for skip in (True, False):
        trainer = _trainer(skip, **correction)
        result[skip] = trainer, _buffer(trainer)
    for mine, trls in zip(result[True][1], result[False][1]):
        assert torch.equal(mine["completion_ids"], trls["completion_ids"])
    return result


@pytest.mark.parametrize(
    "mode,clip_max",
    [("token_truncate", 1.1), ("token_mask", 1.1), ("sequence_truncate", 1.8), ("sequence_mask", 1.8)],
)
def test_under_vllms_correction_every_micro_batch_trains_trls_loss_and_gradient(monkeypatch, mode, clip_max):
    runs = _vllm_runs(monkeypatch, mode, clip_max)
    (trainer_on, on), (trainer_off, off) = runs[True], runs[False]
    assert trainer_on.pipeline.get("old_logps").defers_correction
    assert metric_values(trainer_on)[ROWS] == [BATCH_ROWS / 2]
    ratios = torch.cat([batch["importance_sampling_ratio"].flatten() for batch in off])
    assert ratios.unique().numel() > 2 and (ratios != 1).any()  # the correction is not the identity here
    for index, (mine, trls) in enumerate(zip(on, off)):
        if index < ACCUMULATION:  # deferred to the loss forward
            assert OLD_LOGPS not in mine and "importance_sampling_ratio" not in mine
        else:
            torch.testing.assert_close(mine["importance_sampling_ratio"], trls["importance_sampling_ratio"],
                                       atol=1e-5, rtol=1e-5)
        trained, expected = _gradient(trainer_on, mine), _gradient(trainer_off, trls)
        assert trained.keys() == expected.keys() and trained
        for name, gradient in trained.items():
            torch.testing.assert_close(gradient, expected[name], rtol=1e-4, atol=1e-6, msg=f"{index} {name}")


def test_under_vllms_correction_trls_metrics_are_logged_over_the_rows(monkeypatch):
    runs = _vllm_runs(monkeypatch, "token_truncate", 1.1)
    (trainer_on, on), (trainer_off, _) = runs[True], runs[False]
    trainer_on.current_gradient_accumulation_steps = ACCUMULATION
    for batch in on[:ACCUMULATION]:
        trainer_on.compute_loss(trainer_on.model, batch)
    mine, trls = metric_values(trainer_on), metric_values(trainer_off)
    name = "sampling/importance_sampling_ratio/max"
    assert len(mine[name]) == STEPS_PER_GENERATION  # one value per micro-batch, each half computed where it is known
    assert max(mine[name]) == pytest.approx(trls[name][0], abs=1e-5)  # TRL's: over the whole batch at once
    assert max(mine["sampling/sampling_logp_difference/max"]) == pytest.approx(
        trls["sampling/sampling_logp_difference/max"][0], abs=1e-5)


def test_a_micro_batch_without_its_correction_is_refused_where_none_was_deferred(monkeypatch):
    runs = _vllm_runs(monkeypatch, "token_truncate", 1.1)
    trainer_off, off = runs[False]
    batch = {key: value for key, value in off[0].items() if key != "importance_sampling_ratio"}
    trainer_off.current_gradient_accumulation_steps = ACCUMULATION
    with pytest.raises(KeyError, match="importance_sampling_ratio"):
        trainer_off.compute_loss(trainer_off.model, batch)
