"""The lines `trl-zoo train` prints while it trains (`ConciseProgress`), in place of transformers' printer and
progress bar: one line per logging step, and one per TRL evaluation; when a step is slow (over `slow_step_seconds`, a
real model on a CPU), one more as each next step begins, so that a step of minutes is not minutes of silence.

Tests: tests/test_cli_messages.py (the step a held-out value was measured at), tests/test_heldout_mean_reward.py,
tests/test_cpu_run_notice.py (the line of a slow step).
"""

from __future__ import annotations

import time

from transformers import TrainerCallback

from ...tasks.evaluation import HeldOutAccuracyCallback, HeldOutResult
from ...tasks.evaluation import format_mean_reward as mean_text


class ConciseProgress(TrainerCallback):
    """One line per logging step: step, sampled reward, latest held-out accuracy and mean reward with the step they
    were measured at, elapsed time. The trainer also logs the last step, so a run shorter than logging_steps (or not
    a multiple of it) shows and records its end."""

    slow_step_seconds = 30.0  # a step longer than this gets a line as the next one begins

    def __init__(self, accuracy_callback: HeldOutAccuracyCallback | None, log=print):
        self.accuracy_callback = accuracy_callback
        self.log = log
        self.started = time.perf_counter()
        self.step_started = self.last_step_seconds = None  # this step's start, the last step's seconds

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()
        self.step_started = self.last_step_seconds = None

    def on_step_begin(self, args, state, control, **kwargs):
        self.step_started = time.perf_counter()
        if self.last_step_seconds is not None and self.last_step_seconds > self.slow_step_seconds:
            self.log(f"  step {state.global_step + 1:>4}/{state.max_steps}  generating, then training (step "
                     f"{state.global_step} took {self.last_step_seconds:.0f} s)")

    def on_step_end(self, args, state, control, **kwargs):
        if self.step_started is not None:
            self.last_step_seconds = time.perf_counter() - self.step_started
        if state.global_step >= state.max_steps:
            control.should_log = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "eval_reward" in logs:
            self.log(f"  step {state.global_step:>4}/{state.max_steps}  TRL eval reward {logs['eval_reward']:.3f}")
        if logs and "reward" in logs:
            self.log(
                f"  step {state.global_step:>4}/{state.max_steps}  reward {logs['reward']:.3f}  "
                f"{self.latest_heldout()}({time.perf_counter() - self.started:.0f} s)"
            )

    def latest_heldout(self) -> str:
        """The latest held-out measurement and the step it was made at (evaluations are rarer than log lines); nothing
        without a held-out set."""
        if self.accuracy_callback is None:
            return ""
        history = self.accuracy_callback.history
        if not history:
            return "held-out —  "
        step, accuracy = history[-1]
        result = self.accuracy_callback.results[step]
        mean = f", mean reward {mean_text(result.mean_reward)}" if isinstance(result, HeldOutResult) else ""
        return f"held-out {accuracy:.1%}{mean} (at step {step})  "
