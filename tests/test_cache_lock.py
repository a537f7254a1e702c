"""One process builds a cache entry; the others wait for it (`trl_zoo/io/cache_lock.py`).

The race of issue 27: the processes of `accelerate launch` all bootstrapped the quickstart's policy into the same
folder at once. The process group already existed, so transformers wrote the model's files only on rank 0; when
another rank's staging folder (tokenizer and record, no model) was renamed into place first, every process failed to
load the entry. Here two real processes meet at one entry, under a launch and as two plain runs started together."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.two_processes import REPO, launch_two_processes
from trl_zoo.io.cache_lock import build_once, lock_path
from trl_zoo.tasks.bootstrap import is_policy_entry


def built_and_waited(processes: list[dict]) -> tuple[int, int]:
    built = sum(any(line.startswith("Bootstrapping") for line in p["logs"]) for p in processes)
    waited = sum(any(line.startswith("Waiting for another process") for line in p["logs"]) for p in processes)
    return built, waited


def assert_one_built_and_all_loaded(processes: list[dict]):
    assert len(processes) == 2
    assert built_and_waited(processes) == (1, 1)
    assert all("config.json" in p["files"] and "model.safetensors" in p["files"] for p in processes)
    assert processes[0]["weight_sum"] == processes[1]["weight_sum"] != 0


def test_the_processes_of_a_launch_build_the_policy_once(tmp_path):
    result = launch_two_processes("bootstrap_race.py", tmp_path / "result.json", str(tmp_path / "cache"))
    assert_one_built_and_all_loaded(result["processes"])


def test_two_runs_started_together_build_the_policy_once(tmp_path):
    environment = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    outputs = [tmp_path / f"run{i}.json" for i in (0, 1)]
    runs = [
        subprocess.Popen([sys.executable, str(REPO / "tests" / "scripts" / "bootstrap_race.py"), str(output),
                          str(tmp_path / "cache")], cwd=REPO, env=environment, stderr=subprocess.PIPE, text=True)
        for output in outputs
    ]
    for run in runs:
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr[-3000:]
    assert_one_built_and_all_loaded([json.loads(o.read_text())["processes"][0] for o in outputs])


def test_a_failed_build_leaves_no_entry_and_the_next_caller_builds(tmp_path):
    target = tmp_path / "entry"

    def fail(staging: Path):
        (staging / "half").write_text("x")
        raise RuntimeError("build failed")

    with pytest.raises(RuntimeError, match="build failed"):
        build_once(target, fail, log=lambda _: None)
    assert not target.exists() and [p.name for p in tmp_path.iterdir()] == [lock_path(target).name]
    build_once(target, lambda staging: (staging / "done").write_text("y"), log=lambda _: None)
    assert (target / "done").read_text() == "y"
    assert build_once(target, lambda staging: pytest.fail("built twice"), log=lambda _: None) == target


def test_an_incomplete_entry_is_rebuilt(tmp_path):
    """An entry an older version left without its model (the race above) is moved aside and built again."""
    target = tmp_path / "policy"
    target.mkdir()
    (target / "bootstrap.json").write_text("{}")
    (target / "tokenizer.json").write_text("{}")
    assert not is_policy_entry(target)
    logs = []

    def build(staging: Path):
        for name in ("config.json", "bootstrap.json"):
            (staging / name).write_text("{}")

    build_once(target, build, is_policy_entry, logs.append)
    assert is_policy_entry(target) and not (target / "tokenizer.json").exists()
    assert logs == [f"Rebuilding the incomplete cache entry {target}"]


def test_a_waiter_blocks_until_the_holder_releases_the_lock(tmp_path):
    """In one process, from two threads: flock locks belong to open files, so a second open of the lock file waits."""
    target = tmp_path / "entry"
    holding, release, order = threading.Event(), threading.Event(), []

    def slow_build(staging: Path):
        holding.set()
        release.wait(30)
        order.append("built")
        (staging / "done").write_text("y")

    builder = threading.Thread(target=build_once, args=(target, slow_build), kwargs={"log": lambda _: None})
    builder.start()
    assert holding.wait(30)
    logs = []
    waiter = threading.Thread(
        target=lambda: order.append(build_once(target, lambda s: order.append("built again"), log=logs.append))
    )
    waiter.start()
    while not logs and waiter.is_alive():
        waiter.join(0.05)
    release.set()
    builder.join(30)
    waiter.join(30)
    assert order == ["built", target] and logs == [f"Waiting for another process to finish building {target} ..."]
