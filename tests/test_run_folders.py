"""A run's folder is claimed atomically: runs started at the same moment get folders of their own (`os.mkdir` over
the candidate names, not a check then a create); the default name says what distinguishes the run (task, loss or
preset, speed recipe); a folder named by the user that another run has just created is not shared."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

import trl_zoo.cli.arguments
from trl_zoo.cli import main
from trl_zoo.cli.arguments import ConfigError, parse_train_args
from trl_zoo.cli.run_folder import claim_run_folder

from .test_cli import TINY_RL, local_sums


def test_claims_started_together_get_a_folder_each(tmp_path):
    base = str(tmp_path / "runs" / "addition-grpo")
    count = 8
    start, claimed = threading.Barrier(count), []

    def claim():
        start.wait()
        claimed.append(claim_run_folder(base, rename=True))

    threads = [threading.Thread(target=claim) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    folders = sorted(folder for folder, created in claimed)
    assert len(set(folders)) == count and all(created for _, created in claimed)
    assert set(folders) == {base} | {f"{base}-{n}" for n in range(2, count + 1)}
    assert all(Path(folder).is_dir() for folder in folders)


def test_counting_on_from_a_numbered_default_name(tmp_path):
    base = tmp_path / "runs" / "addition-grpo"
    base.mkdir(parents=True)
    Path(f"{base}-2").mkdir()
    assert claim_run_folder(f"{base}-2", rename=True) == (f"{base}-3", True)


def test_a_user_named_folder_taken_by_another_run_is_refused(tmp_path):
    folder = tmp_path / "mine"
    assert claim_run_folder(str(folder), rename=False, existed=False) == (str(folder), True)
    with pytest.raises(ConfigError, match=r"^output_dir: .*mine was created by another run starting at the same "):
        claim_run_folder(str(folder), rename=False, existed=False)  # it did not exist when this run started
    assert claim_run_folder(str(folder), rename=False, existed=True) == (str(folder), False)  # the user's own folder


def test_the_default_name_has_the_task_the_loss_and_the_speed_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = parse_train_args(["--task", "chat_arithmetic", "--speed_recipe", "lora", "--use_cpu", "true"],
                            log=lambda *a: None)
    assert args.training.output_dir == "runs/chat_arithmetic-grpo-lora"
    assert parse_train_args(["--task", "chat_arithmetic"], log=lambda *a: None).training.output_dir == (
        "runs/chat_arithmetic-grpo")


def test_a_run_whose_default_folder_was_taken_after_parsing_trains_in_the_next(tmp_path, monkeypatch):
    """Another run created the folder between this run's parsing and its start: this one moves to `-2`."""
    monkeypatch.chdir(tmp_path)
    chosen = trl_zoo.cli.arguments.next_free_directory

    def taken_meanwhile(path):
        name = chosen(path)
        Path(name).mkdir(parents=True)  # the other run, started in the same millisecond
        return name

    monkeypatch.setattr(trl_zoo.cli.arguments, "next_free_directory", taken_meanwhile)
    assert main(["train", *local_sums(tmp_path), *TINY_RL]) == 0  # no --output_dir: the default
    assert not any(Path("runs/sums-dapo").iterdir())  # the other run's folder is left alone (TRL's loss: dapo)
    assert json.loads(Path("runs/sums-dapo-2/summary.json").read_text())["steps"] == 2
