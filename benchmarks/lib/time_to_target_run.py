"""One run of the time-to-target benchmark, in its own process: `trl-zoo train` instrumented with a training clock
that excludes the held-out evaluation, a stop at the target accuracy or at the time budget, counts of completions
and token slots, and peak GPU memory of setup (before the first held-out evaluation: model load), of training and of
the held-out evaluation apart (the device's peak counter is read and reset around each evaluation).

    python benchmarks/lib/time_to_target_run.py --record RUN.jsonl [--trainer trl] [--target A] [--budget_seconds B]
        <trl-zoo train flags>

The clock. T = Σ_steps (end − begin) of each optimizer step (`StepTimer` of real_model_run.py, inserted first among
the callbacks, device synchronised at both ends): generation, rewards, old log-probs, loss, backward and the
optimizer update are inside; the held-out evaluation (taken in a later callback of `on_step_end`, and at step 0 in
`on_train_begin`), logging and checkpoints are outside. The evaluation's own wall time is summed apart
(`eval_seconds`).

The stop (`TargetStop`, the last callback, so it sees the evaluation just taken). At the end of step s, with
clock T_s, the accuracy a_s when the held-out evaluation ran at step s (every `eval_every_steps` and at the last
step), the target a* and the budget B:

    "target"  if a_s ≥ a*                          time to target = T_s
    "cutoff"  if T_s ≥ B   (a_s is measured now if no evaluation ran at s; "target" if it reaches a*)

Either sets `should_training_stop`; with `--to_the_end` only the budget does (the run goes on past the target to
max_steps, so a lever that reaches the target first but ends lower shows it). Without a target and a budget (the
reference run) the run goes to max_steps.
The time to target is resolved at evaluation steps only, so it overstates the time by up to eval_every_steps − 1
steps, for every trainer alike.

The counts (training rounds only, this process's rows): completions generated = rows returned by TRL's
`_generate_and_score_completions` (every round of dynamic sampling); token slots = the training forward's rows ×
completion width (`completion_slots`) and rows × (prompt + completion) width (`sequence_slots`), counted at TRL's
`_get_per_token_logps_and_entropies` when gradients are on (what skip_zero_advantage and length_bucketing save).

Writes one JSON line to `--record` (see `run_record`).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from benchmarks.lib.compile_counts import compile_counts  # noqa: E402
from benchmarks.lib.real_model_run import StepTimer, versions  # noqa: E402


def stop_decision(clock: float, budget: float | None, accuracy: float | None, target: float | None) -> str | None:
    """'target' when an accuracy measured at this step reaches the target, else 'cutoff' when the clock has reached
    the budget, else None (see the module docstring)."""
    if target is not None and accuracy is not None and accuracy >= target:
        return "target"
    if budget is not None and clock >= budget:
        return "cutoff"
    return None


class Counts:
    """Completions generated and token slots of the training forwards (see the module docstring)."""

    def __init__(self):
        self.completions = 0
        self.completion_slots = 0
        self.sequence_slots = 0


def count_into(counts: Counts) -> None:
    """Wrap TRL's generation and per-token log-prob methods (class-wide: one run per process)."""
    from trl import GRPOTrainer as TRLGRPOTrainer

    generate = TRLGRPOTrainer._generate_and_score_completions
    logps = TRLGRPOTrainer._get_per_token_logps_and_entropies

    @functools.wraps(generate)  # the door's drift check reads the signature through __wrapped__
    def counted_generate(self, inputs):
        batch = generate(self, inputs)
        if self.model.training:
            counts.completions += int(batch["completion_ids"].size(0))
        return batch

    @functools.wraps(logps)
    def counted_logps(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        if torch.is_grad_enabled() and model.training:
            counts.completion_slots += int(input_ids.size(0)) * int(logits_to_keep)
            counts.sequence_slots += int(input_ids.numel())
        return logps(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)

    TRLGRPOTrainer._generate_and_score_completions = counted_generate
    TRLGRPOTrainer._get_per_token_logps_and_entropies = counted_logps


class TargetStop(TrainerCallback):
    """Stops training at the target or the budget (`stop_decision`); keeps the accuracy curve [(step, a, T)].
    `to_the_end`: the target does not stop the run (only the budget or max_steps do), so the curve shows where a
    run that reached the target first ends."""

    def __init__(self, clock: StepTimer, accuracy_callback, target: float | None, budget: float | None,
                 to_the_end: bool = False):
        self.clock = clock
        self.accuracy = accuracy_callback
        self.target = target
        self.budget = budget
        self.to_the_end = to_the_end
        self.curve: list[tuple[int, float, float]] = []
        self.reason: str | None = None
        self.stop_step: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.accuracy.history and self.accuracy.history[0][0] == 0:
            self.curve.append((0, self.accuracy.history[0][1], 0.0))

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step, clock = state.global_step, sum(self.clock.seconds)
        history = self.accuracy.history
        accuracy = history[-1][1] if history and history[-1][0] == step else None
        if accuracy is not None:
            self.curve.append((step, accuracy, clock))
        decision = stop_decision(clock, self.budget, accuracy, self.target)
        if decision == "cutoff" and accuracy is None:
            self.accuracy.measure(model, step, state)
            accuracy = self.accuracy.history[-1][1]
            self.curve.append((step, accuracy, clock))
            decision = stop_decision(clock, self.budget, accuracy, self.target)
        if decision == "target" and self.to_the_end:
            decision = "cutoff" if self.budget is not None and clock >= self.budget else None
        if decision is not None:
            self.reason, self.stop_step = decision, step
            control.should_training_stop = True
        return control


class Instrumentation:
    """What one run collects; `trainer_class(base)` builds the instrumented trainer class."""

    def __init__(self, target: float | None, budget: float | None, to_the_end: bool = False):
        self.to_the_end = to_the_end
        self.clock = StepTimer()
        self.counts = Counts()
        self.target, self.budget = target, budget
        self.eval_seconds = 0.0
        self.evaluations = 0
        self.setup_peak = 0  # bytes: before the first held-out evaluation (model load, GGUF conversion)
        self.training_peak = 0  # bytes: device peaks from the first step on, held-out evaluations excluded
        self.evaluation_peak = 0  # bytes: the highest peak of one held-out evaluation
        self.stop: TargetStop | None = None

    def timed(self, evaluate):
        def timed_evaluate(model):
            cuda = torch.cuda.is_available()
            if cuda:
                torch.cuda.synchronize()
                if self.evaluations:
                    self.close_training_peak()
                else:  # the evaluation before the first step: what came before it is setup (model load, conversion)
                    self.setup_peak = torch.cuda.max_memory_allocated()
                    torch.cuda.reset_peak_memory_stats()
            started = time.perf_counter()
            result = evaluate(model)
            if cuda:
                torch.cuda.synchronize()
                self.evaluation_peak = max(self.evaluation_peak, torch.cuda.max_memory_allocated())
                torch.cuda.reset_peak_memory_stats()
            self.eval_seconds += time.perf_counter() - started
            self.evaluations += 1
            return result

        return timed_evaluate

    def close_training_peak(self) -> None:
        """Fold the peak since the last reset into the training peak and reset it: the device's peak counter then
        covers either training or one held-out evaluation, never both."""
        self.training_peak = max(self.training_peak, torch.cuda.max_memory_allocated())
        torch.cuda.reset_peak_memory_stats()

    def trainer_class(self, base):
        from trl_zoo.tasks.evaluation import HeldOutAccuracyCallback

        instrumentation = self

        class Instrumented(base):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                callbacks = self.callback_handler.callbacks
                accuracy = next(c for c in callbacks if isinstance(c, HeldOutAccuracyCallback))
                accuracy.evaluate = instrumentation.timed(accuracy.evaluate)
                callbacks.insert(0, instrumentation.clock)  # first: the evaluation falls outside the timed span
                instrumentation.stop = TargetStop(
                    instrumentation.clock, accuracy, instrumentation.target, instrumentation.budget,
                    instrumentation.to_the_end,
                )
                callbacks.append(instrumentation.stop)  # last: sees the evaluation of this step

        Instrumented.__name__ = base.__name__
        return Instrumented


def time_to_target(curve: list[tuple[int, float, float]], target: float | None) -> tuple[int, float] | None:
    """(step, T) of the first evaluation with a ≥ target, or None."""
    if target is None:
        return None
    return next(((step, clock) for step, accuracy, clock in curve if accuracy >= target), None)


def run_record(instrumentation: Instrumentation, trainer: str, code: int) -> dict:
    """The run's JSON line: clock, evaluation time, stop, curve, counts, peak memory, device, versions."""
    stop = instrumentation.stop
    curve = stop.curve if stop is not None else []
    reached = time_to_target(curve, instrumentation.target)
    cuda = torch.cuda.is_available()
    return {
        "trainer": trainer,
        "exit_code": code,
        "steps": len(instrumentation.clock.seconds),
        "training_seconds": sum(instrumentation.clock.seconds),
        "step_seconds": instrumentation.clock.seconds,
        "eval_seconds": instrumentation.eval_seconds,
        "evaluations": instrumentation.evaluations,
        "target": instrumentation.target,
        "budget_seconds": instrumentation.budget,
        "to_the_end": instrumentation.to_the_end,
        "stop_reason": (stop.reason or "max_steps") if stop is not None else None,
        "reached": reached is not None,
        "step_at_target": reached[0] if reached else None,
        "time_to_target": reached[1] if reached else None,
        "accuracy_before": curve[0][1] if curve and curve[0][0] == 0 else None,
        "accuracy_at_stop": curve[-1][1] if curve else None,
        "curve": curve,
        "completions": instrumentation.counts.completions,
        "completion_slots": instrumentation.counts.completion_slots,
        "sequence_slots": instrumentation.counts.sequence_slots,
        "peak_memory_gib": max(instrumentation.setup_peak, instrumentation.training_peak,
                               instrumentation.evaluation_peak) / 2**30 if cuda else None,
        "setup_peak_memory_gib": instrumentation.setup_peak / 2**30 if cuda else None,
        "training_peak_memory_gib": instrumentation.training_peak / 2**30 if cuda else None,
        "evaluation_peak_memory_gib": instrumentation.evaluation_peak / 2**30 if cuda else None,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "versions": versions(),
        "compile": compile_counts(),
    }


def main(argv: list[str]) -> int:
    import trl

    import trl_zoo.cli.train.training_setup
    from trl_zoo.cli import main as cli_main

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", required=True)
    parser.add_argument("--trainer", choices=["trl_zoo", "trl"], default="trl_zoo")
    parser.add_argument("--target", type=float, default=None)
    parser.add_argument("--budget_seconds", type=float, default=None)
    parser.add_argument("--to_the_end", action="store_true", help="Reaching the target does not stop the run.")
    parser.add_argument("--profile_blocks", action="store_true",
                        help="Also record TRL's profiled blocks per step (benchmarks/lib/block_times.py; adds syncs).")
    args, train_argv = parser.parse_known_args(argv)
    instrumentation = Instrumentation(args.target, args.budget_seconds, args.to_the_end)
    blocks = None
    if args.profile_blocks:
        from benchmarks.lib.block_times import BlockTimes

        blocks = BlockTimes()
        blocks.install()
    count_into(instrumentation.counts)
    base = trl.GRPOTrainer if args.trainer == "trl" else trl_zoo.cli.train.training_setup.GRPOTrainer
    trl_zoo.cli.train.training_setup.GRPOTrainer = instrumentation.trainer_class(base)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    code = cli_main(["train", *train_argv])
    if torch.cuda.is_available():
        instrumentation.close_training_peak()  # the steps after the last evaluation
    record = run_record(instrumentation, args.trainer, code)
    if blocks is not None:
        record["block_seconds"] = blocks.as_record()
    Path(args.record).parent.mkdir(parents=True, exist_ok=True)
    with open(args.record, "a") as handle:
        handle.write(json.dumps(record) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
