"""A packaged model's own preset (`PackagedModel.preset`): `trl-zoo train` on a built-in task applies it after the
task's preset and before the user's config file and flags, and says in one line which values it set. Read from
PACKAGED_MODELS, so the arguments are parsed with the short name and no model (nor its packages) is needed."""

from __future__ import annotations

import pytest

from trl_zoo.cli.arguments.train_arguments import model_preset, parse_train_args
from trl_zoo.io.gguf_checkpoint import PACKAGED_MODELS


def parsed(argv, tmp_path):
    lines = []
    _, training, model = parse_train_args([*argv, "--output_dir", str(tmp_path / "run")], log=lines.append)
    return training, model, [line for line in lines if "model's own preset" in line]


def test_gemma_gets_its_own_learning_rate_and_completion_length(tmp_path):
    assert dict(PACKAGED_MODELS["gemma3-270m"].preset) == {"learning_rate": 5e-5, "max_completion_length": 24}
    training, model, said = parsed(["--task", "chat_arithmetic", "--model_name_or_path", "gemma3-270m"], tmp_path)
    assert model.model_name_or_path == "gemma3-270m"
    assert training.learning_rate == 5e-5 and training.max_completion_length == 24
    assert training.per_device_train_batch_size == 32 and training.max_steps == 40  # the task's preset otherwise
    assert said == [
        "gemma3-270m: learning_rate 5e-05, max_completion_length 24 from the model's own preset (measured on it: "
        "docs/models.md); a flag or config value wins"
    ]


def test_a_flag_wins_over_the_models_preset_and_is_not_claimed_by_it(tmp_path):
    training, _, said = parsed(
        ["--task", "chat_arithmetic", "--model_name_or_path", "gemma3-270m", "--learning_rate", "1e-4"], tmp_path
    )
    assert training.learning_rate == 1e-4 and training.max_completion_length == 24
    assert len(said) == 1 and "learning_rate" not in said[0] and "max_completion_length 24" in said[0]
    training, _, said = parsed(
        ["--task", "chat_arithmetic", "--model_name_or_path=gemma3-270m", "--learning_rate=3e-5",
         "--max_completion_length=32"], tmp_path,
    )
    assert (training.learning_rate, training.max_completion_length) == (3e-5, 32)
    assert said == []


def test_a_config_file_wins_over_the_models_preset(tmp_path):
    config = tmp_path / "gemma.yaml"
    config.write_text("model_name_or_path: gemma3-270m\nlearning_rate: 1.0e-5\n")
    training, model, said = parsed(["--task", "chat_arithmetic", "--config", str(config)], tmp_path)
    assert model.model_name_or_path == "gemma3-270m"
    assert training.learning_rate == 1e-5 and training.max_completion_length == 24
    assert len(said) == 1 and "learning_rate" not in said[0]


@pytest.mark.parametrize("argv", [
    ["--task", "chat_arithmetic"],  # the task's default model
    ["--task", "chat_arithmetic", "--model_name_or_path", "smollm2-135m-instruct"],
])
def test_smollm2_keeps_the_tasks_preset(argv, tmp_path):
    assert model_preset("smollm2-135m-instruct") == {}
    training, model, said = parsed(argv, tmp_path)
    assert model.model_name_or_path == "smollm2-135m-instruct"
    assert training.learning_rate == 2e-4 and training.max_completion_length == 64
    assert said == []


def test_a_model_named_by_path_has_no_preset():
    assert model_preset("some/local/model") == {} and model_preset(None) == {}
