"""The pipeline (hooks/pipeline.py): its docstring's table is `HOOKS`; every component's hook methods are declared
there and every declared one exists; EVENT hook points run in the declared order and WRAP ones nest with the first
listed outermost; a component that is off takes part in nothing; no component assigns an attribute of the trainer."""

import ast
import inspect
import re
from pathlib import Path

import pytest

import trl_zoo
from tests.tiny import make_trainer
from trl_zoo.hooks import pipeline
from trl_zoo.hooks.component import Component
from trl_zoo.hooks.pipeline import COMPONENTS, EVENT, HOOKS, WRAP, Pipeline


def docstring_table() -> dict[str, tuple[str, tuple[str, ...]]]:
    """The hook-point table of the module docstring: hook point, kind, the components taking part."""
    rows = re.findall(r"^ {4} *(\w+) +(EVENT|WRAP) +(\w+(?:, \w+)*)", pipeline.__doc__, flags=re.MULTILINE)
    return {hook: (kind.lower(), tuple(names.split(", "))) for hook, kind, names in rows}


def test_the_docstring_table_is_the_hooks_table():
    assert docstring_table() == HOOKS


def test_every_component_has_a_unique_name_and_every_declared_name_is_a_component():
    names = [component.name for component in COMPONENTS]
    assert len(set(names)) == len(names) and all(names)
    declared = {name for _, taking in HOOKS.values() for name in taking}
    assert declared <= set(names)


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda component: component.name)
def test_a_components_hook_methods_are_exactly_those_declared_for_it(component):
    defined = {name for name in HOOKS if callable(getattr(component, name, None))}
    declared = {hook for hook, (_, taking) in HOOKS.items() if component.name in taking}
    assert defined == declared
    for hook in declared:
        parameters = list(inspect.signature(getattr(component, hook)).parameters)
        assert (parameters[1] == "inner") == (HOOKS[hook][0] == WRAP), (hook, parameters)


def test_no_component_assigns_an_attribute_of_the_trainer():
    """State lives in its component; a component reads another's through `trainer.pipeline.get(name)`."""
    for component in COMPONENTS:
        tree = ast.parse(Path(inspect.getfile(component)).read_text())
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for target in targets:
                if isinstance(target, ast.Attribute):
                    owner = ast.unparse(target.value)
                    assert owner not in ("trainer", "self.trainer"), (component.name, ast.unparse(node))


class _Recorder(Component):
    def __init__(self, trainer, name, calls):
        super().__init__(trainer)
        self.name, self.calls = name, calls

    def on_generation_batch(self, batch):
        self.calls.append(self.name)

    def policy_forward(self, inner, value):
        self.calls.append(f"{self.name} in")
        result = inner(value + [self.name])
        self.calls.append(f"{self.name} out")
        return result


def _pipeline_of(names, calls):
    built = Pipeline()
    built._components = {name: _Recorder(None, name, calls) for name in names}
    return built


def test_events_run_in_the_declared_order_and_wraps_nest_first_listed_outermost(monkeypatch):
    monkeypatch.setitem(HOOKS, "on_generation_batch", (EVENT, ("b", "a", "c")))
    monkeypatch.setitem(HOOKS, "policy_forward", (WRAP, ("a", "b")))
    calls = []
    built = _pipeline_of(["a", "b", "c"], calls)
    built.event("on_generation_batch", {})
    assert calls == ["b", "a", "c"]
    calls.clear()
    assert built.wrap("policy_forward", lambda value: value + ["trl"])([]) == ["a", "b", "trl"]
    assert calls == ["a in", "b in", "b out", "a out"]
    with pytest.raises(TypeError, match="'policy_forward' is an wrap hook point, called as event"):
        built.event("policy_forward", [])


def test_a_component_that_is_off_takes_part_in_nothing(monkeypatch):
    monkeypatch.setitem(HOOKS, "policy_forward", (WRAP, ("a", "b")))
    calls = []
    built = _pipeline_of(["a", "b"], calls)
    built.get("a").active = False
    assert built.wrap("policy_forward", lambda value: value)([]) == ["b"]
    assert built.active() == ["b"] and built.get("a") is not None


def test_the_empty_pipeline_passes_every_hook_point_through():
    assert pipeline.EMPTY.wrap("train", lambda value: value + 1)(1) == 2
    pipeline.EMPTY.event("after_advantages", None)  # nothing to call
    assert pipeline.EMPTY.active() == [] and pipeline.EMPTY.get("critic") is None


def test_a_trainer_builds_every_component_and_runs_those_its_config_turns_on():
    plain = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig)
    assert set(plain.pipeline.active()) == {"rewards", "dynamic_sampling", "old_logps", "resume", "prompt_length"}
    assert plain.critic is None
    gae = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, advantage_estimator="gae", skip_zero_advantage=True)
    assert {"advantages", "critic", "zero_advantage_skip"} <= set(gae.pipeline.active())
    assert "length_bucketing" not in gae.pipeline.active()
    assert gae.critic is gae.pipeline.get("critic").critic and gae.critic.mode == "head"
