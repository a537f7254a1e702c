"""A YAML `env:` block acts like variables set in the shell, also those the libraries read when they are imported
(HF_DATASETS_CACHE, HF_HOME, ...): the `trl-zoo` command sets them and starts itself again before training, since
the first start has imported the libraries already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trl_zoo.cli.arguments.config_env import apply_config_env
from trl_zoo.cli.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def write_config(tmp_path, text: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return str(path)


def test_new_variables_are_set_and_the_command_starts_again(tmp_path, monkeypatch):
    monkeypatch.delenv("TRL_ZOO_TEST_ENV", raising=False)
    restarts = []
    config = write_config(tmp_path, "env:\n  TRL_ZOO_TEST_ENV: 7\nlearning_rate: 0.1\n")
    apply_config_env(["--config", config], restart=lambda: restarts.append(os.environ["TRL_ZOO_TEST_ENV"]))
    assert restarts == ["7"]  # set (as text, as TRL sets them) before the restart
    apply_config_env(["--config", config], restart=lambda: restarts.append("again"))
    assert restarts == ["7"]  # already set: no second start


def test_no_env_block_no_restart(tmp_path):
    restarts = []
    apply_config_env(["--config", write_config(tmp_path, "learning_rate: 0.1\n")], restart=lambda: restarts.append(1))
    apply_config_env([], restart=lambda: restarts.append(1))
    assert restarts == []


def test_an_env_block_that_is_not_a_mapping_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^env: .* must map variable names to values"):
        apply_config_env(["--config", write_config(tmp_path, "env: [A, B]\n")], restart=lambda: None)


def test_an_env_value_that_is_a_list_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^env: A in .* must be one value \(text or a number\), got a list\.$"):
        apply_config_env(["--config", write_config(tmp_path, "env:\n  A: [1, 2]\n")], restart=lambda: None)


LAUGHS = "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)  # nine levels of aliases: 9**9 values in under 400 bytes


@pytest.mark.parametrize("env", ["env:\n  TRL_ZOO_LAUGHS: *i\n", "env: *i\n"])
def test_an_env_block_made_of_nested_aliases_is_one_line_not_a_hang(tmp_path, monkeypatch, env):
    """The alias limit of the config file covers `env:` too, before anything spells the aliases out."""
    monkeypatch.delenv("TRL_ZOO_LAUGHS", raising=False)
    config = write_config(tmp_path, LAUGHS + env)
    with pytest.raises(ConfigError, match=r"^--config: .* uses YAML aliases that expand to more than 100,000 values"):
        apply_config_env(["--config", config], restart=lambda: pytest.fail("restarted"))
    assert "TRL_ZOO_LAUGHS" not in os.environ


@pytest.mark.parametrize("entry, message", [
    ('"A=B": 1', r"^env: 'A=B' in .* is not a variable name: give a non-empty name without '=' or NUL bytes"),
    ('"": 1', r"^env: '' in .* is not a variable name"),
    ('A: "x\\0y"', r"^env: A in .* holds a NUL byte, which no environment variable can hold: remove it"),
])
def test_an_env_entry_no_environment_can_hold_is_one_line(tmp_path, entry, message):
    with pytest.raises(ConfigError, match=message):
        apply_config_env(["--config", write_config(tmp_path, f"env:\n  {entry}\n")], restart=lambda: None)


def test_hf_datasets_cache_from_the_config_file_is_the_cache_datasets_uses(tmp_path):
    """datasets reads HF_DATASETS_CACHE when it is imported: the command's data cache lands where env: says."""
    data = tmp_path / "sums.jsonl"
    data.write_text("\n".join(json.dumps({"question": f"{a}+1=", "answer": str(a + 1)}) for a in range(20)))
    cache = tmp_path / "datasets_cache"
    config = write_config(tmp_path, f"env:\n  HF_DATASETS_CACHE: {cache}\ndataset_name: {data}\n"
                                    f"model_name_or_path: unused\nprompt_column: no_such_column\n")
    env = {key: value for key, value in os.environ.items() if key != "HF_DATASETS_CACHE"}
    result = subprocess.run([sys.executable, "-m", "trl_zoo.cli", "train", "--config", config,
                             "--output_dir", str(tmp_path / "run")],
                            cwd=ROOT, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "prompt_column: no column 'no_such_column'" in result.stderr, result.stderr
    assert cache.is_dir() and any(cache.iterdir())  # the dataset was cached there
