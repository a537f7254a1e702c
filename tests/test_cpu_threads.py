"""`trl-zoo train`'s CPU thread policy (trl_zoo/cli/environment/cpu_threads.py): one torch thread on a CPU, as
`trl grpo`'s launcher gives; the user's OMP_NUM_THREADS / MKL_NUM_THREADS always win; a GPU run is left alone. Timings
are in benchmarks/cpu_threads.py, never asserted here."""

import pytest
import torch

from tests import tiny
from trl_zoo.cli import main
from trl_zoo.cli.environment import cpu_threads
from trl_zoo.cli.environment.cpu_threads import CPU_THREADS, cpu_thread_count


def test_a_cpu_run_without_a_thread_variable_gets_the_launchers_one_thread():
    assert CPU_THREADS == 1
    assert cpu_thread_count({}, uses_gpu=False) == 1
    assert cpu_thread_count({"OMP_NUM_THREADS": ""}, uses_gpu=False) == 1  # set but empty: not a choice


@pytest.mark.parametrize("environ, expected", [
    ({"OMP_NUM_THREADS": "3"}, 3),
    ({"MKL_NUM_THREADS": "5"}, 5),
    ({"OMP_NUM_THREADS": " 2 ", "MKL_NUM_THREADS": "7"}, 2),
    ({"OMP_NUM_THREADS": "many"}, None),  # not a number: left to torch and OpenMP
    ({"OMP_NUM_THREADS": "0"}, None),
])
def test_the_users_thread_variable_wins(environ, expected):
    assert cpu_thread_count(environ, uses_gpu=False) == expected


def test_a_gpu_run_is_left_alone():
    assert cpu_thread_count({}, uses_gpu=True) is None
    assert cpu_thread_count({"OMP_NUM_THREADS": "4"}, uses_gpu=True) is None


@pytest.mark.parametrize("environ, expected", [({}, 1), ({"OMP_NUM_THREADS": "2"}, 2)])
def test_train_sets_torchs_threads_before_it_runs(monkeypatch, tmp_path, environ, expected):
    for name in cpu_threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    seen = []
    monkeypatch.setattr("trl_zoo.cli.train.command.run_train",
                        lambda *args, **kwargs: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        assert main(["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", "unused.jsonl",
                     "--use_cpu", "true", "--output_dir", str(tmp_path / "run")]) == 0
    finally:
        torch.set_num_threads(before)
    assert seen == [expected]
