"""Each fact of a run's saved state has one owner: KL control its β and reset count, dynamic sampling its stream
position and its sampler's keys, the loss step the loss entry's; a checkpoint's one dict goes back key by key."""

import ast
import pathlib

import pytest

import trl_zoo
from tests import tiny
from trl_zoo.losses.ppo_kl import BETA
from trl_zoo.samplers.greso import HISTORY

PACKAGE = pathlib.Path(trl_zoo.__file__).parent


@pytest.fixture(scope="module")
def trained():
    trainer = tiny.make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, loss_type="ppo_kl", ppo_kl_target=0.01, beta=0.1, kl_target=0.05,
        dynamic_sampling="greso", dynamic_sampling_max_rounds=2, dynamic_sampling_on_exhausted="fill",
    )
    trainer.train()
    return trainer


def test_each_owner_keeps_only_its_own_keys(trained):
    kl_control = trained.pipeline.get("kl_control")
    sampling = trained.pipeline.get("dynamic_sampling")
    assert set(kl_control.state) == {"kl_coef"}
    assert HISTORY in sampling.state
    assert all(key.split("/")[0] in ("dynamic_sampling", "greso") for key in sampling.state)
    assert set(trained.loss_state) == {BETA}
    assert trained.kl_coefficient == kl_control.beta == kl_control.state["kl_coef"]
    others = [c for c in trained.pipeline._components.values() if c.name not in ("kl_control", "dynamic_sampling")]
    assert all(component.state == {} for component in others)


def test_the_saved_dict_is_the_union_and_goes_back_to_its_owners(trained):
    saved = dict(trained.zoo_state)
    assert saved == {**trained.pipeline.get("kl_control").state, **trained.pipeline.get("dynamic_sampling").state,
                     **trained.loss_state}
    with pytest.raises(TypeError):
        trained.zoo_state["kl_coef"] = 1.0  # a read-only view: writes go to the owner
    fresh = tiny.make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, loss_type="ppo_kl", ppo_kl_target=0.01, beta=0.1, kl_target=0.05,
        dynamic_sampling="greso", dynamic_sampling_max_rounds=2, dynamic_sampling_on_exhausted="fill",
    )
    assert fresh.kl_coefficient == pytest.approx(0.1) and fresh.loss_state == {}
    fresh.restore_zoo_state(saved)
    assert fresh.pipeline.get("kl_control").state == trained.pipeline.get("kl_control").state
    assert fresh.pipeline.get("dynamic_sampling").state == trained.pipeline.get("dynamic_sampling").state
    assert fresh.loss_state == trained.loss_state
    assert fresh.kl_coefficient == trained.kl_coefficient != pytest.approx(0.1)


def test_no_module_writes_into_the_saved_state_but_its_owners():
    """`zoo_state` is read by the resume component alone; no component reaches another's `state`."""
    readers, reaches = [], []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "zoo_state":
                readers.append(path.name)
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "state"
                and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "attr", None) == "get"
            ):
                reaches.append(f"{path.name}:{node.lineno}")
    assert sorted(set(readers)) == ["resume.py"]
    assert reaches == []
