"""Under a launch, an error of one process before training stops every process alike, said once: two `trl-zoo
train` processes of one gloo process group, each in its own working directory as on two machines (started as a
launcher starts them: RANK, WORLD_SIZE, MASTER_ADDR/PORT), with an output folder unwritable on process 0 only, data
unreadable on process 1 only, and a bad setting on both. Each exits with status 2; the line comes once, from the
process that hit it (the first of them), the other says nothing and shows no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from . import tiny
from .two_processes import REPO, WORKER_TIMEOUT_S, _free_port

ROWS = [{"question": f"{a}+{a + 3}=", "answer": str(2 * a + 3)} for a in range(10, 50)]
SETTINGS = ["--model_name_or_path", tiny.model_dir(), "--dataset_name", "sums.jsonl", "--prompt_column", "question",
            "--num_heldout", "8", "--max_completion_length", "6", "--write_report", "false", "--max_steps", "1",
            "--per_device_train_batch_size", "4", "--num_generations", "4", "--output_dir", "out/run"]


def machine(root, rank: int, rows=ROWS, output_is_a_file: bool = False):
    """Machine `rank`'s working directory: its own copy of the data, and `out` a file where asked."""
    cwd = root / f"m{rank}"
    cwd.mkdir()
    (cwd / "sums.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    if output_is_a_file:
        (cwd / "out").write_text("a file where the run's folder goes\n")
    return cwd


def launch(folders, *extra: str):
    """`trl-zoo train` as processes 0 and 1 of one launch, in `folders`; each one's exit status, stdout and stderr."""
    port = str(_free_port())
    processes = []
    for rank, cwd in enumerate(folders):
        environment = {**os.environ, "ACCELERATE_USE_CPU": "true", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "2", "RANK": str(rank),
                       "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
        processes.append(subprocess.Popen([sys.executable, "-m", "trl_zoo.cli", "train", *SETTINGS, *extra], cwd=cwd,
                                          env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return processes


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    """The three launches, run at the same time."""
    roots = {name: tmp_path_factory.mktemp(name) for name in ("unwritable", "data", "setting")}
    started = {
        "unwritable": launch([machine(roots["unwritable"], 0, output_is_a_file=True),
                              machine(roots["unwritable"], 1)]),
        "data": launch([machine(roots["data"], 0), machine(roots["data"], 1, rows=[{"q": "1+1="}] * 40)]),
        "setting": launch([machine(roots["setting"], 0), machine(roots["setting"], 1)], "--temperature", "0"),
    }
    ended = {}
    for name, processes in started.items():
        outputs = [process.communicate(timeout=WORKER_TIMEOUT_S) for process in processes]
        ended[name] = SimpleNamespace(root=roots[name], status=[process.returncode for process in processes],
                                      err=[err for _, err in outputs])
    return ended


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("trl-zoo train: error: ")]


@pytest.mark.parametrize("name, speaker, line", [
    ("unwritable", 0, "trl-zoo train: error: output_dir: cannot write to out/run ("),
    ("data", 1, "trl-zoo train: error: prompt_column: "),
    ("setting", 0, "trl-zoo train: error: temperature: must be > 0, got 0.0; "),
])
def test_one_process_says_the_error_and_both_exit_with_its_status(launches, name, speaker, line):
    launch = launches[name]
    assert launch.status == [2, 2], launch.err
    said, quiet = launch.err[speaker], launch.err[1 - speaker]
    (error,) = error_lines(said)
    assert error.startswith(line), said
    assert error_lines(quiet) == [] and "Traceback" not in quiet + said, quiet


def test_the_folder_process_0_created_is_removed_when_process_1_fails(launches):
    """A run refused before its first checkpoint removes the folder it created, whichever process was refused."""
    machine_0 = launches["data"].root / "m0"
    assert (machine_0 / "sums.jsonl").exists() and not (machine_0 / "out").exists()
