"""Offline built-in tasks and the tiny base models the quickstart and tests use.

`TASKS` maps a task name (`trl-zoo train --task NAME`) to the task; `get_task` looks one up with a clear error.
"""

from .arithmetic import ADDITION, ADDITION3, AdditionTask
from .scratchpad import SCRATCHPAD, SCRATCHPAD_SMALL, ScratchpadAdditionTask

TASKS: dict[str, AdditionTask | ScratchpadAdditionTask] = {
    task.name: task for task in (ADDITION, ADDITION3, SCRATCHPAD, SCRATCHPAD_SMALL)
}


def get_task(name: str) -> AdditionTask | ScratchpadAdditionTask:
    if name not in TASKS:
        raise ValueError(f"task: unknown built-in task {name!r}. Known: {', '.join(sorted(TASKS))}.")
    return TASKS[name]


__all__ = [
    "ADDITION", "ADDITION3", "AdditionTask", "SCRATCHPAD", "SCRATCHPAD_SMALL", "ScratchpadAdditionTask", "TASKS",
    "get_task",
]
