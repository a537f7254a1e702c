"""length_bucketing: micro-batches re-cut by length inside each optimizer step give the same loss and gradient per
optimizer step as TRL's micro-batches, for every grouping-invariant aggregation, with fewer padded token slots;
aggregations and terms normalised per micro-batch are refused with one line."""

import math

import pytest
import torch
from datasets import Dataset
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

import trl_zoo
from tests.scripts.resample_two_processes import half_constant_reward
from tests.tiny import make_trainer, perturb
from tests.trl_internals import (
    buffered_micro_batches,
    drop_generation_buffer,
    generate_and_score,
    metric_values,
    pad_token_id,
    prepare_micro_batch,
    replace_generate_and_score,
    set_micro_step,
)
from trl_zoo.components.length_bucketing import SLOTS, SLOTS_UNBUCKETED, token_slots
from trl_zoo.config.compute import check_length_bucketing
from trl_zoo.config.run_plan import RunPlan
from trl_zoo.hooks.batch_layout import trim_padding

# prompts of 4 to 11 characters; even first numbers give zero-spread groups under half_constant_reward
PROMPTS = ["1+2=", "23+4567=", "345+6=", "7+891011=", "12+3=", "4+56789012=", "5678+9=", "6+7="]
MAX_COMPLETION = 16
COMPLETION_LENGTHS = [16, 1, 9, 3, 14, 2, 6, 11, 4, 16, 1, 8, 13, 5, 2, 7]  # one per row of a 16-row batch


def _use_loss(trainer, name):
    trainer.args.loss_type = name
    trainer.plan = RunPlan.of(trainer.args)


def _trainer(**overrides):
    settings = dict(
        length_bucketing=True, per_device_train_batch_size=4, num_generations=4, steps_per_generation=4,
        gradient_accumulation_steps=4, max_completion_length=MAX_COMPLETION,
    )
    settings.update(overrides)
    return make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, dataset=Dataset.from_dict({"prompt": PROMPTS}), **settings
    )


def _generation_batch(trainer) -> dict:
    """One scored generation batch (16 rows) whose completions are cut to COMPLETION_LENGTHS tokens."""
    torch.manual_seed(0)
    trainer.model.train()
    batch = generate_and_score(trainer, next(iter(trainer.get_train_dataloader())))
    rows, width = batch["completion_ids"].shape
    assert (rows, width) == (len(COMPLETION_LENGTHS), MAX_COMPLETION)
    real = torch.arange(width).unsqueeze(0) < torch.tensor(COMPLETION_LENGTHS).unsqueeze(1)
    batch["completion_mask"] = real.to(batch["completion_mask"].dtype)
    batch["completion_ids"] = batch["completion_ids"].masked_fill(~real, pad_token_id(trainer))
    batch["num_items_in_batch"] = batch["completion_mask"].sum()
    return batch


def _trl_buffer(trainer, batch) -> list[dict]:
    torch.manual_seed(3)
    return split_tensor_dict(shuffle_sequence_dict(batch), trainer.args.steps_per_generation)


def _per_step_losses_and_gradients(trainer, micro_batches):
    accumulation = trainer.args.gradient_accumulation_steps
    trainer.current_gradient_accumulation_steps = accumulation
    results = []
    for start in range(0, len(micro_batches), accumulation):
        trainer.model.zero_grad()
        loss = 0.0
        for micro_batch in micro_batches[start : start + accumulation]:
            step_loss = trainer.compute_loss(trainer.model, micro_batch)
            step_loss.backward()
            loss = loss + step_loss.detach()
        gradients = {name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.grad is not None}
        results.append((loss, gradients))
    return results


def _assert_steps_close(measured, expected, steps: int, loss_tolerance=(1e-4, 1e-6), gradient_tolerance=(1e-4, 1e-6)):
    """`steps` optimizer steps of (loss, gradients), each `measured` one `expected`'s within (rtol, atol); the
    expected loss not 0 and some gradient there."""
    assert len(expected) == len(measured) == steps
    for (loss, gradients), (expected_loss, expected_gradients) in zip(measured, expected):
        assert expected_loss != 0
        torch.testing.assert_close(loss, expected_loss, rtol=loss_tolerance[0], atol=loss_tolerance[1])
        assert gradients.keys() == expected_gradients.keys() and gradients
        for name, gradient in gradients.items():
            rtol, atol = gradient_tolerance
            torch.testing.assert_close(gradient, expected_gradients[name], rtol=rtol, atol=atol, msg=name)


