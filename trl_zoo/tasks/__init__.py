"""Offline built-in tasks and the tiny base models the quickstart and tests use.

`TASKS` maps a task name (`trl-zoo train --task NAME`) to the task; `get_task` looks one up with a clear error.
"""

from .arithmetic import ADDITION, ADDITION3, AdditionTask

TASKS: dict[str, AdditionTask] = {task.name: task for task in (ADDITION, ADDITION3)}


def get_task(name: str) -> AdditionTask:
    if name not in TASKS:
        raise ValueError(f"task: unknown built-in task {name!r}. Known: {', '.join(sorted(TASKS))}.")
    return TASKS[name]


__all__ = ["ADDITION", "ADDITION3", "AdditionTask", "TASKS", "get_task"]
