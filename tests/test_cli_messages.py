"""The CLI's own lines: usage and versions, aliases of PEFT field names, progress lines, run folders for own data."""

import json
from pathlib import Path

import pytest

from trl_zoo.cli import main

from . import tiny

TINY_BOOTSTRAP = ["--bootstrap_max_steps", "8", "--bootstrap_hidden_size", "32", "--bootstrap_num_layers", "2"]
TINY_RL = ["--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4", "--logging_steps", "1"]


@pytest.fixture(autouse=True)
def in_a_fresh_folder(tmp_path, tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRL_ZOO_CACHE", str(tmp_path_factory.getbasetemp() / "trl_zoo_cache"))


def test_the_libraries_progress_bars_stay_out_of_the_run(capsys):
    argv = ["train", *TINY_BOOTSTRAP, *TINY_RL, "--write_report", "false", "--output_dir", "run"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    for bar in ("Loading weights", "Writing model shards", "it/s]"):
        assert bar not in captured.out + captured.err
    assert "Bootstrapped in" in captured.out


def test_the_progress_line_says_at_which_step_the_held_out_value_was_measured(capsys):
    argv = ["train", *TINY_BOOTSTRAP, *TINY_RL, "--max_steps", "3", "--eval_every_steps", "2", "--write_report",
            "false", "--output_dir", "run"]
    assert main(argv) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  step ")]
    assert [line.split("(at step ")[1].split(")")[0] for line in lines] == ["0", "2", "3"]
    assert all(", mean reward " in line for line in lines)