def _assert_same_steps(trainer, plain, bucketed):
    expected = _per_step_losses_and_gradients(trainer, plain)
    measured = _per_step_losses_and_gradients(trainer, bucketed)
    _assert_steps_close(measured, expected, len(plain) // trainer.args.gradient_accumulation_steps)


def _lengths(micro_batch) -> list[tuple[int, int]]:
    return list(zip(micro_batch["prompt_mask"].sum(1).tolist(), micro_batch["completion_mask"].sum(1).tolist()))


def _expected_slots(plain, block) -> int:
    """Rows sorted by prompt + completion length inside each block, each micro-batch as wide as its longest prompt
    plus its longest completion."""
    size = plain[0]["completion_ids"].size(0)
    slots = 0
    for start in range(0, len(plain), block):
        rows = [pair for batch in plain[start : start + block] for pair in _lengths(batch)]
        rows = sorted(rows, key=sum)  # stable, like the hook's sort
        for position in range(block):
            chunk = rows[position * size : (position + 1) * size]
            slots += size * (max(p for p, _ in chunk) + max(c for _, c in chunk))
    return slots


@pytest.fixture(scope="module", params=[(4, 4), (4, 2)], ids=["spg4-ga4", "spg4-ga2"])
def setup(request):
    steps_per_generation, accumulation = request.param
    trainer = _trainer(steps_per_generation=steps_per_generation, gradient_accumulation_steps=accumulation)
    batch = _generation_batch(trainer)
    perturb(trainer.model)  # π_θ ≠ π_old: ratios ≠ 1 where TRL keeps old log-probs (spg > ga)
    plain = _trl_buffer(trainer, batch)
    return trainer, plain, trainer.pipeline.get("length_bucketing").bucketed(plain)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "gspo"])
def test_optimizer_steps_unchanged(setup, loss_type):
    trainer, plain, bucketed = setup
    _use_loss(trainer, loss_type)
    check_length_bucketing(trainer.plan.loss_entry, trainer.args)  # accepted: no ValueError
    _assert_same_steps(trainer, plain, bucketed)


def test_rows_stay_in_their_optimizer_step_and_sorted(setup):
    trainer, plain, bucketed = setup
    accumulation = trainer.args.gradient_accumulation_steps
    block = math.gcd(trainer.args.steps_per_generation, accumulation)
    assert block == accumulation
    for start in range(0, len(plain), block):
        before = sorted(pair for batch in plain[start : start + block] for pair in _lengths(batch))
        after = [pair for batch in bucketed[start : start + block] for pair in _lengths(batch)]
        assert sorted(after) == before  # the same rows in the same optimizer step
        assert [sum(pair) for pair in after] == sorted(sum(pair) for pair in after)
    for plain_batch, bucketed_batch in zip(plain, bucketed):
        assert bucketed_batch["num_items_in_batch"] == plain_batch["num_items_in_batch"]
        for key in ("completion_mask", "old_per_token_logps", "ref_per_token_logps", "advantages"):
            if isinstance(plain_batch.get(key), torch.Tensor) and plain_batch[key].dim() == 2:
                assert bucketed_batch[key].shape == bucketed_batch["completion_ids"].shape, key


def test_token_slots_strictly_fewer(setup):
    trainer, plain, bucketed = setup
    size = plain[0]["completion_ids"].size(0)
    longest_prompt = max(p for batch in plain for p, _ in _lengths(batch))
    assert token_slots(plain) == len(plain) * size * (longest_prompt + MAX_COMPLETION)
    block = math.gcd(trainer.args.steps_per_generation, trainer.args.gradient_accumulation_steps)
    assert token_slots(bucketed) == _expected_slots(plain, block)
    assert token_slots(bucketed) < token_slots(plain)


def test_prepare_inputs_returns_the_bucketed_buffer_for_every_iteration():
    trainer = _trainer(num_iterations=2)
    batch = _generation_batch(trainer)
    calls = []

    def generate(inputs):
        calls.append(1)
        return {key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in batch.items()}

    replace_generate_and_score(trainer, generate)
    drop_generation_buffer(trainer)
    set_micro_step(trainer, 0)
    torch.manual_seed(3)
    first = prepare_micro_batch(trainer, None)
    buffer = buffered_micro_batches(trainer)  # what components/resume.py saves inside the generation cycle
    assert first is buffer[0]
    torch.manual_seed(3)
    plain = split_tensor_dict(shuffle_sequence_dict(generate(None)), 4)
    assert token_slots(buffer) == _expected_slots(plain, 4) < token_slots(plain)
    assert metric_values(trainer)[SLOTS] == [float(token_slots(buffer))]
    assert metric_values(trainer)[SLOTS_UNBUCKETED] == [float(token_slots(plain))]
    for step in range(1, 8):  # the rest of this generation batch's two iterations reuse the buffer
        set_micro_step(trainer, step)
        assert prepare_micro_batch(trainer, None) is buffer[step % 4]
    assert len(calls) == 2 and len(metric_values(trainer)[SLOTS]) == 1


