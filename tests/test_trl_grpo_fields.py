"""`trl-zoo train` takes what `trl grpo` takes: a TRL YAML, reward models, TRL's reward names, dataset mixtures,
streaming, test_split_size with TRL's evaluation, trust_remote_code."""

import json

import pytest
import torch
import yaml
from datasets import Dataset
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer
from trl import DatasetMixtureConfig, get_dataset
from trl.scripts.grpo import make_parser as trl_grpo_parser

import trl_zoo.cli.train.command
import trl_zoo.components.rewards
from trl_zoo.cli import main
from trl_zoo.cli.arguments.train_arguments import parse_train_args
from trl_zoo.cli.errors import ConfigError
from trl_zoo.cli.rewards.reward_names import resolve_reward, trl_reward_names
from trl_zoo.cli.train.training_data import _load_dataset_splits

from . import tiny

SCORED = []  # (prompts, completions) of every batch the trainer scored with `recording_reward`


def recording_reward(completions, prompts=None, **kwargs):
    """A zero reward that keeps what the trainer scored: a training batch, where each prompt comes num_generations
    times (the greedy held-out evaluation scores each prompt once)."""
    if len(set(map(str, prompts))) < len(prompts):
        SCORED.append((list(prompts), list(completions)))
    return [0.0] * len(completions)


def sums(a_values) -> list[dict]:
    return [{"prompt": f"{a}+{a + 3}=", "answer": str(2 * a + 3)} for a in a_values]


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(row) for row in rows))
    return str(path)


def reward_model_dir(tmp_path) -> str:
    """A tiny random sequence-classification model (one logit) on the tiny tokenizer, saved locally."""
    config = AutoConfig.from_pretrained(tiny.model_dir())
    config.num_labels = 1
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config)
    with torch.no_grad():
        model.score.weight.mul_(50.0)  # rewards of order 1 rather than 0.02
    path = tmp_path / "tiny_reward_model"
    model.save_pretrained(path)
    tiny.tokenizer().save_pretrained(path)
    return str(path)


