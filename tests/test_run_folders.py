"""A run's folder is claimed atomically and never shared: runs started at the same moment get folders of their own
(`os.mkdir` over the candidate names, not a check then a create); the default name says what distinguishes the run
(task, loss or preset, speed recipe); a folder named by the user is one run's while that run lasts (the lock on its
marker), whether the others started with it or after it; a folder of the user's files is not written into."""

from __future__ import annotations

import fnmatch
import json
import os
import threading
from pathlib import Path

import pytest

import trl_zoo.cli.arguments.train_arguments
import trl_zoo.cli.train.command
from trl_zoo.cli import main
from trl_zoo.cli.arguments.train_arguments import parse_train_args
from trl_zoo.cli.errors import ConfigError
from trl_zoo.cli.train.run_folder import MARKER, claim_run_folder, prepare_run_folder

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
    folders = sorted(folder.path for folder in claimed)
    assert len(set(folders)) == count and all(folder.created for folder in claimed)
    assert set(folders) == {base} | {f"{base}-{n}" for n in range(2, count + 1)}
    assert all(Path(folder).is_dir() for folder in folders)


def test_counting_on_from_a_numbered_default_name(tmp_path):
    base = tmp_path / "runs" / "addition-grpo"
    base.mkdir(parents=True)
    Path(f"{base}-2").mkdir()
    claimed = claim_run_folder(f"{base}-2", rename=True)
    assert (claimed.path, claimed.created) == (f"{base}-3", True)


@pytest.mark.parametrize("exists", [False, True], ids=["new", "empty"])
def test_claims_of_one_named_folder_started_together_give_it_to_one_run(tmp_path, exists):
    folder = tmp_path / "mine"
    if exists:
        folder.mkdir()  # made by the user, empty
    count = 6
    start, claimed, refused = threading.Barrier(count), [], []

    def claim():
        start.wait()
        try:
            claimed.append(claim_run_folder(str(folder), rename=False))
        except ConfigError as error:
            refused.append(str(error))

    threads = [threading.Thread(target=claim) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(claimed) == 1 and len(refused) == count - 1
    holder = json.loads((folder / MARKER).read_text())
    assert holder["pid"] == os.getpid()
    said = f" (pid {os.getpid()} on {holder['host']}, started {holder['started']})"
    for line in refused:  # the holder is named once it has written the marker (a loser may look just before)
        assert line in (f"output_dir: {folder} is in use by another run{who}; give this run its own --output_dir, or "
                        "wait until that run ends." for who in (said, ""))
    claimed[0].release()
    again = claim_run_folder(str(folder), rename=False)  # the run ended: its folder can be claimed (and checked)
    assert again.path == str(folder) and not again.created
    again.release()


def test_a_second_run_into_a_named_folder_in_use_stops_and_the_first_finishes(tmp_path, monkeypatch, capsys):
    """The second run starts once the first has claimed the folder (a second later, or together: the lock decides the
    same)."""
    out = tmp_path / "run"
    argv = ["train", *local_sums(tmp_path), *TINY_RL, "--output_dir", str(out)]
    prepare, second = trl_zoo.cli.train.command.prepare_training, []

    def prepare_while_a_second_run_starts(*args, **kwargs):
        if not second:  # the second run's own preparation, if it got that far, goes straight on
            second.append("started")
            second[0] = main(argv)
        return prepare(*args, **kwargs)

    monkeypatch.setattr(trl_zoo.cli.train.command, "prepare_training", prepare_while_a_second_run_starts)
    assert main(argv) == 0 and second == [2]
    (error,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("trl-zoo")]
    assert error.startswith(f"trl-zoo train: error: output_dir: {out} is in use by another run (pid {os.getpid()} ")
    assert error.endswith("; give this run its own --output_dir, or wait until that run ends.")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "eval"] == [0, 1, 2]  # one run's log, nothing interleaved
    assert json.loads((out / "summary.json").read_text())["steps"] == 2


@pytest.mark.parametrize("where", ["own", "parent"])
def test_a_folder_of_the_users_files_is_refused_and_left_as_it_was(tmp_path, monkeypatch, capsys, where):
    """`--output_dir mine` holding a README.md of yours, or `output_dir: ..` from a YAML: nothing replaced or added."""
    mine = tmp_path / "mine"
    (mine / "work").mkdir(parents=True)
    (mine / "README.md").write_text("my notes\n")
    monkeypatch.chdir(mine / "work")
    output_dir = str(mine) if where == "own" else ".."
    before = sorted(path.relative_to(mine) for path in mine.rglob("*"))
    assert main(["train", *local_sums(tmp_path), *TINY_RL, "--output_dir", output_dir]) == 2
    assert capsys.readouterr().err == (
        f"trl-zoo train: error: output_dir: {output_dir} holds files of no trl-zoo run (README.md, work), which the "
        "run's adapter, README.md and logs could replace; give --output_dir a new or empty folder.\n"
    )
    assert sorted(path.relative_to(mine) for path in mine.rglob("*")) == before
    assert (mine / "README.md").read_text() == "my notes\n"


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
    chosen = trl_zoo.cli.arguments.train_arguments.next_free_directory

    def taken_meanwhile(path):
        name = chosen(path)
        Path(name).mkdir(parents=True)  # the other run, started in the same millisecond
        return name

    monkeypatch.setattr(trl_zoo.cli.arguments.train_arguments, "next_free_directory", taken_meanwhile)
    assert main(["train", *local_sums(tmp_path), *TINY_RL]) == 0  # no --output_dir: the default
    assert not any(Path("runs/sums-dapo").iterdir())  # the other run's folder is left alone (TRL's loss: dapo)
    assert json.loads(Path("runs/sums-dapo-2/summary.json").read_text())["steps"] == 2


