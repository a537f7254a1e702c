"""The CLI's own lines: usage and versions, aliases of PEFT field names, progress lines, run folders for own data."""

from pathlib import Path

import pytest

from trl_zoo.cli import main

from . import tiny

TINY_BOOTSTRAP = ["--bootstrap_max_steps", "8", "--bootstrap_hidden_size", "32", "--bootstrap_num_layers", "2"]
TINY_RL = ["--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4", "--logging_steps", "1"]


@pytest.fixture(autouse=True)
def in_a_fresh_folder(tmp_path, tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRL_ZOO_CACHE", str(tmp_path_factory.getbasetemp() / "trl_zoo_cache"))


def test_the_libraries_progress_bars_stay_out_of_the_run(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TRL_ZOO_CACHE", str(tmp_path / "own_cache"))  # a bootstrap that saves its weights
    argv = ["train", *TINY_BOOTSTRAP, *TINY_RL, "--write_report", "false", "--output_dir", "run"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    for bar in ("Loading weights", "Writing model shards", "it/s]"):
        assert bar not in captured.out + captured.err
    assert "Bootstrapped in" in captured.out


def test_the_progress_line_says_at_which_step_the_held_out_value_was_measured(capsys):
    argv = ["train", *TINY_BOOTSTRAP, *TINY_RL, "--max_steps", "3", "--eval_every_steps", "2", "--write_report",
            "false", "--output_dir", "run"]
    assert main(argv) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  step ")]
    assert [line.split("(at step ")[1].split(")")[0] for line in lines] == ["0", "2", "3"]
    assert all(", mean reward " in line for line in lines)


# ------------------------------------------------------------------------------------------------------ small ones
def test_peft_names_in_a_yaml_or_as_flags_are_read_as_trls_with_a_note(tmp_path, capsys):
    from trl_zoo.cli.arguments.train_arguments import parse_train_args

    config = tmp_path / "lora.yaml"
    config.write_text("lora_rank: 8\ntarget_modules: [q_proj, v_proj]\n")
    model_args = parse_train_args(["--config", str(config)]).model
    assert model_args.lora_r == 8 and model_args.lora_target_modules == ["q_proj", "v_proj"]
    printed = capsys.readouterr().out
    assert printed.count("\n") == 3 and "No dataset given, so the built-in task" in printed  # and the preset's
    assert "lora_rank: read as lora_r, the name TRL's ModelConfig gives this LoRA setting.\n" in printed
    assert (
        "target_modules: read as lora_target_modules, the name TRL's ModelConfig gives this LoRA setting." in printed
    )
    assert parse_train_args(["--lora_rank", "4"]).model.lora_r == 4
    assert "lora_rank: read as lora_r" in capsys.readouterr().out


def test_a_peft_name_beside_trls_name_is_one_line(tmp_path, capsys):
    config = tmp_path / "both.yaml"
    config.write_text("lora_rank: 8\nlora_r: 16\n")
    assert main(["train", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip() == (
        "trl-zoo train: error: lora_rank: the same field as lora_r, which is given too; keep one (lora_r)."
    )


def test_register_loss_checks_its_aggregation_at_registration():
    import trl_zoo

    with pytest.raises(ValueError) as error:
        trl_zoo.register_loss("my_loss", description="mine", aggregation="token_mean")
    message = str(error.value)
    assert message.startswith("register_loss('my_loss'): aggregation: unknown aggregation 'token_mean'. Did you mean")
    assert all(name in message for name in trl_zoo.AGGREGATIONS.names())
    assert "my_loss" not in trl_zoo.LOSSES


def test_help_opens_with_a_usage_line_and_version_names_the_libraries(capsys):
    import torch
    import transformers
    import trl

    assert main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: trl-zoo COMMAND [options]\n")
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("trl-zoo ") and out.count("\n") == 1
    assert f"trl {trl.__version__}, transformers {transformers.__version__}, torch {torch.__version__}" in out


def test_the_bootstrap_says_its_total_and_how_long_it_may_take(tmp_path):
    from trl_zoo.tasks import ADDITION
    from trl_zoo.tasks.bootstrap import BootstrapRecipe, bootstrap_policy

    lines = []
    recipe = BootstrapRecipe(hidden_size=32, max_steps=8, check_every=4, slip_steps=4, probe_size=20)
    bootstrap_policy(ADDITION, recipe, cache=tmp_path, log=lines.append)
    assert "at most 8 supervised steps, then 4 on the sloppy demonstrations" in lines[0]
    checks = [line for line in lines if line.startswith("  bootstrap step")]
    assert checks[0].startswith("  bootstrap step 4/8: supervised loss ")
    assert "s so far, at most ~" in checks[0] and " s to go" in checks[0]


def test_runs_on_your_own_data_get_a_named_folder_and_the_next_one_its_own(tmp_path):
    from trl_zoo.cli.arguments.train_arguments import parse_train_args

    flags = ["--model_name_or_path", tiny.model_dir(), "--dataset_name", "data/sums.jsonl"]
    assert parse_train_args(flags).training.output_dir == "runs/sums-dapo"  # TRL's default loss_type
    Path("runs/sums-dapo").mkdir(parents=True)
    assert parse_train_args([*flags, "--loss_type", "grpo"]).training.output_dir == "runs/sums-grpo"
    assert parse_train_args(flags).training.output_dir == "runs/sums-dapo-2"
    assert parse_train_args([*flags, "--output_dir", "mine"]).training.output_dir == "mine"


def test_a_run_on_your_own_data_says_which_of_trls_defaults_apply(tmp_path):
    from trl_zoo.cli.arguments.train_arguments import parse_train_args

    flags = ["--model_name_or_path", tiny.model_dir(), "--dataset_name", "problems.jsonl", "--output_dir", "run"]
    lines = []
    assert parse_train_args(flags, log=lines.append).training.learning_rate == 1e-6
    assert lines == [
        "A dataset given, so no task preset: TRL's defaults apply, loss_type dapo, learning_rate 1e-06 (TRL's "
        "learning rate is one of full fine-tuning; LoRA, on by default, usually takes 1e-5 to 2e-4); a flag or "
        "config value wins, e.g. --learning_rate 2e-4"
    ]
    lines.clear()
    parse_train_args([*flags, "--loss_type", "grpo"], log=lines.append)
    assert lines[0].startswith("A dataset given, so no task preset: TRL's defaults apply, learning_rate 1e-06 (")
    config = tmp_path / "mine.yaml"
    config.write_text("loss_type: grpo\nlearning_rate: 2.0e-4\n")
    lines.clear()
    parse_train_args([*flags, "--config", str(config)], log=lines.append)
    assert lines == []  # every such default set


def test_a_bare_train_says_it_runs_the_tasks_preset_not_the_defaults_help_lists(tmp_path):
    from trl_zoo.cli.arguments.train_arguments import make_train_parser, parse_train_args

    lines = []
    parse_train_args(["--learning_rate", "0.01", "--output_dir", str(tmp_path / "run")], log=lines.append)
    assert lines[0] == (
        "No dataset given, so the built-in task 'addition' with its preset: loss_type grpo, max_steps 200 (the "
        "defaults `trl-zoo train --help` lists apply with a dataset); a flag or config value wins"
    )  # the learning rate given is not the preset's
    assert "the offline quickstart (loss_type grpo, learning_rate 0.001, max_steps 200; a flag or config value " \
           "wins)" in " ".join(make_train_parser().format_help().split())


def test_a_missing_prompt_column_names_the_fix(tmp_path, capsys):
    data = tmp_path / "qa.jsonl"
    data.write_text('{"question": "1+1=", "answer": "2"}\n' * 20)
    argv = ["train", "--model_name_or_path", "unused", "--dataset_name", str(data), "--output_dir", "run"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "trl-zoo train: error: prompt_column: no column 'prompt'; the dataset has question, answer: name the one "
        "that holds the prompts, e.g. --prompt_column question."
    )
