"""The run plan: the facts derived once from the config, read by the loss step and the components, and the one
derivation of "has a critic"."""

import ast
import dataclasses
import pathlib

import pytest

import trl_zoo
from tests import tiny
from trl_zoo.config.generation_speed import old_logps_skip_applies
from trl_zoo.config.run_plan import RunPlan, has_critic
from trl_zoo.registry import ADVANTAGES, AGGREGATIONS, KL_ESTIMATORS, LOSSES

PACKAGE = pathlib.Path(trl_zoo.__file__).parent


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "gspo", "cispo", "luspo"])
def test_the_plan_holds_the_tables_entries_of_the_config(loss_type):
    args = trl_zoo.GRPOConfig(**tiny.config_kwargs(loss_type=loss_type, kl_estimator="k3"))
    plan = RunPlan.of(args)
    entry = LOSSES.get(loss_type)
    assert plan.loss_entry is entry
    assert plan.aggregate is AGGREGATIONS.get(entry.spec.aggregation).fn
    assert plan.kl_estimator is KL_ESTIMATORS.get("k3").fn
    assert plan.has_critic is False
    assert plan.skips_on_policy_old_logps == old_logps_skip_applies(args, False)


def test_a_given_aggregation_wins_over_the_losss_own():
    args = trl_zoo.GRPOConfig(**tiny.config_kwargs(loss_type="grpo", loss_aggregation="token_mean_global"))
    assert LOSSES.get("grpo").spec.aggregation != "token_mean_global"
    assert RunPlan.of(args).aggregate is AGGREGATIONS.get("token_mean_global").fn


def test_has_critic_is_the_estimators_declared_need_of_values():
    critics = [name for name in ADVANTAGES.names() if has_critic(name)]
    assert critics == [name for name in ADVANTAGES.names() if "values" in ADVANTAGES.get(name).spec.needs]
    assert "gae" in critics and "grpo" not in critics and not has_critic(None)


def test_the_trainer_builds_one_frozen_plan_that_every_component_reads():
    trainer = tiny.make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, per_device_train_batch_size=4, gradient_accumulation_steps=2,
        steps_per_generation=4, skip_on_policy_old_logps=True,
    )
    assert trainer.plan == RunPlan.of(trainer.args)
    assert trainer.plan.skips_on_policy_old_logps is True
    for name in ("old_logps", "critic", "advantages", "kl_control"):
        assert trainer.pipeline.get(name).plan is trainer.plan
    assert trainer.pipeline.get("old_logps").skip_on_policy is True
    assert trainer.pipeline.get("critic").active is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        trainer.plan.has_critic = True


def test_has_a_critic_is_derived_in_one_place():
    """No module but the plan's reads an estimator's declared need of values itself."""
    readers = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "run_plan.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Constant)
                and node.left.value == "values"
                and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
            ):
                readers.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert readers == []