def test_composes_with_skip_zero_advantage_and_two_iterations():
    trainer = _trainer(
        reward_funcs=half_constant_reward, skip_zero_advantage=True, num_iterations=2, gradient_accumulation_steps=2
    )
    assert trainer.pipeline.get("skip_zero_advantage").active and trainer.pipeline.get("length_bucketing").active
    batch = _generation_batch(trainer)
    assert "old_per_token_logps" in batch
    assert torch.any(batch["advantages"] == 0) and torch.any(batch["advantages"] != 0)
    perturb(trainer.model)
    plain = _trl_buffer(trainer, batch)
    bucketed = trainer.pipeline.get("length_bucketing").bucketed(plain)
    trainer.pipeline.get("skip_zero_advantage").active = False
    expected = _per_step_losses_and_gradients(trainer, plain)
    trainer.pipeline.get("skip_zero_advantage").active = True
    measured = _per_step_losses_and_gradients(trainer, bucketed)
    for (loss, gradients), (expected_loss, expected_gradients) in zip(measured, expected):
        torch.testing.assert_close(loss, expected_loss, rtol=1e-4, atol=1e-6)
        for name, gradient in gradients.items():
            torch.testing.assert_close(gradient, expected_gradients[name], rtol=1e-4, atol=1e-6, msg=name)


def test_one_micro_batch_per_step_and_generation_is_a_no_op():
    trainer = _trainer(steps_per_generation=1, gradient_accumulation_steps=1, per_device_train_batch_size=16)
    batch = _generation_batch(trainer)
    plain = split_tensor_dict(shuffle_sequence_dict(batch), 1)
    bucketed = trainer.pipeline.get("length_bucketing").bucketed(plain)
    assert token_slots(bucketed) == token_slots(plain)
    assert bucketed[0].keys() == plain[0].keys()
    for key, value in plain[0].items():
        assert torch.equal(bucketed[0][key], value), key  # TRL padded the one micro-batch to its own longest rows


def test_trim_respects_pad_to_multiple_of():
    batch = {
        "prompt_ids": torch.tensor([[0, 0, 0, 0, 0, 7, 8], [0, 0, 0, 0, 6, 7, 8]]),
        "prompt_mask": torch.tensor([[0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 1, 1, 1]]),
        "completion_ids": torch.tensor([[5, 0, 0, 0, 0, 0], [5, 5, 5, 5, 5, 0]]),
        "completion_mask": torch.tensor([[1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]]),
    }
    layouts = {"prompt_ids": ("left", 0), "prompt_mask": ("left", 0), "completion_ids": ("right", 0),
               "completion_mask": ("right", 0)}
    trimmed = trim_padding(dict(batch), layouts, pad_token=0, multiple=4)
    assert trimmed["prompt_ids"].tolist() == [[0, 0, 7, 8], [0, 6, 7, 8]]  # 3 used columns, rounded up to 4
    assert trimmed["completion_mask"].size(1) == 6  # 5 used, rounded up to 8, capped at the width 6
    trimmed = trim_padding(dict(batch), layouts, pad_token=0, multiple=None)
    assert trimmed["prompt_ids"].size(1) == 3 and trimmed["completion_ids"].size(1) == 5


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(loss_type="bnpo"), r"^length_bucketing: the aggregation 'token_mean_local' \(loss 'bnpo'\)"),
        (dict(loss_aggregation="token_mean_local"), r"^length_bucketing: the aggregation 'token_mean_local'"),
        (dict(loss_type="clip_cov"), r"^length_bucketing: the loss 'clip_cov' is not row-local"),
        (dict(top_entropy_quantile=0.5), r"^length_bucketing: top_entropy_quantile=0.5"),
        (dict(advantage_estimator="gae"), r"^length_bucketing: the critic's value loss"),
    ],
)
def test_refused_at_construction(overrides, message):
    with pytest.raises(ValueError, match=message) as error:
        _trainer(**overrides)
    assert "\n" not in str(error.value) and "length_bucketing=False" in str(error.value)


def test_training_logs_the_saving_and_checkpoints_the_bucketed_buffer(tmp_path):
    trainer = _trainer(
        gradient_accumulation_steps=2, max_steps=1, save_strategy="steps", save_steps=1, output_dir=str(tmp_path)
    )
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if SLOTS in entry]
    assert len(logged) == 1
    saved = torch.load(tmp_path / "checkpoint-1" / "trl_zoo_buffer_0.pt", weights_only=True)
    assert len(saved) == 4 and saved is not buffered_micro_batches(trainer)
    assert logged[0][SLOTS] == token_slots(saved) == token_slots(buffered_micro_batches(trainer))
    assert logged[0][SLOTS] <= logged[0][SLOTS_UNBUCKETED]
    # TRL padded the 16 rows to the longest prompt and the longest completion among them
    pad_token = pad_token_id(trainer)
    longest_prompt = max(int(batch["prompt_mask"].sum(1).max()) for batch in saved)
    longest_completion = max(
        int(((batch["completion_mask"] != 0) | (batch["completion_ids"] != pad_token)).any(0).nonzero().max()) + 1
        for batch in saved
    )
    assert logged[0][SLOTS_UNBUCKETED] == 16 * (longest_prompt + longest_completion)


def test_an_entry_that_is_not_one_row_per_completion_is_refused(setup):
    trainer, plain, _ = setup
    with_list = [{**batch, "notes": ["x"] * batch["completion_ids"].size(0)} for batch in plain]
    refusal = r"^length_bucketing cannot re-cut the batch entry 'notes' .*length_bucketing=False"
    with pytest.raises(ValueError, match=refusal):
        trainer.pipeline.get("length_bucketing").bucketed(with_list)
