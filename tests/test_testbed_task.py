"""The testbed's scratchpad task: worked solutions, the final-answer reward, the split, and a bootstrap that learns."""

import json
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM

from trl_zoo.tasks import SCRATCHPAD, SCRATCHPAD_SMALL, get_task
from trl_zoo.tasks.rewards import REWARDS, final_answer_reward
from trl_zoo.tasks.scratchpad import ScratchpadAdditionTask, carried_columns, column_steps, worked_solution
from trl_zoo.tasks.scratchpad_bootstrap import (
    _batch,
    bootstrap_scratchpad_policy,
    build_scratchpad_model,
    probe_accuracy,
    scale_setup,
    scratchpad_recipe,
    supervise,
)
from trl_zoo.tasks.tiny import build_char_tokenizer


def test_worked_solutions_are_written_column_by_column():
    assert worked_solution(47, 38, 2) == "7+8+0=15;4+3+1=08:85"
    assert worked_solution(3, 4, 1) == "3+4+0=07:7"
    assert worked_solution(95, 17, 2) == "5+7+0=12;9+1+1=11:112"
    assert worked_solution(999, 111, 3) == "9+1+0=10;9+1+1=11;9+1+1=11:1110"
    # a forgotten carry continues consistently from what was written; column `digits` is the leading 1
    assert worked_solution(47, 38, 2, forget=[1]) == "7+8+0=15;4+3+0=07:75"
    assert worked_solution(95, 17, 2, forget=[2]) == "5+7+0=12;9+1+1=11:12"
    assert carried_columns(95, 17, 2) == [1, 2] and carried_columns(12, 34, 2) == []


@pytest.mark.parametrize("seed", range(3))
def test_the_right_solution_spells_the_sum_and_every_slip_changes_it(seed):
    generator = torch.Generator().manual_seed(seed)
    for _ in range(200):
        digits = int(torch.randint(1, 8, (1,), generator=generator))
        a, b = (int(torch.randint(10 ** (digits - 1), 10**digits, (1,), generator=generator)) for _ in range(2))
        steps, answer = column_steps(a, b, digits)
        assert answer == str(a + b)
        assert [x + y + c for x, y, c, _ in steps] == [s for *_, s in steps]
        for column in carried_columns(a, b, digits):
            assert column_steps(a, b, digits, forget=[column])[1] != str(a + b)
        assert len(worked_solution(a, b, digits)) + 1 <= SCRATCHPAD.max_completion_length


