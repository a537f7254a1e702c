"""What a finished `trl-zoo train` run leaves and says: `summary.json` (`RunSummary`), the model card beside the saved
adapter (or model), the closing lines, and the run's own report.

    run_summary(prepared, training_args, train_seconds, started)  ->  RunSummary
    record_and_report(summary, prepared, ...)                      ->  RunSummary, with where its report went

The run's files are written once, by the first process; every process says the closing lines (only the main one's
log prints).

Tests: tests/test_cli.py (summary.json, the closing lines, the report), tests/test_model_card.py,
tests/test_heldout_mean_reward.py (the mean reward beside the accuracy), tests/test_compare_identical.py (the
bootstrapped policy's name), tests/test_configs.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ...config.generation_buffer import generation_cycle
from ...run_files import open_for_writing
from ...tasks.evaluation import format_mean_reward as mean_text
from ...trainer import training_method
from ..report.report import write_report
from ..report.run_log import SUMMARY_FILE, load_run
from .model_card import model_card


@dataclass(frozen=True)
class RunSummary:
    """A finished run, as written to output_dir/summary.json (`to_json`); `report` is where the run's own report
    went, when one was written (it is not in summary.json, which the report reads)."""

    name: str
    loss_type: str
    task: str
    model: str
    reward_funcs: tuple[str, ...]
    seed: int
    steps: int
    accuracy_before: float | None  # the accuracies are None when the run has no held-out set (heldout_size 0)
    accuracy_after: float | None
    mean_reward_before: float | None  # the held-out mean reward (accuracy counts rewards exactly 1)
    mean_reward_after: float | None
    base_policy: str  # model_name_or_path, or which bootstrapped policy (`base_policy_name`)
    updates_per_batch: int  # optimizer updates per generation batch; 1 is on-policy (every ratio 1)
    heldout_size: int
    best_accuracy: float | None
    best_step: int | None
    train_seconds: float
    total_seconds: float
    adapter_dir: str
    report: str | None = None

    def to_json(self) -> dict:
        return {key: value for key, value in dataclasses.asdict(self).items() if key != "report"}


def run_summary(prepared, training_args, train_seconds: float, started: float) -> RunSummary:
    """The run's summary from its trainer and its held-out history (`prepared`: the run's `TrainingSetup`);
    `started` is when the run began (`time.perf_counter()`)."""
    accuracy = prepared.accuracy
    before = after = best = best_step = measured = last = None
    if accuracy is not None:
        history = accuracy.history
        before, after = next(value for step, value in history if step == 0), history[-1][1]
        measured, last = accuracy.results[0], accuracy.results[history[-1][0]]
        best_step, best = max(history, key=lambda point: (point[1], -point[0]))
    return RunSummary(
        name=Path(training_args.output_dir).name,
        loss_type=training_args.loss_type,
        task=prepared.source,
        model=prepared.model_path,
        reward_funcs=prepared.reward_names,
        seed=training_args.seed,
        steps=prepared.trainer.state.global_step,
        accuracy_before=before,
        accuracy_after=after,
        mean_reward_before=measured and measured.mean_reward,
        mean_reward_after=last and last.mean_reward,
        base_policy=base_policy_name(prepared.model_path),
        updates_per_batch=generation_cycle(training_args) // training_args.gradient_accumulation_steps,
        heldout_size=prepared.heldout_size,
        best_accuracy=best,
        best_step=best_step,
        train_seconds=train_seconds,
        total_seconds=time.perf_counter() - started,
        adapter_dir=str(training_args.output_dir),
    )


def record_and_report(summary: RunSummary, prepared, task_args, training_args, model_args, log=print) -> RunSummary:
    """summary.json and the model card (by the first process), the closing lines, and the report when asked for
    (`write_report`; a run without a held-out set has none to write)."""
    main_process = prepared.trainer.accelerator.is_main_process  # the run's files are written once
    if main_process:
        with open_for_writing(Path(training_args.output_dir, SUMMARY_FILE)) as handle:
            handle.write(json.dumps(summary.to_json(), indent=2))
        save_model_card(summary, prepared, prepared.trainer, training_args, model_args,
                        builtin_task=task_args.dataset_name is None and not task_args.datasets)
    outcome = "No held-out evaluation" if prepared.accuracy is None else (
        f"Held-out greedy accuracy after RL: {summary.accuracy_after:.1%}, mean reward "
        f"{mean_text(summary.mean_reward_after)} (before {summary.accuracy_before:.1%}, "
        f"{mean_text(summary.mean_reward_before)}; best accuracy {summary.best_accuracy:.1%} at step "
        f"{summary.best_step})"
    )
    log(f"{outcome}; RL took {summary.train_seconds:.0f} s, the whole run {summary.total_seconds:.0f} s.")
    log(f"{'Adapter' if model_args.use_peft else 'Model'} saved to {training_args.output_dir}")
    if task_args.write_report and prepared.accuracy is None:
        log("No report: it compares held-out accuracy, and this run has no held-out set.")
    elif task_args.write_report and main_process:
        report = write_report(Path(training_args.output_dir) / "report", [load_run(training_args.output_dir)])
        summary = dataclasses.replace(summary, report=str(report))
        log(f"Report: {report}")
    return summary


def save_model_card(summary: RunSummary, prepared, trainer, training_args, model_args, builtin_task: bool):
    """README.md beside the saved adapter (or model): the run's own card (`model_card.py`), replacing PEFT's blank
    template and TRL's card."""
    settings = {
        "steps": f"{summary.steps} (seed {summary.seed})",
        "learning rate": f"{training_args.learning_rate:g}",
        "completions per prompt": training_args.num_generations,
        "max completion length": training_args.max_completion_length,
        "KL coefficient β": f"{training_args.beta:g}",
    }
    if model_args.use_peft:
        settings["LoRA"] = f"r {model_args.lora_r}, alpha {model_args.lora_alpha}"
    method, paper = training_method(trainer.args)  # what the trainer gave TRL's model card
    card = model_card(
        summary.to_json(), method, paper.get("citation"), settings, adapter=model_args.use_peft,
        heldout_reward=prepared.heldout_reward, builtin_task=builtin_task,
    )
    with open_for_writing(os.path.join(training_args.output_dir, "README.md"), newline="") as handle:
        handle.write(str(card))  # as ModelCard.save writes it, never through a link


def base_policy_name(model_path: str) -> str:
    """The base policy as a report names it: a bootstrapped built-in policy by its task and recipe (its folder is
    a cache path), any other model by the name or path it was given."""
    bootstrap = Path(model_path, "bootstrap.json")
    if not bootstrap.is_file():
        return model_path
    made = json.loads(bootstrap.read_text())
    recipe = made.get("recipe", {})
    return (
        f"{made.get('task', 'the task')}'s bootstrapped policy (hidden {recipe.get('hidden_size')}, "
        f"{recipe.get('num_layers')} layers, seed {recipe.get('seed')})"
    )
