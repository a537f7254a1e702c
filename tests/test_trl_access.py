"""trl_zoo writes TRL's objects in one module only (`trl_zoo/hooks/trl_access.py`), and every swap it makes for the
duration of a call of TRL's is undone however that call ends: the reward functions while TRL scores, the LM head's
forward for the ‖s‖² pass, TRL's `create_model_from_path` while its constructor runs, the vLLM weight sync's
parameter iterator while TRL generates."""

import pathlib
import re

import pytest
import torch
import trl.trainer.grpo_trainer as trl_grpo_trainer

import trl_zoo
from tests import tiny
from trl_zoo.hooks.model_object import _reference_from
from trl_zoo.hooks.trl_access import replace_logged_advantages, restored, swapped

PACKAGE = pathlib.Path(trl_zoo.__file__).parent
# assignments to TRL's objects: the trainer's private state, its reward functions, a module's forward, TRL's module
# function and the vLLM generation's iterator
WRITES = re.compile(
    r"(\.reward_funcs|\.forward|_iter_named_params|create_model_from_path|_buffered_inputs|self\._step)\s*=(?!=)"
    r"|_logs\["
)


def test_only_trl_access_writes_trls_objects():
    writers = {
        str(path.relative_to(PACKAGE)): match.group(0)
        for path in PACKAGE.rglob("*.py")
        if path.name != "trl_access.py"
        for match in [WRITES.search(path.read_text())]
        if match
    }
    assert writers == {}


class Owner:
    def method(self):
        return "class"


@pytest.mark.parametrize("kind", ["instance attribute", "method of the class", "module's forward", "module attribute"])
def test_a_swap_is_undone_when_the_call_raises(kind):
    owner, name = {
        "instance attribute": (Owner(), "value"),
        "method of the class": (Owner(), "method"),
        "module's forward": (torch.nn.Linear(2, 2), "forward"),
        "module attribute": (trl_grpo_trainer, "create_model_from_path"),
    }[kind]
    if kind == "instance attribute":
        owner.value = [1]
    before, had = getattr(owner, name), name in vars(owner)
    with pytest.raises(RuntimeError, match="in the call"):
        with swapped(owner, name, lambda: "swapped"):
            assert getattr(owner, name)() == "swapped"
            raise RuntimeError("in the call")
    assert getattr(owner, name) == before and (name in vars(owner)) == had  # a class's method is not shadowed


def test_restored_undoes_what_the_block_set():
    layer = torch.nn.Linear(2, 2)
    with pytest.raises(RuntimeError):
        with restored(layer, "forward"):
            layer.forward = lambda x: x
            raise RuntimeError
    assert "forward" not in vars(layer) and layer(torch.ones(1, 2)).shape == (1, 2)


def test_the_reference_swap_is_undone_when_trls_constructor_raises():
    load = trl_grpo_trainer.create_model_from_path
    reference = torch.nn.Linear(2, 2)
    with pytest.raises(RuntimeError):
        with _reference_from("in-memory", reference):
            assert trl_grpo_trainer.create_model_from_path("in-memory") is reference
            raise RuntimeError
    assert trl_grpo_trainer.create_model_from_path is load


def test_the_reward_functions_are_trls_again_after_a_reward_call_raises():
    def failing_reward(completions, **kwargs):
        raise RuntimeError("reward server down")

    trainer = tiny.make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=[failing_reward], max_steps=1)
    reward_funcs = trainer.reward_funcs
    with pytest.raises(RuntimeError, match="reward server down"):
        trainer.train()
    assert trainer.reward_funcs is reward_funcs and trainer.reward_funcs[0] is failing_reward


def test_the_logged_advantages_of_the_last_rows_are_replaced():
    class Trainer:
        _logs = {"advantages": [9.0, 1.0, 2.0]}

    replace_logged_advantages(Trainer, [0.5, -0.5])
    assert Trainer._logs["advantages"] == [9.0, 0.5, -0.5]