# ------------------------------------------------------------------------------------------------- a TRL YAML
def test_a_trl_grpo_yaml_runs_with_reward_model_trl_reward_eval_split_and_trust_remote_code(tmp_path, monkeypatch):
    data = tmp_path / "sums.parquet"
    Dataset.from_list(sums(range(10, 50))).to_parquet(str(data))
    reward_model = reward_model_dir(tmp_path)
    config = {  # TRL's keys only
        "model_name_or_path": tiny.model_dir(),
        "dataset_name": str(data),
        "reward_model_name_or_path": reward_model,
        "reward_funcs": ["get_soft_overlong_punishment", "tests.test_trl_grpo_fields.recording_reward"],
        "test_split_size": 8,
        "eval_strategy": "steps",
        "eval_steps": 2,
        "per_device_eval_batch_size": 8,
        "trust_remote_code": True,
        "learning_rate": 1e-3,
        "num_generations": 4,
        "per_device_train_batch_size": 8,
        "max_completion_length": 6,
        "max_steps": 4,
        "logging_steps": 1,
        "output_dir": str(tmp_path / "run"),
        "report_to": "none",
        "bf16": False,  # this machine has no GPU (TRL's default is bf16)
    }
    path = tmp_path / "trl.yaml"
    path.write_text(yaml.safe_dump(config))
    trl_args = trl_grpo_parser().parse_args_and_config(["--config", str(path)])  # `trl grpo` accepts it
    ours = parse_train_args(["--config", str(path)])
    for key in ("learning_rate", "num_generations", "max_completion_length", "logging_steps", "eval_steps"):
        assert getattr(ours.training, key) == getattr(trl_args[1], key)
    assert ours.task.test_split_size == trl_args[3].test_split_size == 8
    assert ours.task.reward_model_name_or_path == trl_args[0].reward_model_name_or_path == reward_model

    tokenizer_calls, setups = [], []
    load_tokenizer = AutoTokenizer.from_pretrained
    monkeypatch.setattr(AutoTokenizer, "from_pretrained",
                        lambda *a, **k: tokenizer_calls.append(k) or load_tokenizer(*a, **k))
    prepare = trl_zoo.cli.train.command.prepare_training
    monkeypatch.setattr(trl_zoo.cli.train.command, "prepare_training",
                        lambda *a, **k: setups.append(prepare(*a, **k)) or setups[-1])
    rewards_per_round = []  # the reward seam's checked rewards of every round
    scored_rewards = trl_zoo.components.rewards.Rewards.scored_rewards
    monkeypatch.setattr(trl_zoo.components.rewards.Rewards, "scored_rewards",
                        lambda *a, **k: rewards_per_round.append(scored_rewards(*a, **k)) or rewards_per_round[-1])
    SCORED.clear()
    assert main(["train", "--config", str(path), "--write_report", "false"]) == 0

    trainer = setups[0].trainer
    assert len(trainer.eval_dataset) == 8 and len(trainer.train_dataset) == 32  # 8 of 40 rows split off
    assert setups[0].heldout_size == 8  # the same split is the greedy held-out set
    assert trainer.args.model_init_kwargs["trust_remote_code"] is True
    assert len(tokenizer_calls) >= 2 and all(call["trust_remote_code"] is True for call in tokenizer_calls)

    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evaluations = [record for record in records if record["kind"] == "trl_eval"]
    assert [record["step"] for record in evaluations] == [2, 4]  # eval_steps 2 over 4 steps
    assert all("eval_reward" in record and "eval_rewards/tiny_reward_model/mean" in record for record in evaluations)
    train = [record for record in records if record["kind"] == "train"]
    assert [record["step"] for record in train] == [1, 2, 3, 4]
    # completions of at most 6 tokens are far below L_max − L_cache = 1024: TRL's soft overlong punishment is 0
    assert all(record["rewards/soft_overlong_punishment_reward/mean"] == 0.0 for record in train)

    # The reward model scores prompt + completion at its last token, as TRL does: recompute the last batch (with the
    # tokenizer saved beside the reward model, which TRL loads).
    prompts, completions = SCORED[-1]
    model = AutoModelForSequenceClassification.from_pretrained(reward_model).eval()
    texts = [p + c for p, c in zip(prompts, completions)]
    inputs = load_tokenizer(reward_model)(texts, return_tensors="pt", padding=True, padding_side="right",
                                          add_special_tokens=False)
    with torch.no_grad():
        expected = model(**inputs).logits[:, 0]
    assert expected.abs().max() > 0.05
    torch.testing.assert_close(rewards_per_round[-1][:, 0], expected, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------- TRL's reward names
def test_every_name_in_trls_reward_registry_resolves_or_fails_in_one_line():
    logged = []
    resolved, refused = {}, {}
    for name in trl_reward_names():
        try:
            resolved[name] = resolve_reward(name, max_completion_length=6, log=logged.append)
        except ConfigError as error:
            refused[name] = str(error)
    assert set(resolved) | set(refused) == {
        "accuracy_reward", "reasoning_accuracy_reward", "think_format_reward", "get_soft_overlong_punishment",
        "get_cosine_scaled_reward", "get_repetition_penalty_reward"}
    # as `trl grpo` builds it: L_max 1280, L_cache 256, so 0 up to 1024 tokens, then a ramp to -1 at 1280
    punishment = resolved["get_soft_overlong_punishment"]
    assert punishment([[0] * 1024, [0] * 1152, [0] * 1280, [0] * 1400]) == pytest.approx([0.0, -0.5, -1.0, -1.0])
    assert any("get_soft_overlong_punishment" in line and "always 0" in line for line in logged)
    # a factory whose every argument has a default: TRL's defaults (3-grams, max penalty -1)
    repetition = resolved["get_repetition_penalty_reward"]
    assert repetition([[1, 2, 3, 1, 2, 3], [1, 2, 3, 4]]) == pytest.approx([-(1 - 3 / 4), 0.0])
    assert set(refused) == {"get_cosine_scaled_reward"}  # max_len has no default and `trl grpo` gives none
    message = refused["get_cosine_scaled_reward"]
    assert "\n" not in message and message.startswith("reward_funcs: get_cosine_scaled_reward is a TRL reward factory")
    assert "--reward_funcs my_rewards.reward" in message
    for name in ("accuracy_reward", "reasoning_accuracy_reward", "think_format_reward"):
        assert callable(resolved[name]) and resolved[name].__name__ == name


@pytest.mark.parametrize("reward, expected", [
    ("get_cosine_scaled_reward", "reward_funcs: get_cosine_scaled_reward is a TRL reward factory"),
    ("accuracy_reward", "reward_funcs: accuracy_reward reads the dataset column 'solution', which the dataset lacks "
                        "(its columns: prompt, answer)"),
])
def test_a_trl_reward_train_cannot_use_stops_it_with_one_line(tmp_path, capsys, reward, expected):
    data = write_jsonl(tmp_path / "sums.jsonl", sums(range(10, 30)))
    argv = ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", data, "--reward_funcs", reward,
            "--max_completion_length", "8", "--output_dir", str(tmp_path / "run")]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after the dataset loader's progress bar
    assert error.startswith(f"trl-zoo train: error: {expected}")


