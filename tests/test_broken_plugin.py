"""A broken plugin cannot break the zoo: an installed entry point whose module or attribute is missing is reported
once (package, name, group, why) and skipped; `trl-zoo list` and the built-in losses work, only its name fails."""

import warnings

import pytest

import trl_zoo
from tests.tiny import make_trainer
from trl_zoo.cli import main
from trl_zoo.registry import TABLES

ENTRY_POINTS = """[trl_zoo.losses]
missing_module = zoo_plugin_that_is_not_installed:loss
missing_attribute = trl_zoo.losses.base:no_such_loss
"""


@pytest.fixture
def broken_plugin(tmp_path, monkeypatch):
    """A distribution 'broken-zoo-plugin' on sys.path with two entry points that cannot be loaded."""
    dist_info = tmp_path / "broken_zoo_plugin-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-zoo-plugin\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    for table in TABLES.values():  # read the entry points again, with the broken ones installed
        monkeypatch.setattr(table, "_entry_points_loaded", False)
        monkeypatch.setattr(table, "_broken", {})


def broken_plugin_warnings(caught) -> list[str]:
    return [str(warning.message) for warning in caught if "broken-zoo-plugin" in str(warning.message)]


def test_list_reports_each_broken_entry_point_once_and_shows_the_rest(broken_plugin, capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["list"]) == 0
        assert main(["list"]) == 0
    reported = broken_plugin_warnings(caught)
    assert len(reported) == 2
    missing_module, missing_attribute = sorted(reported, key=lambda message: "missing_attribute" in message)
    assert "'missing_module'" in missing_module and "'trl_zoo.losses'" in missing_module
    assert "ModuleNotFoundError" in missing_module and "zoo_plugin_that_is_not_installed" in missing_module
    assert "'missing_attribute'" in missing_attribute and "no_such_loss" in missing_attribute
    out = capsys.readouterr().out
    assert "  grpo " in out and "missing_module" not in out


def test_builtin_loss_trains_and_only_the_broken_name_fails(broken_plugin):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, loss_type="grpo")
        trainer.train()
    assert trainer.state.global_step == 2
    assert len(broken_plugin_warnings(caught)) == 2
    with pytest.raises(ValueError, match=r"^loss_type: loss 'missing_module' from package 'broken-zoo-plugin'.*"
                                         r"ModuleNotFoundError") as error:
        trl_zoo.GRPOConfig(output_dir="unused", use_cpu=True, bf16=False, loss_type="missing_module")
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="could not be loaded: AttributeError"):
        trl_zoo.LOSSES.get("missing_attribute")


def test_the_cli_names_the_broken_plugin_in_its_one_line_error(broken_plugin, tmp_path, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["train", "--loss_type", "missing_module", "--output_dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "broken-zoo-plugin" in err and "could not be loaded" in err
