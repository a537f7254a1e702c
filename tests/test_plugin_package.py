"""A third-party loss package, built and pip-installed into a fresh virtual environment, trains by name: one loss
registered through the `trl_zoo.losses` entry point as a bare function (no declarations: the `LossSpec` defaults),
one registered with `trl_zoo.register_loss` in the same module, and one that declares a hyperparameter of its own,
which `trl-zoo train` takes as a flag and hands to the loss."""

import json
import os
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "zoo-plugin-example"
version = "0.1.0"

[project.entry-points."trl_zoo.losses"]
bare_pg = "zoo_plugin_example:bare_pg"
decorated_pg = "zoo_plugin_example:decorated_pg"
scaled_pg = "zoo_plugin_example:scaled_pg"

[tool.setuptools]
py-modules = ["zoo_plugin_example"]
"""

MODULE = '''
"""Policy gradient −Â·log π, twice."""

import torch

from trl_zoo import PluginField, PolicyTerm, register_loss


def bare_pg(batch, args):
    """Policy gradient, a bare function."""
    return PolicyTerm(-batch.advantages * batch.logps)


@register_loss("decorated_pg", description="policy gradient, decorated", aggregation="token_mean_local")
def decorated_pg(batch, args):
    return PolicyTerm(-batch.advantages * batch.logps)


@register_loss(
    "scaled_pg",
    description="policy gradient, scaled by its own hyperparameter",
    fields=(PluginField("pg_scale", float, 1.0, "Scale s of the term −s·Â·log π.", low=0.0, high=10.0),),
)
def scaled_pg(batch, args):
    scale = torch.full((batch.logps.size(0), 1), args.pg_scale)  # logged as a metric: what the loss was handed
    return PolicyTerm(-args.pg_scale * batch.advantages * batch.logps, metrics={"pg_scale": scale})
'''

TRAIN = """
import json, sys
import trl_zoo
from tests.tiny import make_trainer

results = {}
for name in sys.argv[1:]:
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, loss_type=name)
    trainer.train()
    entry = trl_zoo.LOSSES.get(name)
    results[name] = {
        "steps": trainer.state.global_step,
        "aggregation": entry.spec.aggregation,
        "description": entry.description,
        "losses": [log["loss"] for log in trainer.state.log_history if "loss" in log],
    }
print("RESULT " + json.dumps(results))
"""


@pytest.fixture(scope="module")
def plugin_python(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugin")
    package = root / "zoo_plugin_example"
    package.mkdir()
    (package / "pyproject.toml").write_text(PYPROJECT)
    (package / "zoo_plugin_example.py").write_text(textwrap.dedent(MODULE))
    environment = root / "venv"
    # Without pip of its own: the running environment's packages (torch, trl, pip, setuptools) are made visible
    # through a .pth file, so only the plugin is installed into the new environment.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", environment], check=True)
    python = environment / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    new_site = subprocess.run([python, "-c", purelib], check=True, capture_output=True, text=True).stdout.strip()
    Path(new_site, "running_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", package],
        check=True,
    )
    return python


def test_entry_point_losses_train_by_name(plugin_python):
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY), "OMP_NUM_THREADS": "1"}
    completed = subprocess.run(
        [plugin_python, "-c", TRAIN, "bare_pg", "decorated_pg"],
        cwd=REPOSITORY, env=environment, capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    line = next(line for line in completed.stdout.splitlines() if line.startswith("RESULT "))
    results = json.loads(line.removeprefix("RESULT "))
    bare, decorated = results["bare_pg"], results["decorated_pg"]
    assert bare["steps"] == decorated["steps"] == 2
    assert bare["aggregation"] == "sequence_mean"  # the LossSpec default
    assert bare["description"] == "Policy gradient, a bare function."  # the docstring's first line
    assert decorated["aggregation"] == "token_mean_local"
    for result in (bare, decorated):
        assert len(result["losses"]) == 2 and all(loss == loss for loss in result["losses"])  # logged, not NaN



def test_a_plugin_field_is_a_train_flag_and_reaches_the_loss(plugin_python, tmp_path):
    from tests.test_cli import local_sums

    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY), "OMP_NUM_THREADS": "1",
                   "TRL_ZOO_CACHE": str(tmp_path / "cache")}
    help_text = subprocess.run(
        [plugin_python, "-m", "trl_zoo.cli", "train", "--help"],
        cwd=REPOSITORY, env=environment, capture_output=True, text=True, timeout=300,
    ).stdout
    assert "--pg_scale PG_SCALE" in " ".join(help_text.split())
    assert "Scale s of the term −s·Â·log π. In [0.0, 10.0]. Declared by the loss 'scaled_pg'." in " ".join(
        help_text.split()
    )
    out = tmp_path / "run"
    argv = ["train", *local_sums(tmp_path), "--max_steps", "1", "--per_device_train_batch_size", "8",
            "--num_generations", "4", "--eval_every_steps", "1", "--logging_steps", "1", "--loss_type", "scaled_pg",
            "--pg_scale", "2.5", "--output_dir", str(out)]
    completed = subprocess.run(
        [plugin_python, "-m", "trl_zoo.cli", *argv], cwd=REPOSITORY, env=environment, capture_output=True, text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [record["pg_scale"] for record in records if "pg_scale" in record]
    assert logged == [2.5]  # one optimizer step, and the loss saw the flag's value
    refused = subprocess.run(
        [plugin_python, "-m", "trl_zoo.cli", *argv[:-4], "--pg_scale", "11", "--output_dir", str(tmp_path / "no")],
        cwd=REPOSITORY, env=environment, capture_output=True, text=True, timeout=300,
    )
    assert refused.returncode == 2
    assert "pg_scale: must be in [0.0, 10.0], got 11.0 (loss 'scaled_pg')." in refused.stderr + refused.stdout
