"""benchmarks/option_cost.py: options parse, repeats rotate, the summary pools steps and compares with the base on
made-up records, and one tiny CPU study runs end to end (two configurations, real processes). No wall-clock asserts."""

from __future__ import annotations

import json

import pytest

from benchmarks import option_cost
from tests import tiny


def test_options_parse_and_the_base_name_is_reserved():
    definition = "teacher=--teacher_model self --teacher_prompt_template '{prompt} ({answer})'"
    assert option_cost.parse_option(definition) == (
        "teacher", ["--teacher_model", "self", "--teacher_prompt_template", "{prompt} ({answer})"])
    for bad in ("base=--beta 0.1", "no equals sign", "two words=--beta 0.1"):
        with pytest.raises(SystemExit, match="--option"):
            option_cost.parse_option(bad)


def test_repeats_rotate_the_order():
    names = ["base", "a", "b"]
    assert [option_cost.run_order(r, names) for r in range(4)] == [
        ["base", "a", "b"], ["a", "b", "base"], ["b", "base", "a"], ["base", "a", "b"]]


def test_summary_pools_the_timed_steps_and_compares_with_the_base():
    records = [
        {"name": "base", "repeat": 0, "exit_code": 0, "step_seconds": [1.0, 2.0], "peak_memory_gib": 3.0,
         "mean_completion_length": 10.0},
        {"name": "base", "repeat": 1, "exit_code": 0, "step_seconds": [3.0], "peak_memory_gib": 3.5,
         "mean_completion_length": 20.0},
        {"name": "teacher", "repeat": 0, "exit_code": 0, "step_seconds": [3.0, 5.0], "peak_memory_gib": 4.0,
         "mean_completion_length": 12.0},
        {"name": "teacher", "repeat": 1, "exit_code": 1},
    ]
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
            for line in option_cost.summary_table(records, ["base", "teacher"]).splitlines()[2:]}
    # base: median of 1, 2, 3 = 2; teacher: median of 3, 5 = 4 → 2.00 ×; peaks 3.5 and 4.0
    assert rows["base"] == ["2.00", "1.00", "3.50", "+0.00", "15.0", "2/2"]
    assert rows["teacher"] == ["4.00", "2.00", "4.00", "+0.50", "12.0", "1/2"]


def test_a_tiny_study_runs_end_to_end_on_the_cpu(tmp_path):
    base = (f"--task addition --model_name_or_path {tiny.model_dir()} --use_cpu true --bf16 false "
            "--per_device_train_batch_size 4 --num_generations 2 --max_completion_length 4")
    code = option_cost.main(["--out", str(tmp_path), "--base", base, "--option", "two_updates=--num_iterations 2",
                             "--repeats", "1", "--steps", "3"])
    assert code == 0
    records = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [(r["name"], r["exit_code"]) for r in records] == [("base", 0), ("two_updates", 0)]
    assert all(len(r["step_seconds"]) == 1 and r["device"] == "cpu" for r in records)  # step 3 of 3 timed
    summary = (tmp_path / "summary.md").read_text()
    assert "| base |" in summary and "| two_updates |" in summary
