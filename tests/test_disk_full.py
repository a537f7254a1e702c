"""A full disk while `trl-zoo train` saves a checkpoint is one line, whichever library was writing: safetensors (the
weights; its error names Rust's "os error 28") or torch.save (optimizer.pt and trl_zoo's files; its error carries no
error number, so the output folder's free space decides). The writers are made to fail as they do on a full disk."""

import errno
import json
import shutil
from collections import namedtuple

import pytest
import safetensors.torch
import torch
from safetensors import SafetensorError

from tests import tiny
from trl_zoo.cli import main
from trl_zoo.cli.environment import disk_errors
from trl_zoo.cli.environment.disk_errors import raise_if_disk_full

SAFETENSORS_FULL = "Error while serializing: I/O error: No space left on device (os error 28)"
TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 960 vs 888"


def run_argv(tmp_path) -> list[str]:
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{a}=", "answer": str(2 * a)}) + "\n" for a in range(10, 30)))
    return ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data), "--max_steps", "1",
            "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "4",
            "--num_heldout", "4", "--eval_batch_size", "4", "--write_report", "false", "--save_strategy", "steps",
            "--save_steps", "1", "--output_dir", str(tmp_path / "run")]


def fail_in_checkpoints(module, name, error, monkeypatch):
    real = getattr(module, name)

    def write(obj, target, *args, **kwargs):
        if "checkpoint-" in str(target):
            raise error
        return real(obj, target, *args, **kwargs)

    monkeypatch.setattr(module, name, write)


@pytest.mark.parametrize("writer", ["safetensors", "torch"])
def test_a_full_disk_while_saving_a_checkpoint_is_one_line(tmp_path, capsys, monkeypatch, writer):
    monkeypatch.chdir(tmp_path)
    if writer == "safetensors":
        fail_in_checkpoints(safetensors.torch, "serialize_file", SafetensorError(SAFETENSORS_FULL), monkeypatch)
    else:
        fail_in_checkpoints(torch, "save", RuntimeError(TORCH_FULL), monkeypatch)
        usage = namedtuple("usage", "total used free")
        monkeypatch.setattr(disk_errors.shutil, "disk_usage", lambda path: usage(2**30, 2**30 - 4096, 4096))
    assert main(run_argv(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"trl-zoo train: error: disk full while saving a checkpoint in {tmp_path / 'run'}: No space left on device; "
        f"free space there, or save less (--save_strategy no, or a smaller --save_total_limit), then resume from the "
        f"last complete checkpoint with --resume_from_checkpoint true."
    )


def test_other_write_errors_keep_their_traceback(tmp_path):
    assert shutil.disk_usage(tmp_path).free >= disk_errors.NEARLY_FULL
    for error in (RuntimeError(TORCH_FULL), SafetensorError(SAFETENSORS_FULL.replace("28", "5")),
                  OSError(errno.EIO, "Input/output error")):
        assert raise_if_disk_full(error, str(tmp_path), "a checkpoint") is None
