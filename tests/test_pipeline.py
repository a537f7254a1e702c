"""The pipeline (hooks/pipeline.py) and its table (hooks/hook_points.py): a real run calls every hook point inside
the one the table nests it in, each component's first frame at most two trl_zoo frames from TRL's; every component's
hook methods are declared there and every declared one exists; EVENT and CHAIN hook points run in the declared order
and WRAP ones nest with the first listed outermost; a component that is off takes part in nothing; no component
assigns an attribute of the trainer."""

import ast
import dataclasses
import inspect
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import trl_zoo
from tests.test_kl import lora
from tests.tiny import make_trainer, prompts_dataset
from trl_zoo.components import COMPONENTS
from trl_zoo.hooks import hook_points, pipeline
from trl_zoo.hooks.component import Component
from trl_zoo.hooks.hook_points import CHAIN, EVENT, HOOKS, WRAP, walk
from trl_zoo.hooks.pipeline import Pipeline

PACKAGE = str(Path(trl_zoo.__file__).parent)


def trl_zoo_frames_from_trl(frame) -> int | None:
    """The trl_zoo frames from `frame` outwards to the nearest one that is TRL's or transformers' (a hook point's
    own call in `Pipeline` and this file's recording wrappers passed over; functools.partial adds none); None when
    another component's frame comes first (a component called inside another is not the first)."""
    count = 0
    while frame is not None:
        path, owner = frame.f_code.co_filename, frame.f_locals.get("self")
        if path.startswith(PACKAGE):
            if isinstance(owner, Component):
                return None
            count += not isinstance(owner, Pipeline)
        elif path != __file__:
            return count
        frame = frame.f_back
    return count


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory):
    """One optimizer step, its checkpoint and a resume from it, with the components a tiny run can turn on together
    (the critic, expert SFT, the teacher, KL control, a sampler): per hook point, the hook points it was called
    inside, and per hook method of a component that is the first called from TRL, the trl_zoo frames between."""
    parents, frames, stack = {}, {}, []
    wrap, event, chain = Pipeline.wrap, Pipeline.event, Pipeline.chain
    taking_part = Pipeline._taking_part

    def opened(point, call):
        def run(*args, **kwargs):
            parents.setdefault(point.name, set()).add(stack[-1] if stack else None)
            stack.append(point.name)
            try:
                return call(*args, **kwargs)
            finally:
                stack.pop()

        return run

    def counted(method):
        def run(*args, **kwargs):
            count = trl_zoo_frames_from_trl(sys._getframe(1))
            if count is not None:
                name = f"{method.__self__.name}.{method.__name__}"
                frames[name] = max(frames.get(name, 0), count)
            return method(*args, **kwargs)

        return run

    def counted_taking_part(self, point, kind):
        return [counted(method) for method in taking_part(self, point, kind)]

    patch = pytest.MonkeyPatch()
    patch.setattr(Pipeline, "wrap", lambda self, point, innermost: opened(point, wrap(self, point, innermost)))
    patch.setattr(Pipeline, "event", lambda self, point, *args: opened(point, lambda: event(self, point, *args))())
    patch.setattr(Pipeline, "chain", lambda self, point, value: opened(point, lambda: chain(self, point, value))())
    patch.setattr(Pipeline, "_taking_part", counted_taking_part)
    try:
        trainer = make_trainer(
            trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), dataset=prompts_dataset(answers=True),
            output_dir=str(tmp_path_factory.mktemp("recorded")), max_steps=1, save_strategy="steps", save_steps=1,
            advantage_estimator="gae", expert_column="answer",
            teacher_model="self", kl_target=0.1, beta=0.05, dynamic_sampling="resample",
        )
        trainer.train()
        trainer.train(resume_from_checkpoint=True)  # checkpoint-1, at max_steps: loaded, no step
    finally:
        patch.undo()
    return trainer, parents, frames


def test_a_real_run_calls_every_hook_point_inside_the_one_the_table_nests_it_in(recorded_run):
    trainer, parents, _ = recorded_run
    assert {"critic", "expert_sft", "teacher", "kl_control"} <= set(trainer.pipeline.active())
    expected = {}
    for point, parent in walk():
        expected.setdefault(point.name, set()).add(None if parent is None else parent.name)
    assert parents == expected


def test_a_component_is_at_most_two_trl_zoo_frames_from_trl(recorded_run):
    _, _, frames = recorded_run
    assert {"expert_sft.micro_batch_loss", "dynamic_sampling.generation_batch", "kl_control.on_optimizer_step"} <= set(
        frames
    )
    assert {name: count for name, count in frames.items() if count > 2} == {}


