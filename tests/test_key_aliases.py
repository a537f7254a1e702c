"""An unknown key or flag that is another library's name for a TRL field suggests that field, not the nearest
spelling (`group_size` suggested `greso_step`)."""

from __future__ import annotations

import pytest

from trl_zoo.cli.arguments.train_arguments import parse_train_args
from trl_zoo.cli.errors import ConfigError

MEANT = {
    "group_size": "num_generations",
    "lr": "learning_rate",
    "batch_size": "per_device_train_batch_size",
    "max_new_tokens": "max_completion_length",
    "kl_coef": "beta",
    "epochs": "num_train_epochs",
}


@pytest.mark.parametrize("key", sorted(MEANT))
def test_a_yaml_key_of_another_name_suggests_trls_field(key, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(f"{key}: 4\n")
    with pytest.raises(ConfigError) as error:
        parse_train_args(["--config", str(config)], log=lambda *a: None)
    assert str(error.value).startswith(f"{key}: unknown key in the config file. Did you mean {MEANT[key]!r}?")


def test_a_flag_of_another_name_suggests_trls_field():
    with pytest.raises(ConfigError, match=r"^group_size: unknown argument --group_size. Did you mean --num_gen"):
        parse_train_args(["--group_size", "4"], log=lambda *a: None)


def test_a_misspelling_still_gets_the_nearest_field(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("learning_rat: 0.1\n")
    with pytest.raises(ConfigError, match=r"^learning_rat: unknown key in the config file. Did you mean 'learning_r"):
        parse_train_args(["--config", str(config)], log=lambda *a: None)