def test_final_answer_reward_reads_only_the_answer_line():
    completions = ["7+8+0=15;4+3+1=08:85", "7+8+0=15;4+3+0=07:75", "junk:85", "85", "7+8+0=15:8 5", " :85 "]
    assert final_answer_reward(completions, answer=["85"] * 6) == [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    assert final_answer_reward([[{"role": "assistant", "content": "1+1+0=02:2"}]], answer=["2"]) == [1.0]
    assert REWARDS["final_answer"] is final_answer_reward


def test_split_is_disjoint_deterministic_and_in_range():
    task = SCRATCHPAD_SMALL
    train, heldout = task.train_pairs, task.heldout_pairs
    assert len(train) == task.num_train and len(heldout) == task.num_heldout == len(set(heldout))
    assert not set(train) & set(heldout)
    assert all(a >= 10 and len(str(a)) == len(str(b)) for a, b in heldout)  # one-digit sums are never held out
    assert {len(str(a)) for a, _ in train} == {1, 2, 3}
    rows = task.heldout_dataset()
    assert rows["prompt"][0] == f"{heldout[0][0]}+{heldout[0][1]}=" and rows["answer"][0] == str(sum(heldout[0]))
    assert ScratchpadAdditionTask(task.name, 1, 3, task.num_train, task.num_heldout).heldout_pairs == heldout
    assert get_task("scratchpad") is SCRATCHPAD and SCRATCHPAD.max_completion_length == 72
    with pytest.raises(ValueError, match="min_digits, max_digits"):
        ScratchpadAdditionTask("bad", 3, 2, 10, 10)
    with pytest.raises(ValueError, match="scale: got 'tpu'"):
        scale_setup("tpu")
    assert scratchpad_recipe(SCRATCHPAD, seed=3) == replace(scale_setup("gpu")[1], seed=3)


def test_demonstration_batch_labels_only_the_completion_and_slips_at_the_given_rate():
    tokenizer = build_char_tokenizer()
    import random

    ids, labels = _batch(tokenizer, SCRATCHPAD_SMALL, [(47, 38)] * 400, 0.5, random.Random(0), width=40)
    prompt_length = len("47+38=")
    assert (labels[:, :prompt_length] == -100).all()
    texts = tokenizer.batch_decode(ids[:, prompt_length:], skip_special_tokens=True)
    assert set(texts) == {"7+8+0=15;4+3+1=08:85", "7+8+0=15;4+3+0=07:75"}
    slipped = sum(text.endswith(":75") for text in texts) / len(texts)
    assert abs(slipped - 0.5) < 0.1  # 400 Bernoulli(0.5) draws: sd 0.025
    assert (labels[0] != -100).sum() == len("7+8+0=15;4+3+1=08:85") + 1  # the eos token is supervised too


def test_cpu_bootstrap_learns_one_digit_column_sums_above_chance(tmp_path):
    """The cpu recipe on one-digit sums, a short supervised budget: the untrained model gets no worked line right
    (guessing the answer digits alone is right about 1 time in 100); after 200 steps greedy accuracy is far above
    that (0.51 measured; the threshold leaves room for the sudden transition to come later on another CPU)."""
    task = ScratchpadAdditionTask("one_digit", 1, 1, num_train=81, num_heldout=0)
    recipe = replace(scale_setup("cpu")[1], max_steps=200, check_every=200, probe_size=81, batch_size=64,
                     slip_steps=0, carry_slip_rate=0.0, learning_rate=1e-2, hidden_size=64)
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    model = build_scratchpad_model(tokenizer, recipe)
    before = probe_accuracy(model, tokenizer, task, task.train_pairs)
    outcome = supervise(model, tokenizer, task, recipe, log=lambda line: None)
    assert before == 0.0
    assert outcome["probe_accuracy"] > 0.2


def test_bootstrap_caches_the_learned_policy_and_the_habit_once(tmp_path):
    """The phase-1 policy and the slip-habit policy are two cache entries, each built once (`cache_lock`); a second
    slip habit starts from the cached phase-1 policy instead of learning again."""
    task = ScratchpadAdditionTask("one_digit", 1, 1, num_train=60, num_heldout=4)
    recipe = replace(scale_setup("cpu")[1], max_steps=2, check_every=2, probe_size=4, batch_size=8, slip_steps=1,
                     hidden_size=32, num_layers=1)
    logs = []
    path = bootstrap_scratchpad_policy(task, recipe, cache=tmp_path, log=logs.append)
    learned = tmp_path / recipe.learned_cache_name(task)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == sorted(
        [path.name, learned.name]
    )
    for entry in (path, learned):
        AutoModelForCausalLM.from_pretrained(entry)
    assert json.loads((path / "bootstrap.json").read_text())["steps"] == 2
    assert not any(line.startswith("Giving the slip habit") for line in logs)

    logs.clear()
    assert bootstrap_scratchpad_policy(task, recipe, cache=tmp_path, log=logs.append) == path
    assert logs == [f"Using the cached base policy in {path}"]
    other = bootstrap_scratchpad_policy(task, replace(recipe, slip_steps=2), cache=tmp_path, log=logs.append)
    assert other != path and json.loads((other / "bootstrap.json").read_text())["steps"] == 0  # phase 1 skipped
    assert f"Giving the slip habit to the learned policy in {learned}" in logs
