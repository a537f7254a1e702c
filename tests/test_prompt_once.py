"""prompt_once: each distinct prompt of a log-prob pass forwarded once gives TRL's log-probs, entropies and gradients
(left-padded prompts of different lengths, with and without LoRA); inside each optimizer step the rows are sorted
by prompt and every step's loss and gradient stay TRL's; the forwarded positions are U·(P − 1) + R·(C + 1) instead of
R·(P + C); what cannot share a cache is refused with one line."""

import pytest
import torch
from datasets import Dataset
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

import trl_zoo
from tests.test_advantages import lora
from tests.test_length_bucketing import _assert_steps_close, _per_step_losses_and_gradients
from tests.tiny import config_kwargs, make_trainer, perturb
from tests.trl_internals import (
    generate_and_score,
    metric_values,
    pad_token_id,
    token_logps_and_entropies,
    trl_own_token_logps_and_entropies,
)
from trl_zoo.components.prompt_once import SLOTS, SLOTS_UNSHARED, prompt_groups
from trl_zoo.hooks.model_inputs import forward_inputs

PROMPTS = ["1+2=", "23+4567=", "345+6=", "7+891011="]  # 4 to 9 characters: left padding differs per prompt
MAX_COMPLETION = 12
COMPLETION_LENGTHS = [12, 1, 9, 3, 11, 2, 6, 12, 4, 10, 1, 8, 12, 5, 2, 7]  # one per row of the 16-row batch


def _trainer(**overrides):
    settings = dict(
        prompt_once=True, gradient_checkpointing=False, per_device_train_batch_size=4, num_generations=4,
        steps_per_generation=4, gradient_accumulation_steps=2, max_completion_length=MAX_COMPLETION,
        loss_type="dapo",
    )
    settings.update(overrides)
    return make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, dataset=Dataset.from_dict({"prompt": PROMPTS}), **settings
    )


def _generation_batch(trainer) -> dict:
    """One scored generation batch (16 rows, 4 prompts × 4 completions in TRL's group order), completions cut to
    COMPLETION_LENGTHS tokens."""
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


def _pass_and_gradients(compute, trainer, batch, rows):
    """(log-probs, entropies, gradients of Σ w·log π) of the rows `rows` of `batch` by the pass `compute`."""
    model = trainer.model
    model.zero_grad()
    sub = {key: value[rows] for key, value in batch.items() if isinstance(value, torch.Tensor) and value.dim() > 0}
    input_ids, attention_mask, logits_to_keep, _ = forward_inputs(sub)
    logps, entropies, _ = compute(trainer, model, input_ids, attention_mask, logits_to_keep, compute_entropy=True)
    weights = torch.linspace(-1.0, 2.0, logps.numel()).view_as(logps)
    (logps * weights * sub["completion_mask"]).sum().backward()
    gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return logps * sub["completion_mask"], entropies * sub["completion_mask"], gradients


_shared, _trl = token_logps_and_entropies, trl_own_token_logps_and_entropies


