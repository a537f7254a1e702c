"""`trl-zoo train` without a launcher on a machine with several GPUs trains on the first
(`trl_zoo/cli/environment/one_gpu.py`); the GPU count is faked, the decision and the CLI's use of it are real."""

import os

import pytest
import torch

from trl_zoo import cli
from trl_zoo.cli.environment.one_gpu import one_gpu_choice, use_one_gpu_unless_launched


@pytest.mark.parametrize(
    "environ, count, choice",
    [
        ({}, 2, "0"),
        ({}, 8, "0"),
        ({"CUDA_VISIBLE_DEVICES": "3,5"}, 2, "3"),
        ({"CUDA_VISIBLE_DEVICES": " GPU-8f2e, GPU-11aa"}, 2, "GPU-8f2e"),
        ({}, 1, None),
        ({}, 0, None),
        ({"LOCAL_RANK": "0", "WORLD_SIZE": "2"}, 2, None),  # accelerate launch / torchrun: one GPU per process
        ({"LOCAL_RANK": "0", "WORLD_SIZE": "1"}, 2, None),  # a one-process distributed launch is left alone too
    ],
)
def test_one_gpu_choice(environ, count, choice):
    assert one_gpu_choice(environ, count) == choice


def test_several_gpus_without_a_launcher_keep_the_first_and_say_how_to_use_all(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    environ, logs = {"CUDA_VISIBLE_DEVICES": "2,3"}, []
    assert use_one_gpu_unless_launched(environ, logs.append) == "2"
    assert environ == {"CUDA_VISIBLE_DEVICES": "2"}
    assert logs == [
        "trl-zoo: 2 GPUs visible and no distributed launch: training on one (CUDA_VISIBLE_DEVICES=2). To use all 2: "
        "accelerate launch --config_file configs/accelerate/ddp.yaml --num_processes 2 -m trl_zoo.cli train ..."
    ]


def test_nothing_changes_once_cuda_is_initialised(monkeypatch):
    """An initialised CUDA ignores CUDA_VISIBLE_DEVICES: changing it would only make the message wrong."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    environ, logs = {}, []
    assert use_one_gpu_unless_launched(environ, logs.append) is None and environ == {} and logs == []


@pytest.mark.parametrize("launched, visible", [(False, "0"), (True, None)])
def test_the_cli_chooses_before_it_trains(monkeypatch, capsys, launched, visible):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    for name in ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.setenv(name, "")  # recorded, so that what the CLI sets is undone after the test
        monkeypatch.delenv(name)
    if launched:
        monkeypatch.setenv("LOCAL_RANK", "0")
        monkeypatch.setenv("WORLD_SIZE", "2")
    seen = []
    monkeypatch.setitem(cli.COMMANDS, "train", lambda argv: seen.append(os.environ.get("CUDA_VISIBLE_DEVICES")) or 0)
    assert cli.main(["train", "--max_steps", "1"]) == 0
    assert seen == [visible]
    assert ("training on one (CUDA_VISIBLE_DEVICES=0)" in capsys.readouterr().out) == (not launched)


def test_compare_says_how_to_compare_on_every_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    logs = []
    use_one_gpu_unless_launched({}, logs.append, command="compare")
    assert logs[0].endswith("--num_processes 4 -m trl_zoo.cli compare ...")
