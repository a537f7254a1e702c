"""The lines `trl-zoo train` prints while it trains (`ConciseProgress`), in place of transformers' printer and
progress bar: one line per logging step, and one per TRL evaluation.

Tests: tests/test_cli_messages.py (the step a held-out value was measured at), tests/test_heldout_mean_reward.py.
"""

from __future__ import annotations

import time

from transformers import TrainerCallback

from ..tasks.evaluation import HeldOutAccuracyCallback, HeldOutResult
from ..tasks.evaluation import format_mean_reward as mean_text


class ConciseProgress(TrainerCallback):
    """One line per logging step: step, sampled reward, latest held-out accuracy and mean reward with the step they
    were measured at, elapsed time. The trainer also logs the last step, so a run shorter than logging_steps (or not
    a multiple of it) shows and records its end."""

    def __init__(self, accuracy_callback: HeldOutAccuracyCallback | None, log=print):
        self.accuracy_callback = accuracy_callback
        self.log = log
        self.started = time.perf_counter()

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
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