def test_a_folder_prepared_for_a_run_is_claimed_with_the_launchers_files_beside_it(tmp_path):
    """A program that launches a run and writes its own log there first (a benchmark) prepares the folder: the run
    claims it; without the preparation the same folder is refused as files of no run."""
    prepared, unprepared = tmp_path / "prepared", tmp_path / "unprepared"
    prepare_run_folder(prepared)
    unprepared.mkdir()
    for folder in (prepared, unprepared):
        (folder / "log.txt").write_text("the launcher's log\n")
    claimed = claim_run_folder(str(prepared), rename=False)
    assert claimed.path == str(prepared) and claimed.marker is not None
    claimed.release()
    with pytest.raises(ConfigError, match="holds files of no trl-zoo run"):
        claim_run_folder(str(unprepared), rename=False)
    assert (prepared / "log.txt").read_text() == "the launcher's log\n"


def test_the_marker_stays_out_of_push_to_hub_and_its_earlier_name_still_marks_a_run(tmp_path):
    """transformers' `Trainer.push_to_hub` leaves out names matching "_*"; a folder a run marked under the marker's
    earlier name (`.trl_zoo_run`) is still a run's, so a fresh run may claim it."""
    assert fnmatch.fnmatch(MARKER, "_*")
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / ".trl_zoo_run").write_text("")
    (earlier / "metrics.jsonl").write_text("")
    claimed = claim_run_folder(str(earlier), rename=False)
    assert claimed.marker is not None and (earlier / MARKER).exists()
    claimed.release()


def link_refusal(path, target) -> str:
    return (
        f"output_dir: {path} is a symbolic link (to {target}), and trl_zoo writes a run's files only into the folder "
        f"itself, never through a link; remove the link, or give --output_dir a folder of its own."
    )


@pytest.mark.parametrize("target_exists", [True, False], ids=["to_a_file", "dangling"])
def test_a_marker_that_is_a_link_is_refused_and_what_it_points_to_left_as_it_was(tmp_path, capsys, target_exists):
    """A run folder shared or copied with `_trl_zoo_run -> ~/.bashrc` in it: the run wrote its marker over the
    file the link points to, outside the folder."""
    outside = tmp_path / "outside.txt"
    if target_exists:
        outside.write_text("not a run's\n")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / MARKER).symlink_to(outside)
    with pytest.raises(ConfigError) as caught:
        claim_run_folder(str(folder), rename=False)
    assert str(caught.value) == link_refusal(folder / MARKER, outside)
    with pytest.raises(ValueError, match="is a symbolic link"):
        prepare_run_folder(folder)
    argv = ["train", *local_sums(tmp_path), *TINY_RL, "--output_dir", str(folder)]
    capsys.readouterr()  # saving the tiny model may print a progress bar
    assert main(argv) == 2
    assert capsys.readouterr().err == f"trl-zoo train: error: {link_refusal(folder / MARKER, outside)}\n"
    assert outside.read_text() == "not a run's\n" if target_exists else not outside.exists()


@pytest.mark.parametrize("mode", ["w", "a", "a+", "wb"])
def test_no_run_file_is_written_through_a_link(tmp_path, mode):
    from trl_zoo.run_files import LinkedRunFileError, open_for_writing, torch_save

    outside = tmp_path / "outside.txt"
    outside.write_text("not a run's\n")
    (tmp_path / "summary.json").symlink_to(outside)
    with pytest.raises(LinkedRunFileError) as caught:
        open_for_writing(tmp_path / "summary.json", mode)
    assert str(caught.value) == link_refusal(tmp_path / "summary.json", outside)
    with open_for_writing(tmp_path / "own.txt", mode) as handle:  # a plain file: written as open() writes it
        handle.write(b"ok" if "b" in mode else "ok")
    assert (tmp_path / "own.txt").read_text() == "ok"
    with pytest.raises(LinkedRunFileError):
        torch_save({"step": 1}, tmp_path / "summary.json")
    assert outside.read_text() == "not a run's\n"


def test_the_run_log_and_the_report_are_not_written_through_links(tmp_path):
    from trl_zoo.cli.report.report import write_report
    from trl_zoo.cli.report.run_log import RunLog, load_run
    from trl_zoo.cli.train.run_summary import RunSummary
    from trl_zoo.run_files import LinkedRunFileError

    outside = tmp_path / "outside.txt"
    outside.write_text("not a run's\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl.tmp").symlink_to(outside)
    with pytest.raises(LinkedRunFileError, match=r"metrics\.jsonl\.tmp is a symbolic link"):
        RunLog(run / "metrics.jsonl")
    (run / "metrics.jsonl.tmp").unlink()
    log = RunLog(run / "metrics.jsonl")
    log.write({"kind": "eval", "step": 0, "heldout_accuracy": 0.5})
    summary = RunSummary(
        name="run", loss_type="grpo", task="sums", model="tiny", reward_funcs=("digit_reward",), seed=0, steps=1,
        accuracy_before=0.5, accuracy_after=0.5, mean_reward_before=0.5, mean_reward_after=0.5, base_policy="tiny",
        updates_per_batch=1, heldout_size=4, best_accuracy=0.5, best_step=0, train_seconds=1.0, total_seconds=1.0,
        adapter_dir=str(run),
    )
    (run / "summary.json").write_text(json.dumps(summary.to_json()))
    report = run / "report"
    report.mkdir()
    (report / "results.md").symlink_to(outside)
    with pytest.raises(LinkedRunFileError, match=r"results\.md is a symbolic link"):
        write_report(report, [load_run(run)])
    assert outside.read_text() == "not a run's\n"