def test_the_table_is_a_tree_of_distinct_hook_points_whose_shared_leaves_are_one_hook_point():
    points = [point for point, _ in walk()]
    assert len({point.name for point in points}) == len(HOOKS)
    repeated = {point.name for point in points if [other.name for other in points].count(point.name) > 1}
    assert repeated == {"log_prob_pass"}  # TRL's log-prob pass, called inside several hook points
    assert all(point is HOOKS[point.name] and not point.inside for point in points if point.name in repeated)
    assert {point.kind for point in HOOKS.values()} == {EVENT, WRAP, CHAIN}
    assert all(getattr(hook_points, point.name.upper()) is point for point in HOOKS.values())


def test_every_component_has_a_unique_name_and_every_declared_name_is_a_component():
    names = [component.name for component in COMPONENTS]
    assert len(set(names)) == len(names) and all(names)
    declared = {name for point in HOOKS.values() for name in point.taking_part}
    assert declared <= set(names)


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda component: component.name)
def test_a_components_hook_methods_are_exactly_those_declared_for_it(component):
    defined = {name for name in HOOKS if callable(getattr(component, name, None))}
    declared = {hook for hook, point in HOOKS.items() if component.name in point.taking_part}
    assert defined == declared
    for hook in declared:
        parameters = list(inspect.signature(getattr(component, hook)).parameters)
        assert (parameters[1] == "inner") == (HOOKS[hook].kind == WRAP), (hook, parameters)


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

    def new_buffer(self, value):
        return value + [self.name]

    def policy_forward(self, inner, value):
        self.calls.append(f"{self.name} in")
        result = inner(value + [self.name])
        self.calls.append(f"{self.name} out")
        return result


def _pipeline_of(names, calls):
    built = Pipeline()
    built._components = {name: _Recorder(SimpleNamespace(plan=None), name, calls) for name in names}
    return built


def _declared(monkeypatch, name, taking_part):
    monkeypatch.setitem(HOOKS, name, dataclasses.replace(HOOKS[name], taking_part=taking_part))
    return HOOKS[name]


def test_events_run_in_the_declared_order_and_wraps_nest_first_listed_outermost(monkeypatch):
    on_generation_batch = _declared(monkeypatch, "on_generation_batch", ("b", "a", "c"))
    policy_forward = _declared(monkeypatch, "policy_forward", ("a", "b"))
    calls = []
    built = _pipeline_of(["a", "b", "c"], calls)
    built.event(on_generation_batch, {})
    assert calls == ["b", "a", "c"]
    calls.clear()
    assert built.wrap(policy_forward, lambda value: value + ["trl"])([]) == ["a", "b", "trl"]
    assert calls == ["a in", "b in", "b out", "a out"]
    with pytest.raises(TypeError, match="'policy_forward' is an wrap hook point, called as event"):
        built.event(policy_forward, [])


def test_a_chain_hands_each_component_what_the_one_before_returned(monkeypatch):
    new_buffer = _declared(monkeypatch, "new_buffer", ("b", "a"))
    calls = []
    built = _pipeline_of(["a", "b"], calls)
    assert built.chain(new_buffer, ["trl"]) == ["trl", "b", "a"]
    assert built.chain(_declared(monkeypatch, "new_buffer", ()), ["trl"]) == ["trl"]


def test_a_component_that_is_off_takes_part_in_nothing(monkeypatch):
    policy_forward = _declared(monkeypatch, "policy_forward", ("a", "b"))
    calls = []
    built = _pipeline_of(["a", "b"], calls)
    built.get("a").active = False
    assert built.wrap(policy_forward, lambda value: value)([]) == ["b"]
    assert built.active() == ["b"] and built.get("a") is not None


def test_the_empty_pipeline_passes_every_hook_point_through():
    assert pipeline.EMPTY.wrap(hook_points.TRAIN, lambda value: value + 1)(1) == 2
    pipeline.EMPTY.event(hook_points.AFTER_ADVANTAGES, None)  # nothing to call
    assert pipeline.EMPTY.chain(hook_points.NEW_BUFFER, [1]) == [1]
    assert pipeline.EMPTY.active() == [] and pipeline.EMPTY.get("critic") is None


def test_a_trainer_builds_every_component_and_runs_those_its_config_turns_on():
    plain = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig)
    assert set(plain.pipeline.active()) == {"rewards", "dynamic_sampling", "old_logps", "resume", "prompt_length"}
    assert plain.critic is None
    gae = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, advantage_estimator="gae", skip_zero_advantage=True)
    assert {"advantages", "critic", "skip_zero_advantage"} <= set(gae.pipeline.active())
    assert "length_bucketing" not in gae.pipeline.active()
    assert gae.critic is gae.pipeline.get("critic").critic and gae.critic.mode == "head"
