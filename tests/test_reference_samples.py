"""`trl-zoo train --reference_reward_samples K` (trl_zoo/cli/train/reference_samples.py): A*-PO's reference
samples scored into the training data before the run, their cost written down, the settings it cannot serve
refused in one line."""

import json
from types import SimpleNamespace

import pytest
from datasets import Dataset

from tests import tiny
from trl_zoo.cli.errors import ConfigError
from trl_zoo.cli.train.reference_samples import (
    COST_FILE,
    add_reference_rewards,
    check_reference_samples,
    prompts_drawn,
)
from trl_zoo.dataset_values import REFERENCE_REWARDS


def training_args(tmp_path, **overrides):
    values = dict(seed=0, max_completion_length=4, temperature=1.0, reward_weights=None, nan_rewards="raise",
                  advantage_estimator="a2po", world_size=1, output_dir=str(tmp_path / "run"), trust_remote_code=False,
                  max_steps=-1)
    return SimpleNamespace(**{**values, **overrides})


def test_every_prompt_gets_k_scored_reference_samples_and_the_cost_is_written(tmp_path):
    train = Dataset.from_dict({"prompt": ["12+3=", "4+5=", "11+1="], "answer": ["15", "9", "12"]})
    lines = []
    sampled = add_reference_rewards(train, tiny.model_dir(0), tiny.tokenizer(), [tiny.digit_reward], 3,
                                    training_args(tmp_path), SimpleNamespace(model_revision="main"), lines.append)
    assert sampled.column_names == ["prompt", "answer", REFERENCE_REWARDS]
    assert sampled["prompt"] == train["prompt"]
    assert [len(row) for row in sampled[REFERENCE_REWARDS]] == [3, 3, 3]
    assert all(0.0 <= reward <= 1.0 for row in sampled[REFERENCE_REWARDS] for reward in row)  # digit fractions
    cost = json.loads((tmp_path / "run" / COST_FILE).read_text())
    assert (cost["prompts"], cost["samples_per_prompt"], cost["completions"]) == (3, 3, 9) and cost["seconds"] > 0
    assert len(lines) == 1 and "9 reference completions (3 of each of 3 prompts)" in lines[0]


def test_a_resumed_run_reads_its_starts_column_back_and_samples_again_for_other_prompts_or_k(tmp_path):
    train = Dataset.from_dict({"prompt": ["12+3=", "4+5="], "answer": ["15", "9"]})
    args, model = training_args(tmp_path), SimpleNamespace(model_revision="main")
    first = add_reference_rewards(train, tiny.model_dir(0), tiny.tokenizer(), [tiny.digit_reward], 2, args, model,
                                  lambda *_: None)
    lines = []
    # no model at this path: what comes back was read, not sampled
    again = add_reference_rewards(train, str(tmp_path / "no-model"), tiny.tokenizer(), [tiny.digit_reward], 2, args,
                                  model, lines.append, resumed=True)
    assert list(again[REFERENCE_REWARDS]) == list(first[REFERENCE_REWARDS]) and "reads back the 2 × 2" in lines[0]
    other = Dataset.from_dict({"prompt": ["11+1=", "4+5="], "answer": ["12", "9"]})
    for data, samples in ((other, 2), (train, 3)):
        with pytest.raises(OSError):  # sampled afresh, from the missing model
            add_reference_rewards(data, str(tmp_path / "no-model"), tiny.tokenizer(), [tiny.digit_reward], samples,
                                  args, model, lambda *_: None, resumed=True)


@pytest.mark.parametrize("samples, overrides, named", [
    (-1, {}, "must be ≥ 0"),
    (8, {"advantage_estimator": "grpo"}, "only an estimator that reads reference_rewards"),
    (8, {"advantage_estimator": None}, "only an estimator that reads reference_rewards"),
    (8, {"world_size": 2}, "each process of a launch would sample its own column"),
])
def test_a_count_the_run_cannot_use_is_refused_in_one_line(tmp_path, samples, overrides, named):
    with pytest.raises(ConfigError, match=named):
        check_reference_samples(samples, training_args(tmp_path, **overrides))


def test_none_asked_is_no_setting_to_refuse(tmp_path):
    check_reference_samples(0, training_args(tmp_path, advantage_estimator=None, world_size=4))
    check_reference_samples(8, training_args(tmp_path))


def test_train_prompts_keeps_the_first_n_so_the_samples_cover_only_what_the_run_draws():
    from datasets import IterableDataset

    from trl_zoo.cli.train.training_setup import first_prompts

    train = Dataset.from_dict({"prompt": [f"{i}+1=" for i in range(6)], "answer": [str(i + 1) for i in range(6)]})
    lines = []
    kept = first_prompts(train, 4, lines.append)
    assert kept["prompt"] == train["prompt"][:4] and lines == ["train_prompts: training on the first 4 of 6 prompts."]
    assert first_prompts(train, 0) is train
    streamed = IterableDataset.from_generator(lambda: ({"prompt": f"{i}+1="} for i in range(6)))
    assert [row["prompt"] for row in first_prompts(streamed, 2)] == ["0+1=", "1+1="]
    for count, named in ((7, "more than the training set's 6 prompts"), (-1, "must be ≥ 0")):
        with pytest.raises(ConfigError, match=f"^train_prompts: .*{named}"):
            first_prompts(train, count)


def test_a_run_that_draws_fewer_prompts_than_its_set_says_so_and_how_to_sample_only_those(tmp_path):
    """The preset's batch (128 rows a step, 8 a prompt): 40 steps draw 640 prompts; four updates a batch over 60
    steps draw 15 batches, 240; the line names --train_prompts with that count."""
    preset = dict(gradient_accumulation_steps=4, steps_per_generation=4, generation_batch_size=128, num_generations=8)
    assert prompts_drawn(SimpleNamespace(**preset, max_steps=40, num_iterations=1)) == 640
    assert prompts_drawn(SimpleNamespace(**preset, max_steps=60, num_iterations=4)) == 240
    assert prompts_drawn(SimpleNamespace(**preset, max_steps=-1, num_iterations=1)) is None
    train = Dataset.from_dict({"prompt": ["12+3=", "4+5=", "11+1="], "answer": ["15", "9", "12"]})
    args = training_args(tmp_path, max_steps=1, gradient_accumulation_steps=1, steps_per_generation=1,
                         num_iterations=1, generation_batch_size=4, num_generations=2)
    lines = []
    add_reference_rewards(train, tiny.model_dir(0), tiny.tokenizer(), [tiny.digit_reward], 2, args,
                          SimpleNamespace(model_revision="main"), lines.append)
    assert lines[0] == ("reference_reward_samples: sampling all 3 training prompts; max_steps 1 draws about 2 of "
                        "them, and --train_prompts 2 samples only those.")
