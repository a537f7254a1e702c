"""trl_zoo/hooks/model_inputs.py: the policy forward's inputs, the multimodal pass-through, the loss mask, and TRL's
tool mask through every loss. Tool-call output tokens (tool_mask 0: text a tool wrote into the completion) are not the
policy's: they reach neither TRL's losses (parity with `trl.GRPOTrainer` on the same batch) nor any loss of the
table (the behaviour log-probs at those positions change nothing, where at the other positions they do)."""

from __future__ import annotations

import pytest
import torch
import trl

import trl_zoo
from tests.test_parity import TRL_LOSSES
from tests.tiny import make_trainer, perturb, relative_error, required_settings
from tests.trl_internals import generate_and_score
from trl_zoo.hooks.model_inputs import MULTIMODAL_KEYS, forward_inputs, is_multimodal, loss_mask


def small_batch(**extra):
    return dict(
        prompt_ids=torch.tensor([[0, 5, 6], [7, 8, 9]]),
        prompt_mask=torch.tensor([[0, 1, 1], [1, 1, 1]]),
        completion_ids=torch.tensor([[1, 2, 3, 4], [4, 3, 0, 0]]),
        completion_mask=torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]),
        **extra,
    )


def test_forward_inputs_put_prompt_and_completion_side_by_side_and_pass_images_through():
    pixels = torch.randn(2, 3, 4, 4)
    batch = small_batch(pixel_values=pixels)
    input_ids, attention_mask, logits_to_keep, multimodal = forward_inputs(batch)
    assert input_ids.tolist() == [[0, 5, 6, 1, 2, 3, 4], [7, 8, 9, 4, 3, 0, 0]]
    assert attention_mask.tolist() == [[0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]]
    assert logits_to_keep == 4
    assert set(multimodal) == set(MULTIMODAL_KEYS) and multimodal["pixel_values"] is pixels
    assert all(multimodal[key] is None for key in MULTIMODAL_KEYS if key != "pixel_values")
    assert is_multimodal(batch) and not is_multimodal(small_batch())


def test_loss_mask_is_the_completion_mask_times_the_tool_mask():
    assert loss_mask(small_batch()).tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    with_tools = small_batch(tool_mask=torch.tensor([[1, 0, 0, 1], [1, 1, 1, 1]]))
    assert loss_mask(with_tools).tolist() == [[1, 0, 0, 1], [1, 1, 0, 0]]


def tool_mask_for(completion_mask: torch.Tensor) -> torch.Tensor:
    """0 at completion positions 1 and 2 of every other row (a tool's output inside the completion), 1 elsewhere,
    as TRL builds it (padding 1)."""
    mask = torch.ones_like(completion_mask)
    mask[::2, 1:3] = 0
    return mask


def generation_batch(trainer) -> dict:
    torch.manual_seed(0)
    trainer.model.train()
    return generate_and_score(trainer, next(iter(trainer.get_train_dataloader())))


@pytest.mark.parametrize("loss_type", TRL_LOSSES)
def test_a_tool_mask_gives_trls_loss_and_gradients(loss_type):
    config = dict(loss_type=loss_type, num_iterations=2)
    reference = make_trainer(trl.GRPOTrainer, trl.GRPOConfig, **config)
    candidate = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, **config)
    batch = generation_batch(reference)
    batch["tool_mask"] = tool_mask_for(batch["completion_mask"])
    assert (loss_mask(batch).sum() < batch["completion_mask"].sum()).item()  # the tool mask covers real tokens
    perturb(reference.model)
    perturb(candidate.model)
    candidate.model.train()
    losses = []
    for trainer in (reference, candidate):
        trainer.current_gradient_accumulation_steps = 1
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
        losses.append(loss.detach())
    assert torch.isfinite(losses[1]) and relative_error(losses[1], losses[0]) <= 1e-6, losses
    named = dict(reference.model.named_parameters())
    checked = 0
    for name, parameter in candidate.model.named_parameters():
        if parameter.grad is not None:
            assert relative_error(parameter.grad, named[name].grad) <= 1e-6, name
            checked += 1
    assert checked > 0
    without_tools = {key: value for key, value in batch.items() if key != "tool_mask"}
    with torch.no_grad():
        assert relative_error(candidate.compute_loss(candidate.model, without_tools), losses[1]) > 1e-4


def loss_with_old_logps_moved(trainer, batch, positions: torch.Tensor) -> float:
    """The loss after the behaviour log-probs at `positions` (B, T, bool) moved down by 3 nats (a ratio of e³)."""
    moved = dict(batch)
    moved["old_per_token_logps"] = batch["old_per_token_logps"] - 3.0 * positions.float()
    with torch.no_grad():
        return trainer.compute_loss(trainer.model, moved).item()


@pytest.mark.parametrize("name", trl_zoo.LOSSES.names())
def test_behaviour_log_probs_under_the_tool_mask_do_not_reach_the_loss(name):
    if trl_zoo.LOSSES.get(name).spec.requires_moe:
        pytest.skip(f"{name} needs a mixture-of-experts model (requires_moe)")
    cap = {"epsilon_high": 5.0} if name == "cispo" else {}  # the preset's cap: under TRL's default every weight is 0.2
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, loss_type=name, num_iterations=2, **cap, **required_settings(name)
    )
    batch = generation_batch(trainer)
    assert batch.get("old_per_token_logps") is not None
    perturb(trainer.model)  # off-policy: ratios leave 1, clips and masks bite
    trainer.current_gradient_accumulation_steps = 1
    tool_positions = (tool_mask_for(batch["completion_mask"]) == 0) & batch["completion_mask"].bool()
    plain = dict(batch)
    with torch.no_grad():
        base = trainer.compute_loss(trainer.model, plain).item()
    if abs(loss_with_old_logps_moved(trainer, plain, tool_positions) - base) <= 1e-6 * max(abs(base), 1e-3):
        pytest.skip(f"{name}'s loss does not read the behaviour log-probs at these positions")
    with_tools = dict(batch, tool_mask=tool_mask_for(batch["completion_mask"]))
    with torch.no_grad():
        masked = trainer.compute_loss(trainer.model, with_tools).item()
    moved = loss_with_old_logps_moved(trainer, with_tools, tool_positions)
    assert moved == pytest.approx(masked, rel=1e-6, abs=1e-8), (name, masked, moved)