# ------------------------------------------------------------------------------------------------- datasets
def splits(tmp_path, *flags, seed=0):
    task_args = parse_train_args([*flags, "--model_name_or_path", "m", "--output_dir", str(tmp_path / "run")]).task
    return _load_dataset_splits(task_args, seed, log=lambda *_: None)


def test_a_mixture_with_fractions_and_test_split_size_follows_trls_rule(tmp_path):
    first = write_jsonl(tmp_path / "a.jsonl", sums(range(0, 40)))
    second = write_jsonl(tmp_path / "b.jsonl", sums(range(100, 120)))
    config = tmp_path / "mix.yaml"
    config.write_text(yaml.safe_dump({"datasets": [{"path": "json", "data_files": first, "fraction": 0.5},
                                                   {"path": "json", "data_files": second, "fraction": 0.5}],
                                      "test_split_size": 10}))
    train, heldout, source = splits(tmp_path, "--config", str(config))
    # TRL: equal shares, the largest mixture that oversamples neither: min(40 / 0.5, 20 / 0.5) = 40 rows, 20 of each
    prompts = list(train["prompt"]) + list(heldout["prompt"])
    assert (len(train), len(heldout)) == (30, 10)
    assert sorted(prompts) == sorted(row["prompt"] for row in sums(range(0, 20)) + sums(range(100, 120)))
    assert source == f"{first} + {second}"
    again, _, _ = splits(tmp_path, "--config", str(config))
    assert list(again["prompt"]) == list(train["prompt"])  # split with the run's seed: the same rows every time


@pytest.mark.parametrize("size, held", [("0.25", 10), ("5", 5)])
def test_test_split_size_holds_out_a_fraction_or_a_count(tmp_path, size, held):
    data = write_jsonl(tmp_path / "sums.jsonl", sums(range(10, 50)))
    train, heldout, _ = splits(tmp_path, "--dataset_name", data, "--test_split_size", size)
    assert (len(train), len(heldout)) == (40 - held, held)
    assert not set(train["prompt"]) & set(heldout["prompt"])


def test_a_mixtures_test_files_are_its_held_out_set_and_training_keeps_every_train_row(tmp_path):
    train_a, test_a = (
        write_jsonl(tmp_path / "a.jsonl", sums(range(0, 50))),
        write_jsonl(tmp_path / "ta.jsonl", sums(range(200, 205))),
    )
    train_b, test_b = (
        write_jsonl(tmp_path / "b.jsonl", sums(range(100, 130))),
        write_jsonl(tmp_path / "tb.jsonl", sums(range(300, 303))),
    )
    entries = [{"path": "json", "data_files": {"train": train_a, "test": test_a}},
               {"path": "json", "data_files": {"train": train_b, "test": test_b}}]
    config = tmp_path / "mix.yaml"
    config.write_text(yaml.safe_dump({"datasets": entries}))
    train, heldout, _ = splits(tmp_path, "--config", str(config))
    trl_train = get_dataset(DatasetMixtureConfig(datasets=entries))["train"]  # what `trl grpo` trains on
    assert list(train["prompt"]) == list(trl_train["prompt"]) and len(train) == 80
    assert list(heldout["prompt"]) == [row["prompt"] for row in sums(range(200, 205)) + sums(range(300, 303))]


