"""`Component`: one feature of trl_zoo's training step (dynamic sampling, the critic, length bucketing, ...).

A component is built once TRL's trainer is, in the order `hooks/pipeline.py` declares, and reaches the trainer as
`self.trainer` and the run's facts derived from its config as `self.plan` (config/run_plan.py); what it keeps is its
own (`self`), and what it needs of another component it asks the trainer's pipeline for by name
(`trainer.pipeline.get(name)`), never through state another constructor left on the trainer. What a resumed run must
get back it keeps in `self.state` (numbers, lists, dicts of them), under keys it `owns_state`: checkpoints save every
owner's state in one dict (components/resume.py) and a resume hands each key back to its owner.
It takes part in a hook point by defining a method of the hook point's name; the pipeline calls it there, in the
order the table of hooks/hook_points.py declares, while the component is `active` (a feature that is off sets it
False once built, and then takes part in no hook point).

Tests: tests/test_pipeline.py (the declared order is the order of the calls; every hook method is declared).
"""

from __future__ import annotations


class Component:
    """One feature of the step (module docstring). `name` is its name in the pipeline."""

    name: str = ""
    active: bool = True

    def __init__(self, trainer):
        self.trainer = trainer
        self.plan = trainer.plan  # the run's facts derived from its config (config/run_plan.py)
        self.state: dict = {}  # what a resumed run gets back (module docstring)

    def owns_state(self, key: str) -> bool:
        """Whether the saved key `key` is this component's (a resume hands it back to `self.state`)."""
        return False

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}{'' if self.active else ' (off)'}>"
