"""Offline built-in tasks and the tiny base models the quickstart and tests use.

`TASKS` maps a task name (`trl-zoo train --task NAME`) to the task; `get_task` looks one up with a clear error.

Tests: tests/test_quickstart.py (`TASKS`, the unknown-task error), tests/test_chat_arithmetic.py,
tests/test_testbed_task.py.
"""

from .arithmetic import ADDITION, ADDITION3, AdditionTask
from .chat_arithmetic import (
    CHAT_ARITHMETIC,
    CHAT_ARITHMETIC_CALCULATOR,
    CHAT_ARITHMETIC_HARD,
    CHAT_ARITHMETIC_MEDIUM,
    ChatArithmeticTask,
)
from .scratchpad import SCRATCHPAD, SCRATCHPAD_SMALL, ScratchpadAdditionTask

TASKS: dict[str, AdditionTask | ScratchpadAdditionTask | ChatArithmeticTask] = {
    task.name: task
    for task in (
        ADDITION, ADDITION3, SCRATCHPAD, SCRATCHPAD_SMALL, CHAT_ARITHMETIC, CHAT_ARITHMETIC_MEDIUM,
        CHAT_ARITHMETIC_HARD, CHAT_ARITHMETIC_CALCULATOR,
    )
}


def get_task(name: str) -> AdditionTask | ScratchpadAdditionTask | ChatArithmeticTask:
    if name not in TASKS:
        raise ValueError(f"task: unknown built-in task {name!r}. Known: {', '.join(sorted(TASKS))}.")
    return TASKS[name]


__all__ = [
    "ADDITION", "ADDITION3", "AdditionTask", "CHAT_ARITHMETIC", "CHAT_ARITHMETIC_CALCULATOR", "CHAT_ARITHMETIC_HARD",
    "CHAT_ARITHMETIC_MEDIUM",
    "ChatArithmeticTask",
    "SCRATCHPAD", "SCRATCHPAD_SMALL", "ScratchpadAdditionTask", "TASKS", "get_task",
]
