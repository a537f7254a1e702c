"""Errors a user meets outside configuration proper, each one line naming the file or field and the fix, no traceback:
an output_dir that cannot be written, a full disk while saving a checkpoint, a damaged GGUF file, a torn metrics.jsonl,
a reward that returns an (n, 1) array, a builtin as a reward path, a YAML of nested aliases; large values are cut."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from trl_zoo.cli import main
from trl_zoo.cli.errors import ConfigError
from trl_zoo.cli.report.run_log import RunLog, read_records
from trl_zoo.cli.rewards.reward_names import resolve_reward
from trl_zoo.components.rewards import RewardOutputError, check_reward_shape
from trl_zoo.io.gguf_checkpoint import GGUFError, dense_checkpoint

from . import tiny

SMALL_RUN = ["--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "4",
             "--logging_steps", "1", "--write_report", "false", "--num_heldout", "4", "--eval_batch_size", "4"]


@pytest.fixture(autouse=True)
def in_a_fresh_folder(tmp_path, tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRL_ZOO_CACHE", str(tmp_path_factory.getbasetemp() / "trl_zoo_cache"))


def data_file(tmp_path) -> str:
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{a}+{a}=", "answer": str(2 * a)}) + "\n" for a in range(10, 30)))
    return str(path)


def train_argv(tmp_path, *extra) -> list[str]:
    return ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", data_file(tmp_path), *SMALL_RUN,
            *extra]


def last_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


# -------------------------------------------------------------------------------------------------- output_dir


def test_an_output_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    assert main(train_argv(tmp_path, "--max_steps", "1", "--output_dir", str(taken))) == 2
    line = last_error_line(capsys)
    assert line.startswith(f"trl-zoo train: error: output_dir: cannot write to {taken} (")
    assert line.endswith("give --output_dir a folder you can write to.")


def test_an_output_dir_inside_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    target = tmp_path / "afile" / "run"
    assert main(train_argv(tmp_path, "--max_steps", "1", "--output_dir", str(target))) == 2
    assert last_error_line(capsys).startswith(f"trl-zoo train: error: output_dir: cannot write to {target} (")


def test_an_output_dir_in_a_read_only_folder_is_one_line(tmp_path, capsys, monkeypatch):
    # Tests may run as root, for whom chmod does not block writes: the read-only folder is simulated by making every
    # mkdir under it fail as the operating system would (PermissionError, EACCES).
    locked = tmp_path / "locked"
    locked.mkdir()
    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        if str(path).startswith(str(locked) + os.sep):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    target = locked / "run"
    assert main(train_argv(tmp_path, "--max_steps", "1", "--output_dir", str(target))) == 2
    line = last_error_line(capsys)
    assert line.startswith(f"trl-zoo train: error: output_dir: cannot write to {target} (Permission denied")


# ------------------------------------------------------------------------------------------------------ disk full


def test_a_full_disk_while_saving_a_checkpoint_is_one_line_naming_the_folder(tmp_path, capsys, monkeypatch):
    real_save = torch.save

    def save(obj, f, *args, **kwargs):
        if "checkpoint-" in str(f):
            raise OSError(errno.ENOSPC, "No space left on device", str(f))
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    out = tmp_path / "run"
    argv = train_argv(tmp_path, "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1",
                      "--output_dir", str(out))
    assert main(argv) == 2
    line = last_error_line(capsys)
    assert line.startswith(f"trl-zoo train: error: disk full while saving a checkpoint in {out}: ")
    assert "--save_strategy no" in line and "save_total_limit" in line and "free space" in line


# ----------------------------------------------------------------------------------------------------------- GGUF


def test_a_gguf_of_random_bytes_names_the_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(GGUFError) as caught:
        dense_checkpoint(path, cache=tmp_path / "cache", log=lambda *_: None)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"model_name_or_path: {path} is not a valid GGUF file (")


def test_a_gguf_of_random_bytes_in_the_cli_is_one_line(tmp_path, capsys):
    path = tmp_path / "model.gguf"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    argv = ["train", "--model_name_or_path", str(path), "--dataset_name", data_file(tmp_path), *SMALL_RUN,
            "--max_steps", "1", "--output_dir", str(tmp_path / "run")]
    assert main(argv) == 2
    assert last_error_line(capsys).startswith(f"trl-zoo train: error: model_name_or_path: {path} is not a valid GGUF")


def test_a_truncated_gguf_names_the_file(tmp_path):
    gguf = pytest.importorskip("gguf", reason="the gguf package writes the test's GGUF file")
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("weight", np.ones((64, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1000])
    with pytest.raises(GGUFError) as caught:
        dense_checkpoint(path, cache=tmp_path / "cache", log=lambda *_: None)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"model_name_or_path: {path} is a truncated or damaged GGUF file (")


# ------------------------------------------------------------------------------------------------- metrics.jsonl


def records_file(tmp_path, torn_line: int | None) -> Path:
    lines = [json.dumps({"kind": "train", "step": step, "reward": 0.5}) for step in range(1, 6)]
    if torn_line is not None:
        lines[torn_line] = lines[torn_line][:20]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(lines) + ("\n" if torn_line is None or torn_line < 4 else ""))
    return path


def test_a_torn_last_line_is_dropped_on_resume_with_one_line(tmp_path, capsys):
    path = records_file(tmp_path, torn_line=4)
    run_log = RunLog(path, resume_step=3)
    assert [record["step"] for record in run_log.kept] == [1, 2, 3]
    assert [record["step"] for record in read_records(path)] == [1, 2, 3]  # the file rewritten whole
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{path}: dropped its half-written last line 5 (")


def test_a_bad_line_in_the_middle_names_the_file_and_line(tmp_path):
    path = records_file(tmp_path, torn_line=1)
    with pytest.raises(ConfigError, match=rf"^{path}: line 2 is not JSON \(.*\); "):
        RunLog(path, resume_step=3)


# ----------------------------------------------------------------------------------------------- rewards' values


def test_an_n_by_1_array_says_its_shape_and_type_not_its_repr():
    with pytest.raises(RewardOutputError) as caught:
        check_reward_shape("mine", np.zeros((8, 1)), 8)
    message = str(caught.value)
    assert "\n" not in message and "[[" not in message
    assert message.startswith("reward 'mine': returned a numpy.ndarray of shape (8, 1) (float64) for 8 completions")


def test_short_repr_cuts_large_values_to_one_line():
    from trl_zoo.numerics import short_repr

    assert short_repr("abc") == "'abc'"
    cut = short_repr(list(range(10_000)))
    assert len(cut) <= 80 and "..." in cut and "\n" not in cut
    assert len(short_repr("x" * 500)) <= 80 and "..." in short_repr("x" * 500)
    assert len(short_repr(object(), limit=20)) <= 20
    assert "\n" not in short_repr({"a": "x\ny"} | {str(k): k for k in range(100)}, limit=40)


@pytest.mark.parametrize("path", ["builtins.eval", "os.system", "shutil.rmtree", "subprocess.run"])
def test_a_builtin_or_standard_library_function_is_not_a_reward(path):
    with pytest.raises(ConfigError) as caught:
        resolve_reward(path)
    message = str(caught.value)
    assert message.startswith(f"reward_funcs: {path!r} is not a reward function (")
    assert "my_rewards.reward" in message


def test_a_builtin_as_reward_in_the_cli_is_one_line(tmp_path, capsys):
    assert main(train_argv(tmp_path, "--max_steps", "1", "--reward_funcs", "builtins.eval")) == 2
    assert last_error_line(capsys).startswith("trl-zoo train: error: reward_funcs: 'builtins.eval' is not a reward")


# ------------------------------------------------------------------------------------------------------------ YAML

BILLION_LAUGHS = "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)


def test_a_yaml_of_nested_aliases_is_refused_in_one_short_line(tmp_path, capsys):
    config = tmp_path / "laughs.yaml"
    config.write_text(BILLION_LAUGHS)
    assert len(BILLION_LAUGHS) < 400
    assert main(["train", "--config", str(config)]) == 2
    line = last_error_line(capsys)
    assert len(line) < 300
    assert line.startswith(f"trl-zoo train: error: --config: {config} uses YAML aliases that expand to more than ")


def test_a_yaml_with_a_few_aliases_still_reads(tmp_path):
    from trl_zoo.cli.arguments.train_arguments import read_config

    config = tmp_path / "ok.yaml"
    config.write_text("learning_rate: &lr 0.001\nlora_dropout: 0.0\nx: *lr\n")
    assert read_config(str(config))["x"] == 0.001


def test_a_large_yaml_value_is_cut_in_the_message(tmp_path, capsys):
    config = tmp_path / "big.yaml"
    config.write_text("learning_rate: [" + ", ".join(["1"] * 5000) + "]\n")
    assert main(["train", "--config", str(config)]) == 2
    line = last_error_line(capsys)
    assert line.startswith("trl-zoo train: error: learning_rate: expected a single value, got a list ")
    assert len(line) < 200
