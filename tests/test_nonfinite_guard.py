"""A non-finite loss or gradient norm never reaches the weights silently: `nonfinite_policy="raise"` stops the run
with one line (step, loss, term); "skip" drops that optimizer update with a warning. A test loss makes NaN on
purpose."""

import pytest
import torch

import trl_zoo
from tests.tiny import make_trainer
from trl_zoo import PolicyTerm
from trl_zoo.registry import LOSSES

NAN_LOSS = "nan_on_purpose_test_loss"


def nan_on_second_step(batch, args):
    """REINFORCE, except that the second optimizer step's loss is NaN (every micro-batch of it)."""
    nan_on_second_step.calls += 1
    loss = -batch.logps * batch.advantages
    if nan_on_second_step.calls == 2:
        loss = loss * float("nan")
    return PolicyTerm(loss)


@pytest.fixture
def nan_loss():
    nan_on_second_step.calls = 0
    LOSSES.add(NAN_LOSS, nan_on_second_step, description="NaN on the second call, for tests")
    yield NAN_LOSS
    LOSSES._entries.pop(NAN_LOSS)


def test_raise_names_the_step_the_loss_and_the_term(nan_loss):
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, loss_type=nan_loss, max_steps=3)
    with pytest.raises(FloatingPointError) as error:
        trainer.train()
    message = str(error.value)
    assert "\n" not in message
    assert "step 2: loss nan" in message and "non-finite term: policy loss" in message
    assert f"loss_type={nan_loss}" in message and "nonfinite_policy='skip'" in message


def test_skip_drops_the_update_and_warns(nan_loss, caplog):
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, loss_type=nan_loss, max_steps=3, nonfinite_policy="skip"
    )
    before = {}

    class Snapshot(trl_zoo.hooks.loss_step.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            before[state.global_step] = [p.detach().clone() for p in trainer.model.parameters()]

    trainer.add_callback(Snapshot())
    with caplog.at_level("WARNING"):
        trainer.train()
    assert any("Skipped the optimizer update at step 2" in record.getMessage() for record in caplog.records)
    assert trainer.state.global_step == 3
    for parameter in trainer.model.parameters():
        assert torch.isfinite(parameter).all()
    assert all(torch.equal(a, b) for a, b in zip(before[1], before[2]))  # step 2 left the weights as they were
    assert not all(torch.equal(a, b) for a, b in zip(before[2], before[3]))  # step 3 trained again
