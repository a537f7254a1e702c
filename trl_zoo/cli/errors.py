"""How a command ends early: `ConfigError`, a configuration problem said in one line naming the field (exit status
2; so is `LinkedRunFileError`, a run file that is a symbolic link, `run_files.py`), and `TrainingInterrupted`,
Ctrl-C during training said in one line (exit status 130), and `AnotherProcessFailed`, under a launch another
process's error, said by that process (its exit status, no word). Here, apart from the commands, so that `trl-zoo`
catches them without importing what the commands need.

Tests: tests/test_cli.py (bad configuration, Ctrl-C).
"""

from ..run_files import LinkedRunFileError


class ConfigError(Exception):
    """A configuration problem, reported as one line naming the field."""


ONE_LINE_ERRORS = (ConfigError, LinkedRunFileError)  # said in one line, exit status 2


class AnotherProcessFailed(Exception):
    """Under a distributed launch, a process failed before training and one process has said so
    (`launch_errors.py`): every process exits with that process's `status`, quietly."""

    def __init__(self, status: int):
        super().__init__(f"another process of the launch failed (exit status {status})")
        self.status = status


class TrainingInterrupted(Exception):
    """Ctrl-C during `trainer.train()`: one line with the step reached, the last checkpoint and how to resume."""


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def error_line(command: str, error: BaseException) -> str:
    """How a command's one-line error is printed (to stderr)."""
    return f"trl-zoo {command}: error: {one_line(error)}"
