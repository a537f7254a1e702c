"""A run on the CPU with a real model says so at its start, with measured estimates and how to make the run smaller;
the held-out evaluation says how far it is. A tiny model stands in for the real one (the size threshold lowered), so
that the test takes seconds: the notice's numbers are measured on whatever model the run trains."""

from __future__ import annotations

import json
import re
import types

import pytest

from trl_zoo.cli import main
from trl_zoo.cli.environment import cpu_run_notice
from trl_zoo.cli.environment.cpu_run_notice import EARLY_END_SHARE, estimated, evaluation_count, time_range
from trl_zoo.cli.train import progress
from trl_zoo.cli.train.progress import ConciseProgress
from trl_zoo.tasks import evaluation
from trl_zoo.tasks.evaluation import EvaluationProgress, greedy_evaluation

from . import tiny


@pytest.fixture(autouse=True)
def in_a_fresh_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def cpu_run(tmp_path, *extra) -> list[str]:
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{a}=", "answer": str(2 * a)}) + "\n" for a in range(10, 40)))
    argv = ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data), "--use_cpu", "true",
            "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "4",
            "--max_steps", "2", "--logging_steps", "1", "--write_report", "false", "--num_heldout", "12",
            "--eval_batch_size", "4", "--eval_every_steps", "1", "--output_dir", str(tmp_path / "run"), *extra]
    assert main(argv) == 0
    return argv


def test_a_real_model_on_the_cpu_gets_a_notice_with_measured_numbers(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cpu_run_notice, "REAL_MODEL_PARAMETERS", 0)  # the tiny model plays the real one
    cpu_run(tmp_path)
    out = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(out) if line.startswith("No GPU found: training a "))
    assert "M-parameter model on the CPU (" in out[start]
    estimate = out[start + 1]
    span = r"[\d.]+–[\d.]+ (s|min)"
    assert re.match(rf"^Estimate: {span} and about [\d.]+ GB peak per step \(8 completions of up to 4 tokens\), "
                    rf"{span} and about [\d.]+ GB peak per held-out evaluation \(12 prompts, 3 evaluations\); the "
                    rf"run {span}\. Measured just now on this model: 8 greedy tokens for 2 and for 8 prompts",
                    estimate), estimate
    assert "the upper end with every completion at full length, the lower with them ending at 0.4 of it" in estimate
    assert "the peak memory 1.3x what was sampled" in estimate
    assert out[start + 2].startswith("Smaller: fewer --max_steps; a smaller held-out set (--num_heldout N)")
    assert "or a GPU." in out[start + 2]
    assert start < next(i for i, line in enumerate(out) if line.startswith("Training with"))


def test_a_tiny_model_gets_no_notice(tmp_path, capsys):
    cpu_run(tmp_path)
    assert "No GPU found" not in capsys.readouterr().out


def test_the_held_out_evaluation_says_how_far_it_is(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(evaluation, "PROGRESS_SECONDS", 0.0)  # a line after every batch but the last
    cpu_run(tmp_path)
    lines = [line for line in capsys.readouterr().out.splitlines() if "held-out evaluation:" in line]
    # 3 evaluations (steps 0, 1, 2) of 12 prompts in batches of 4
    assert [line.split(": ")[1].split(" ")[0] for line in lines] == ["4/12", "8/12"] * 3
    assert all(re.fullmatch(r"  held-out evaluation: \d+/12 prompts \(\d+ s\)", line) for line in lines)


def test_progress_lines_come_every_few_seconds_not_every_batch():
    lines = []
    progress = EvaluationProgress(lines.append, every_seconds=3600)
    for done in range(4, 100, 4):
        progress(done, 100)
    assert lines == []
    prompts = [f"{a}+{a}=" for a in range(10, 22)]
    greedy_evaluation(tiny.model(), tiny.tokenizer(), prompts, max_new_tokens=2, batch_size=5,
                      reward_kwargs={"answer": ["1"] * 12}, progress=EvaluationProgress(lines.append, 0.0))
    assert [line.split(": ")[1].split(" ")[0] for line in lines] == ["5/12", "10/12"]


def test_evaluation_count_matches_the_callbacks_schedule():
    assert evaluation_count(2, 1) == 3  # steps 0, 1, 2
    assert evaluation_count(200, 50) == 5  # 0, 50, 100, 150, 200
    assert evaluation_count(7, 5) == 3  # 0, 5, 7
    assert evaluation_count(200, 50, resumed_at=100) == 2  # 150, 200


def test_times_are_a_range_from_early_ends_to_full_length_rounded_outwards():
    # chat_arithmetic's two steps: 26 min estimated at full length, 12 min measured
    assert estimated(26 * 60) == "10–30 min" and EARLY_END_SHARE * 26 < 12 < 26
    assert time_range(100, 250) == "1–5 min"
    assert time_range(12.3, 30.2) == "12–31 s"
    assert time_range(0.44, 1.12) == "0.4–1.2 s"


def test_a_slow_step_gets_a_line_as_the_next_one_begins(monkeypatch):
    clock = iter([0.0, 0.0, 0.0, 280.0, 280.0, 285.0, 285.0, 290.0])  # built, train begins, each step's begin, end
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    lines = []
    printer = ConciseProgress(None, lines.append)
    state = types.SimpleNamespace(global_step=0, max_steps=3)
    control = types.SimpleNamespace(should_log=False)
    printer.on_train_begin(None, state, control)
    for _ in range(3):  # steps of 280 s, then 5 s
        printer.on_step_begin(None, state, control)
        state.global_step += 1
        printer.on_step_end(None, state, control)
    assert lines == ["  step    2/3  generating, then training (step 1 took 280 s)"]  # none after the 5 s step