def test_num_heldout_0_trains_on_every_row_without_a_held_out_evaluation(tmp_path, capsys):
    data = write_jsonl(tmp_path / "sums.jsonl", sums(range(10, 50)))
    train, heldout, _ = splits(tmp_path, "--dataset_name", data, "--num_heldout", "0")
    assert len(train) == 40 and heldout is None
    with pytest.raises(ConfigError, match=r"^num_heldout: must be ≥ 0 \(0: no held-out set\), got -1\.$"):
        splits(tmp_path, "--dataset_name", data, "--num_heldout", "-1")
    with pytest.raises(ConfigError, match=r"^num_heldout: 0 keeps no evaluation set, so test_split_size"):
        splits(tmp_path, "--dataset_name", data, "--num_heldout", "0", "--test_split_size", "4")
    out = tmp_path / "run"
    argv = ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", data, "--num_heldout", "0",
            "--reward_funcs", "tests.test_trl_grpo_fields.recording_reward", "--max_completion_length", "4",
            "--max_steps", "1", "--per_device_train_batch_size", "8", "--num_generations", "4",
            "--logging_steps", "1", "--output_dir", str(out)]
    assert main(argv) == 0
    lines = capsys.readouterr().out
    assert "num_heldout 0, so no held-out set: every training row is trained on" in lines
    assert "No held-out set (num_heldout 0), so no held-out evaluation. Training with" in lines
    assert "No report: it compares held-out accuracy, and this run has no held-out set." in lines
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["heldout_size"] == 0
    assert summary["accuracy_before"] is summary["accuracy_after"] is summary["best_accuracy"] is None
    assert main(["compare", "--losses", "grpo,dapo", *argv[1:-2]]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "num_heldout: compare ranks runs by held-out accuracy, so it needs a held-out set; drop 0."
    )


def test_a_streamed_mixture_holds_out_its_first_rows_and_trains_on_the_rest(tmp_path):
    first = write_jsonl(tmp_path / "a.jsonl", sums(range(0, 10)))
    second = write_jsonl(tmp_path / "b.jsonl", sums(range(100, 105)))
    config = tmp_path / "mix.yaml"
    config.write_text(yaml.safe_dump({"datasets": [{"path": "json", "data_files": first},
                                                   {"path": "json", "data_files": second}],
                                      "streaming": True, "num_heldout": 4}))
    train, heldout, _ = splits(tmp_path, "--config", str(config))
    rows = sums(range(0, 10)) + sums(range(100, 105))
    assert list(heldout["prompt"]) == [row["prompt"] for row in rows[:4]]
    assert [row["prompt"] for row in train] == [row["prompt"] for row in rows[4:]]
    with pytest.raises(ConfigError, match=r"^test_split_size: a streamed dataset has no length"):
        splits(tmp_path, "--config", str(config), "--test_split_size", "0.2")


def test_a_streamed_dataset_trains_with_trls_iterable_path(tmp_path):
    data = write_jsonl(tmp_path / "sums.jsonl", sums(range(10, 40)))
    out = tmp_path / "run"
    argv = ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", data, "--dataset_streaming", "true",
            "--num_heldout", "6", "--reward_funcs", "tests.test_trl_grpo_fields.recording_reward",
            "--max_completion_length", "4", "--max_steps", "2", "--per_device_train_batch_size", "8",
            "--num_generations", "4", "--logging_steps", "1", "--write_report", "false", "--output_dir", str(out)]
    assert main([*argv[:-2], "--max_steps", "-1", "--output_dir", str(out)]) == 2  # no length: max_steps needed
    SCORED.clear()
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["heldout_size"] == 6
    trained = {prompt for prompts, _ in SCORED for prompt in prompts}
    heldout = {row["prompt"] for row in sums(range(10, 16))}
    assert len(SCORED) == 2 and len(trained) == 4 and not trained & heldout  # 2 prompts x 4 generations per step
