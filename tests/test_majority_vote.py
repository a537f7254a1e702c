"""TTRL's majority-vote reward (arXiv:2504.16084): hand cases, the tie rule, answers that are not there, a batch of
several prompts grouped by their text, the vote across processes, no label column, its name on the command line, and
a training step on a dataset without answers, and `trl-zoo train` on a prompts-only file."""

import json
import math
from types import SimpleNamespace

import pytest
import torch

import trl_zoo
from tests import tiny
from tests.tiny import make_trainer, prompts_dataset
from tests.trl_internals import generate_and_score, metric_values
from trl_zoo.cli import main
from trl_zoo.cli.rewards.reward_names import REWARDS, heldout_scorer, read_columns, resolve_reward
from trl_zoo.tasks import majority_vote
from trl_zoo.tasks.majority_vote import MajorityVoteReward, majority_answers, majority_vote_reward
from trl_zoo.tasks.rewards import final_number_reward


def vote(completions, prompts=None):
    return majority_vote_reward(completions=completions, prompts=prompts or ["What is 5 + 7?"] * len(completions))


def test_agreeing_with_the_majority_answer_is_rewarded():
    completions = ["5 + 7 = 12", "It is 12.", "13", "twelve", "the sum is 12", "12.0 I think"]
    assert vote(completions) == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]  # "12.0" is the number 12; "twelve" has no answer


def test_a_tie_goes_to_the_answer_seen_first():
    assert vote(["7", "8", "8", "7"]) == [1.0, 0.0, 0.0, 1.0]
    assert vote(["no number", "8", "7", "7", "8"]) == [0.0, 1.0, 0.0, 0.0, 1.0]  # unparseable: no vote
    assert majority_answers(["p"] * 3, ["b", "a", "c"]) == {"p": "b"}


def test_completions_without_an_answer_get_zero_and_have_no_vote():
    assert vote(["no", "none", "nothing"]) == [0.0, 0.0, 0.0]
    assert vote(["none", "none", "none", "4"]) == [0.0, 0.0, 0.0, 1.0]  # three without a vote do not outvote one
    assert majority_answers(["p", "q"], [None, "1"]) == {"p": None, "q": "1"}


def test_a_batch_of_several_prompts_is_grouped_by_prompt_text():
    prompts = ["a", "a", "a", "b", "b", "b", "a", "c"]  # "a" comes back after "b": its text, not its place, groups it
    completions = ["1", "2", "2", "9", "9", "3", "1", "4"]
    rewards = majority_vote_reward(completions=completions, prompts=prompts)
    assert rewards == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]  # "a": 1, 2, 2, 1 tie, 1 seen first
    assert majority_answers(prompts, completions) == {"a": "1", "b": "9", "c": "4"}


def test_chat_completions_and_prompts():
    prompts = [[{"role": "user", "content": "What is 2 + 2?"}]] * 3
    completions = [[{"role": "assistant", "content": f"It is {n}."}] for n in (4, 4, 5)]
    assert majority_vote_reward(completions=completions, prompts=prompts) == [1.0, 1.0, 0.0]


def test_another_answer_extraction():
    reward = MajorityVoteReward(extract=lambda text: text.strip().lower() or None)
    assert reward(completions=["Paris", "paris ", "Rome", ""], prompts=["capital?"] * 4) == [1.0, 1.0, 0.0, 0.0]


def test_the_vote_is_over_the_completions_of_every_process(monkeypatch):
    """A prompt whose completions are split between two processes: this one holds 3, 4; the other 4, 4."""
    others = [("p", "4"), ("p", "4")]

    def all_gather_object(gathered, mine):
        gathered[0], gathered[1] = mine, others

    fake = SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True, get_world_size=lambda: 2,
                           all_gather_object=all_gather_object)
    assert majority_vote_reward(completions=["3", "4"], prompts=["p", "p"]) == [1.0, 0.0]  # alone: a tie, 3 first
    monkeypatch.setattr(majority_vote, "dist", fake)
    assert majority_vote_reward(completions=["3", "4"], prompts=["p", "p"]) == [0.0, 1.0]


def test_it_reads_no_label_column_and_is_named_on_the_command_line():
    assert read_columns(majority_vote_reward) == []
    assert resolve_reward("majority_vote") is majority_vote_reward is REWARDS["majority_vote"]
    assert majority_vote_reward.__name__ == "majority_vote"
    # label-free: the held-out evaluation keeps scoring with an answer check
    assert heldout_scorer([majority_vote_reward]) is REWARDS["exact_match"]
    assert heldout_scorer([majority_vote_reward, final_number_reward]) is final_number_reward


def test_a_training_step_on_prompts_without_answers():
    calls = []

    def recorded(completions, prompts, **kwargs):
        rewards = majority_vote_reward(completions=completions, prompts=prompts)
        calls.append((list(prompts), list(completions), rewards))
        return rewards

    dataset = prompts_dataset()
    assert dataset.column_names == ["prompt"]
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=recorded, dataset=dataset,
                           max_completion_length=6, max_steps=1)
    torch.manual_seed(0)
    trainer.model.train()
    generate_and_score(trainer, next(iter(trainer.get_train_dataloader())))
    (prompts, completions, rewards), = calls
    groups = [prompts[i : i + 4] for i in range(0, len(prompts), 4)]
    assert all(len(set(group)) == 1 for group in groups) and len({g[0] for g in groups}) == len(groups)  # TRL's layout
    by_position = []
    for start in range(0, len(completions), 4):  # the same vote, grouped by position
        answers = [majority_vote.final_number(text) for text in completions[start : start + 4]]
        label = majority_answers([0] * 4, answers)[0]
        by_position += [float(answer is not None and answer == label) for answer in answers]
    assert rewards == by_position and 0 < sum(rewards)
    assert metric_values(trainer)["rewards/recorded/mean"][-1] == pytest.approx(sum(rewards) / len(rewards))

    trainer.train()
    assert trainer.state.global_step == 1 and math.isfinite(trainer.state.log_history[0]["loss"])


def test_trl_zoo_train_runs_ttrl_on_a_prompts_only_file_without_a_heldout_set(tmp_path, monkeypatch, capsys):
    """No labels at all: with num_heldout 0 there is no held-out scorer, so no `answer` column is asked for."""
    monkeypatch.setenv("TRL_ZOO_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "prompts.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"{a}+{a + 3}="}) for a in range(10, 26)))
    out = tmp_path / "run"
    argv = ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data),
            "--reward_funcs", "majority_vote", "--num_heldout", "0", "--max_completion_length", "6",
            "--max_steps", "1", "--per_device_train_batch_size", "8", "--num_generations", "4",
            "--write_report", "false", "--output_dir", str(out)]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reward_funcs"] == ["majority_vote"] and summary["steps"] == 1 and summary["heldout_size"] == 0
    assert summary["accuracy_before"] is None and "'answer'" not in capsys.readouterr().out

    # with a held-out set, its scorer still needs the labels, and the line says how to do without one
    capsys.readouterr()
    assert main([*argv[:-1], str(tmp_path / "run2"), "--num_heldout", "4"]) == 2
    assert "scorer; --num_heldout 0 evaluates none) reads the dataset column 'answer'" in capsys.readouterr().err