@pytest.mark.parametrize("peft", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize(
    "rows", [list(range(16)), [0, 1, 2, 5, 6, 7, 8, 12], [3, 4, 9, 13, 14, 15]], ids=["all", "mixed", "uneven"]
)
def test_the_pass_gives_trls_log_probs_entropies_and_gradients(peft, rows):
    trainer = _trainer(peft_config=lora() if peft else None)
    batch = _generation_batch(trainer)
    perturb(trainer.model, scale=0.02)
    expected = _pass_and_gradients(_trl, trainer, batch, rows)
    measured = _pass_and_gradients(_shared, trainer, batch, rows)
    torch.testing.assert_close(measured[0], expected[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(measured[1], expected[1], rtol=1e-5, atol=1e-5)
    assert measured[2].keys() == expected[2].keys() and measured[2]
    for name, gradient in measured[2].items():
        assert gradient.abs().sum() > 0, name
        torch.testing.assert_close(gradient, expected[2][name], rtol=1e-4, atol=1e-6, msg=name)


def test_forwarded_positions_are_counted_once_per_distinct_prompt():
    trainer = _trainer()
    batch = _generation_batch(trainer)
    metric_values(trainer).pop(SLOTS, None)
    rows, completion = batch["completion_ids"].shape
    prompt = batch["prompt_ids"].size(1)
    _pass_and_gradients(_shared, trainer, batch, list(range(rows)))
    inverse, first = prompt_groups(batch["prompt_ids"], batch["prompt_mask"])
    groups = inverse.view(len(PROMPTS), -1)  # TRL's group order: each prompt's completions side by side
    assert first.numel() == len(PROMPTS) and (groups == groups[:, :1]).all()
    assert metric_values(trainer)[SLOTS] == [float(len(PROMPTS) * (prompt - 1) + rows * (completion + 1))]
    assert metric_values(trainer)[SLOTS_UNSHARED] == [float(rows * (prompt + completion))]


@pytest.mark.parametrize("loss_type", ["dapo", "dr_grpo", "gspo"])
def test_each_optimizer_step_keeps_trls_loss_and_gradient(loss_type):
    trainer = _trainer(loss_type=loss_type)
    component = trainer.pipeline.get("prompt_once")
    assert component.regroups
    batch = _generation_batch(trainer)
    perturb(trainer.model, scale=0.02)
    torch.manual_seed(3)
    plain = split_tensor_dict(shuffle_sequence_dict(batch), trainer.args.steps_per_generation)
    regrouped = component.new_buffer(plain)
    component.active = False
    expected = _per_step_losses_and_gradients(trainer, plain)
    component.active = True
    measured = _per_step_losses_and_gradients(trainer, regrouped)
    _assert_steps_close(measured, expected, 2, gradient_tolerance=(1e-4, 1e-5))


def _distinct(micro_batch) -> int:
    return prompt_groups(micro_batch["prompt_ids"], micro_batch["prompt_mask"])[1].numel()


def test_regrouping_puts_each_prompts_rows_of_a_step_together():
    trainer = _trainer()
    batch = _generation_batch(trainer)
    torch.manual_seed(3)
    plain = split_tensor_dict(shuffle_sequence_dict(batch), trainer.args.steps_per_generation)
    regrouped = trainer.pipeline.get("prompt_once").new_buffer(plain)
    for start in range(0, len(plain), 2):
        def texts(batches):
            return sorted(
                tuple(ids[mask.bool()].tolist())
                for b in batches
                for ids, mask in zip(b["prompt_ids"], b["prompt_mask"])
            )

        assert texts(regrouped[start : start + 2]) == texts(plain[start : start + 2])  # same rows, same step
        distinct_before = sum(_distinct(b) for b in plain[start : start + 2])
        distinct_after = sum(_distinct(b) for b in regrouped[start : start + 2])
        assert distinct_after <= distinct_before
        step_prompts = len(set(texts(plain[start : start + 2])))
        assert distinct_after <= step_prompts + 1  # sorted: a prompt spans at most the cut between two micro-batches


def test_a_micro_batch_local_aggregation_leaves_trls_buffer_and_still_shares():
    trainer = _trainer(loss_type="bnpo")  # a token mean per micro-batch: regrouping would change the loss
    component = trainer.pipeline.get("prompt_once")
    assert component.active and not component.regroups
    batch = _generation_batch(trainer)
    plain = split_tensor_dict(shuffle_sequence_dict(batch), trainer.args.steps_per_generation)
    assert component.new_buffer(plain) is plain


def test_trains_two_steps_with_finite_losses():
    trainer = _trainer(max_steps=2, logging_steps=1, peft_config=lora())
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    slots = [entry[SLOTS] for entry in trainer.state.log_history if SLOTS in entry]
    unshared = [entry[SLOTS_UNSHARED] for entry in trainer.state.log_history if SLOTS_UNSHARED in entry]
    assert slots and all(s < u for s, u in zip(slots, unshared))


@pytest.mark.parametrize(
    "settings, words",
    [
        (dict(gradient_checkpointing=True), "set gradient_checkpointing=False"),
        (dict(advantage_estimator="gae"), "the critic"),
    ],
    ids=["gradient_checkpointing", "critic"],
)
def test_refused_in_one_line(settings, words):
    with pytest.raises(ValueError, match=words) as error:
        trl_zoo.GRPOConfig(**config_kwargs(prompt_once=True, **{"gradient_checkpointing": False, **settings}))
    assert "prompt_once" in str(error.value) and "\n" not in str(error.value)


def test_multimodal_inputs_are_refused_at_the_pass():
    trainer = _trainer()
    ids = torch.ones(2, 6, dtype=torch.long)
    with pytest.raises(ValueError, match="prompt_once: multimodal inputs \\(pixel_values\\)"):
        token_logps_and_entropies(trainer, trainer.model, ids, torch.ones_like(ids), 3, pixel_values=torch.zeros(2, 3))


def test_with_length_bucketing_the_rows_are_sorted_by_prompt_then_length_and_steps_keep_trls_loss():
    trainer = _trainer(length_bucketing=True)
    assert not trainer.pipeline.get("prompt_once").regroups  # length bucketing re-cuts the buffer, prompt first
    batch = _generation_batch(trainer)
    perturb(trainer.model, scale=0.02)
    torch.manual_seed(3)
    plain = split_tensor_dict(shuffle_sequence_dict(batch), trainer.args.steps_per_generation)
    bucketed = trainer.pipeline.get("length_bucketing").new_buffer(plain)
    for start in range(0, len(plain), 2):
        rows = [
            (tuple(ids[mask.bool()].tolist()), int(mask.sum() + completion.sum()))
            for b in bucketed[start : start + 2]
            for ids, mask, completion in zip(b["prompt_ids"], b["prompt_mask"], b["completion_mask"])
        ]
        prompts = [prompt for prompt, _ in rows]
        assert all(prompts.index(p) == i or prompts[i - 1] == p for i, p in enumerate(prompts))  # contiguous
        for prompt in set(prompts):
            lengths = [length for p, length in rows if p == prompt]
            assert lengths == sorted(lengths)
    component = trainer.pipeline.get("prompt_once")
    component.active = False
    expected = _per_step_losses_and_gradients(trainer, plain)
    component.active = True
    measured = _per_step_losses_and_gradients(trainer, bucketed)
    for (loss, gradients), (expected_loss, expected_gradients) in zip(measured, expected):
        torch.testing.assert_close(loss, expected_loss, rtol=1e-4, atol=1e-6)
        for name, gradient in gradients.items():
            torch.testing.assert_close(gradient, expected_gradients[name], rtol=1e-4, atol=1e-5, msg=name)
