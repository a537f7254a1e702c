"""The calls of the hook points (`Pipeline`) to the trainer's components (trl_zoo/components/, built in the order of
its `COMPONENTS`). Which component takes part in which hook point, in what order, and how the hook points nest is the
table of hooks/hook_points.py (`STEP`); the trainer calls the hook points (the door, hooks/trl_access.py: TRL's
private methods; trainer.py: `Trainer`'s public ones; hooks/generation.py: a round and a generation batch;
hooks/loss_step.py: the loss step); nothing else calls a component's hook method. A component that is off (`active`
False once built) takes part in none.

Tests: tests/test_pipeline.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from .component import Component
from .hook_points import CHAIN, EVENT, HOOKS, WRAP, HookPoint


class Pipeline:
    """The trainer's components, built in the given order, and the calls of the hook points (`hook_points.STEP`)."""

    def __init__(self, trainer=None, components: tuple[type[Component], ...] = ()):
        self._components: dict[str, Component] = {}
        for component_class in components if trainer is not None else ():
            self._components[component_class.name] = component_class(trainer)

    def get(self, name: str) -> Component | None:
        """The component `name` (on or off), None before the trainer is built."""
        return self._components.get(name)

    def saved_state(self) -> dict:
        """Every component's `state`, in one dict (their keys are distinct)."""
        merged: dict = {}
        for component in self._components.values():
            merged.update(component.state)
        return merged

    def restore_state(self, saved) -> dict:
        """Each key of `saved` into the state of the component that `owns_state` it; returns the keys none owns."""
        unowned = {}
        for key, value in saved.items():
            owner = next((c for c in self._components.values() if c.owns_state(key)), None)
            (unowned if owner is None else owner.state)[key] = value
        return unowned

    def active(self) -> list[str]:
        """The names of the components that take part in this run, in build order."""
        return [name for name, component in self._components.items() if component.active]

    def _taking_part(self, point: HookPoint, kind: str) -> list[Callable]:
        if point.kind != kind:
            raise TypeError(f"hook point {point.name!r} is an {point.kind} hook point, called as {kind}")
        taking = [self._components.get(name) for name in HOOKS[point.name].taking_part]
        return [getattr(component, point.name) for component in taking if component is not None and component.active]

    def event(self, point: HookPoint, *args) -> None:
        """Call the EVENT hook point `point` on each taking component, in the declared order."""
        for method in self._taking_part(point, EVENT):
            method(*args)

    def wrap(self, point: HookPoint, innermost: Callable) -> Callable:
        """The WRAP hook point `point` around `innermost`: the first declared component is outermost."""
        call = innermost
        for method in reversed(self._taking_part(point, WRAP)):
            call = functools.partial(method, call)
        return call

    def chain(self, point: HookPoint, value):
        """`value` through the CHAIN hook point `point`: each taking component, in the declared order, on what the one
        before returned."""
        for method in self._taking_part(point, CHAIN):
            value = method(value)
        return value


EMPTY = Pipeline()  # the trainer's pipeline while TRL's constructor runs: every hook point passes straight through
