"""Every preset in configs/ runs on the built-in task as README shows it (`trl-zoo train --config configs/X.yaml`).

A preset's lengths are sized for long reasoning on a real model; with the built-in task's own bootstrapped policy
they are scaled to the task, saying so in one line. A loss the built-in policy cannot serve (an MoE loss: the
policy is dense) and a length no model can hold are refused before anything is loaded, and a refused run leaves no
folder behind that would push the next run into `-2`.
"""

import json
from pathlib import Path

import pytest
import yaml

from trl_zoo.cli import main
from trl_zoo.cli.arguments.preset_lengths import scale_preset_lengths
from trl_zoo.cli.arguments.train_arguments import parse_train_args

from . import tiny

ROOT = Path(__file__).resolve().parent.parent
PRESETS = sorted((ROOT / "configs").glob("*.yaml"))
TINY_BOOTSTRAP = ["--bootstrap_max_steps", "8", "--bootstrap_hidden_size", "32", "--bootstrap_num_layers", "2"]


@pytest.fixture(autouse=True)
def in_a_fresh_folder(tmp_path, tmp_path_factory, monkeypatch):
    """Runs land in runs/ of a fresh folder; one bootstrap cache for the session."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRL_ZOO_CACHE", str(tmp_path_factory.getbasetemp() / "trl_zoo_cache"))


@pytest.mark.parametrize("path", PRESETS, ids=lambda path: path.stem)
def test_every_preset_runs_one_step_on_the_built_in_task(path, capsys):
    preset = yaml.safe_load(path.read_text())
    group = preset.get("num_generations", 8)
    argv = ["train", "--config", str(path), "--max_steps", "1", "--per_device_train_batch_size", str(group),
            "--write_report", "false", *TINY_BOOTSTRAP]
    status = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    if preset["loss_type"] == "rspo":  # an MoE loss: the built-in policy is dense, refused before anything loads
        assert status == 2
        assert captured.err.strip() == (
            "trl-zoo train: error: loss_type: 'rspo' needs a Mixture-of-Experts model and the built-in task's "
            "policy is dense; give --model_name_or_path of an MoE model (Qwen2-MoE, Qwen3-MoE, Mixtral, ...) or "
            "use a dense loss such as 'gmpo'."
        )
        assert "Bootstrapping" not in captured.out and not Path("runs").exists()
        return
    assert status == 0, captured.err
    summary = json.loads(Path(f"runs/addition-{path.stem}/summary.json").read_text())
    assert summary["steps"] == 1 and summary["loss_type"] == preset["loss_type"]


def test_dapo_lengths_are_scaled_to_the_task_with_one_line(capsys):
    task_args, training_args, _ = parse_train_args(["--config", str(ROOT / "configs" / "dapo.yaml")])
    printed = capsys.readouterr().out
    # The task's longest answer is 4 tokens with eos; the punishment ramp must start after it: 1280 · 4/1024 = 5.
    assert (training_args.max_completion_length, training_args.overlong_buffer_length) == (5, 1)
    assert training_args.overlong_max_length is None
    assert printed.splitlines()[0].startswith("No dataset given, so the built-in task 'addition' with its preset")
    assert printed.split("\n", 1)[1] == (
        "dapo.yaml on the built-in task 'addition': max_completion_length 1280 → 5, overlong_buffer_length 256 → 1 "
        "(lengths × 1/256, so the task's longest completion, 4 tokens, is never cut or punished; they are sized "
        "for long reasoning on a real model: give --model_name_or_path to keep them).\n"
    )


def test_a_flag_wins_and_the_presets_other_lengths_follow_it():
    argv = ["--config", str(ROOT / "configs" / "dapo.yaml"), "--max_completion_length", "58"]
    training_args = parse_train_args(argv).training
    # 256 · 58/1280 = 11.6, rounded down so the unpunished length is not shortened
    assert (training_args.max_completion_length, training_args.overlong_buffer_length) == (58, 11)


def test_lengths_of_a_preset_for_a_users_model_are_kept():
    argv = ["--config", str(ROOT / "configs" / "dapo.yaml"), "--model_name_or_path", tiny.model_dir()]
    training_args = parse_train_args(argv).training
    assert (training_args.max_completion_length, training_args.overlong_buffer_length) == (1280, 256)


def test_scaling_rule():
    assert scale_preset_lengths(4, {"max_completion_length": 1280}, {}) == {"max_completion_length": 4}
    assert scale_preset_lengths(4, {"max_completion_length": 3}, {}) == {}  # fits the task: kept
    fitted = scale_preset_lengths(
        4, {"max_completion_length": 100, "overlong_max_length": 80, "overlong_buffer_length": 40}, {}
    )
    # the unpunished length 80 − 40 must hold 4 tokens: × 1/10
    assert fitted == {"max_completion_length": 10, "overlong_max_length": 8, "overlong_buffer_length": 4}


def test_a_completion_longer_than_the_built_in_policy_is_refused_before_training(capsys):
    status = main(["train", "--max_completion_length", "100", *TINY_BOOTSTRAP])
    err = capsys.readouterr().err.strip()
    assert status == 2 and err.count("\n") == 0
    assert "max_completion_length: 100" in err and "max_position_embeddings 64" in err
    assert not Path("runs").exists() or not any(Path("runs").iterdir())  # the refused run left no folder
    # so the next run takes the plain name
    assert parse_train_args([]).training.output_dir == "runs/addition-grpo"


def test_a_users_model_too_short_for_max_completion_length_is_refused_before_loading(tmp_path, capsys, monkeypatch):
    import trl_zoo.cli.train.policy

    loaded = []
    monkeypatch.setattr(trl_zoo.cli.train.policy.AutoTokenizer, "from_pretrained", lambda *a, **k: loaded.append(a))
    data = tmp_path / "sums.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"{a}+1=", "answer": str(a + 1)}) for a in range(20)))
    status = main(["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data),
                   "--max_completion_length", "200", "--output_dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert status == 2 and not loaded and not (tmp_path / "run").exists()
    assert err == (
        "trl-zoo train: error: max_completion_length: 200 tokens leave no room for a prompt in the model's "
        "max_position_embeddings 128; lower max_completion_length below 128."
    )
