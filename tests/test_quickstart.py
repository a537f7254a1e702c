"""The offline quickstart's parts — task, rewards, evaluator, bootstrap cache — and the examples, run for real."""

import json
import math
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_zoo.tasks import (
    ADDITION,
    ADDITION3,
    CHAT_ARITHMETIC,
    CHAT_ARITHMETIC_CALCULATOR,
    CHAT_ARITHMETIC_HARD,
    CHAT_ARITHMETIC_MEDIUM,
    SCRATCHPAD,
    SCRATCHPAD_SMALL,
    TASKS,
    get_task,
)
from trl_zoo.tasks.arithmetic import AdditionTask
from trl_zoo.tasks.bootstrap import BootstrapRecipe, bootstrap_policy, demonstrations, slipped_sum
from trl_zoo.tasks.evaluation import HeldOutAccuracyCallback, greedy_accuracy, greedy_completions
from trl_zoo.tasks.rewards import exact_match_reward, final_number_reward

from . import tiny

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TINY_RECIPE = BootstrapRecipe(hidden_size=32, num_layers=2, num_heads=2, max_steps=8, check_every=4)
TINY_BOOTSTRAP = ["--bootstrap_max_steps", "8", "--bootstrap_hidden_size", "32", "--bootstrap_num_layers", "2"]


@pytest.fixture(autouse=True)
def shared_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TRL_ZOO_CACHE", str(tmp_path_factory.getbasetemp() / "trl_zoo_cache"))


# ------------------------------------------------------------------------------------------------------ task
@pytest.mark.parametrize("task", [ADDITION, ADDITION3], ids=lambda t: t.name)
def test_addition_split_is_disjoint_deterministic_and_correct(task):
    train, heldout = task.train_pairs, task.heldout_pairs
    assert len(train) == task.num_train and len(heldout) == task.num_heldout
    assert not set(train) & set(heldout) and len(set(train)) == len(train)
    low, high = 10 ** (task.digits - 1), 10**task.digits - 1
    assert all(low <= a <= high and low <= b <= high for a, b in train + heldout)
    rows = task.heldout_dataset()
    for (a, b), prompt, answer in zip(heldout, rows["prompt"], rows["answer"]):
        assert prompt == f"{a}+{b}=" and int(answer) == a + b and len(answer) <= task.max_answer_length
    again = AdditionTask(task.name, task.digits, task.num_train, task.num_heldout, task.seed)
    assert again.heldout_pairs == heldout


def test_task_table_and_unknown_task():
    assert TASKS == {
        "addition": ADDITION, "addition3": ADDITION3, "scratchpad": SCRATCHPAD, "scratchpad_small": SCRATCHPAD_SMALL,
        "chat_arithmetic": CHAT_ARITHMETIC, "chat_arithmetic_hard": CHAT_ARITHMETIC_HARD,
        "chat_arithmetic_medium": CHAT_ARITHMETIC_MEDIUM, "chat_arithmetic_calculator": CHAT_ARITHMETIC_CALCULATOR,
    }
    with pytest.raises(ValueError, match="task: unknown built-in task 'mult'"):
        get_task("mult")
    with pytest.raises(ValueError, match="num_train \\+ num_heldout"):
        AdditionTask("too_big", digits=1, num_train=80, num_heldout=10).train_pairs  # only 81 one-digit sums


def test_rewards_match_their_definitions():
    assert exact_match_reward(["85", " 85 ", "58", "850", ""], answer=["85"] * 5) == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert exact_match_reward([[{"role": "assistant", "content": "Yes"}]], answer=["yes"]) == [1.0]
    completions = ["so 3 + 4 = 7", "The answer is 7,200.", "12.50", "no number", "-3"]
    answers = ["steps #### 7", "7200", "12.5", "1", "#### -3"]
    assert final_number_reward(completions, answer=answers) == [1.0, 1.0, 1.0, 0.0, 1.0]


# ------------------------------------------------------------------------------------------------------ evaluator
def test_greedy_batches_equal_one_by_one_decoding_and_accuracy_counts_matches():
    model, tokenizer = tiny.model(), tiny.tokenizer()
    prompts = ["1+2=", "10+20=", "123+456=", "7+8="]  # different lengths: left padding must not change results
    batched = greedy_completions(model, tokenizer, prompts, max_new_tokens=5, batch_size=4)
    for prompt, completion in zip(prompts, batched):
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=5, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        assert completion == tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    answers = [batched[0], "not it", batched[2].strip(), "nor this"]
    model.train()
    assert greedy_accuracy(model, tokenizer, prompts, 5, reward_kwargs={"answer": answers}, batch_size=3) == 0.5
    assert model.training  # the caller's mode is restored


def test_accuracy_callback_measures_every_n_steps_and_at_the_end():
    calls = []
    callback = HeldOutAccuracyCallback(
        lambda model: len(calls) / 10, every_steps=3, on_result=lambda s, a: calls.append(s)
    )
    state = type("State", (), {"max_steps": 7, "global_step": 0})()
    for step in range(1, 8):
        state.global_step = step
        callback.on_step_end(None, state, None, model=None)
    assert calls == [3, 6, 7] and callback.history == [(3, 0.0), (6, 0.1), (7, 0.2)]
    with pytest.raises(ValueError, match="eval_every_steps"):
        HeldOutAccuracyCallback(lambda m: 0.0, every_steps=0)


# ------------------------------------------------------------------------------------------------------ bootstrap
def test_bootstrap_trains_saves_and_is_reused_from_the_cache(tmp_path):
    logs = []
    path = bootstrap_policy(ADDITION, TINY_RECIPE, cache=tmp_path, log=logs.append)
    assert path.parent == tmp_path and any("Bootstrapping" in line for line in logs)
    record = json.loads((path / "bootstrap.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert record["steps"] == 8
    assert record["final_loss"] < math.log(len(tokenizer))  # below the uniform-guess cross-entropy
    model = AutoModelForCausalLM.from_pretrained(path)
    heldout = ADDITION.heldout_dataset()
    accuracy = greedy_accuracy(model, tokenizer, heldout["prompt"], 4, reward_kwargs={"answer": heldout["answer"]})
    assert accuracy == record["heldout_accuracy"]

    logs.clear()
    assert bootstrap_policy(ADDITION, TINY_RECIPE, cache=tmp_path, log=logs.append) == path
    assert logs == [f"Using the cached base policy in {path}"]


def test_bootstrap_stops_at_the_first_check_reaching_the_target(tmp_path):
    recipe = BootstrapRecipe(
        hidden_size=32, num_layers=2, num_heads=2, target_accuracy=0.0, max_steps=8, check_every=4
    )
    record = json.loads(
        (bootstrap_policy(ADDITION, recipe, cache=tmp_path, log=lambda _: None) / "bootstrap.json").read_text()
    )
    assert record["steps"] == 4  # any accuracy reaches a target of 0 at the first check


def test_slipped_sum_forgets_only_the_units_carry_and_demonstrations_align():
    assert [slipped_sum(a, b) for a, b in [(47, 38), (55, 49), (12, 13), (95, 15), (10, 90)]] == [75, 94, 25, 100, 100]
    tokenizer = tiny.tokenizer()
    pairs = [(47, 38), (55, 49), (12, 13)]
    right_ids, right_labels, slip_ids, slip_labels = demonstrations(tokenizer, ADDITION, pairs)
    assert right_ids.shape == slip_ids.shape == right_labels.shape == slip_labels.shape
    decode = lambda labels: [tokenizer.decode(row[row >= 0], skip_special_tokens=True) for row in labels]  # noqa: E731
    assert decode(right_labels) == ["85", "104", "25"] and decode(slip_labels) == ["75", "94", "25"]
    assert torch.equal(right_ids[2], slip_ids[2])  # no carry, nothing to forget


# ------------------------------------------------------------------------------------------------------ examples
def run_example(name: str, argv: list[str], monkeypatch):
    monkeypatch.setattr(sys, "argv", [name, *argv])
    monkeypatch.syspath_prepend(str(EXAMPLES))
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")


def test_quickstart_example(tmp_path, monkeypatch, capsys):
    out = tmp_path / "quickstart"
    run_example("quickstart.py", ["--max_steps", "2", *TINY_BOOTSTRAP, "--output_dir", str(out)], monkeypatch)
    printed = capsys.readouterr().out
    assert "held-out greedy accuracy before RL" in printed and "after RL" in printed
    assert (out / "adapter_config.json").exists()


def test_lora_math_example_with_a_local_model_and_dataset(tmp_path, monkeypatch, capsys):
    data = tmp_path / "problems.jsonl"
    rows = [{"question": f"what is {a} plus {a}?", "answer": f"{a} + {a} = {2 * a}\n#### {2 * a}"} for a in range(20)]
    data.write_text("\n".join(json.dumps(row) for row in rows))
    out = tmp_path / "math"
    argv = ["--model", tiny.model_dir(), "--dataset", str(data), "--max_steps", "2", "--num_generations", "4",
            "--prompts_per_step", "2", "--max_completion_length", "6", "--num_heldout", "2", "--eval_every_steps", "1",
            "--learning_rate", "1e-3", "--output_dir", str(out)]
    run_example("lora_math.py", argv, monkeypatch)
    printed = capsys.readouterr().out
    assert "held-out accuracy before RL: 0.0% on 2 questions" in printed  # a random tiny model solves nothing
    assert (out / "adapter_config.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given on a machine without a GPU")
def test_qlora_example_explains_what_it_needs(monkeypatch):
    with pytest.raises(SystemExit) as exit_info:
        run_example("qlora_single_gpu.py", ["--max_steps", "1"], monkeypatch)
    assert str(exit_info.value).startswith("QLoRA needs ")


def test_custom_loss_example_registers_and_trains(tmp_path):
    out = tmp_path / "custom"
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / "custom_loss.py"), *TINY_BOOTSTRAP, "--max_steps", "2",
         "--per_device_train_batch_size", "8", "--num_generations", "4", "--output_dir", str(out),
         "--write_report", "false"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))},
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["loss_type"] == "tanh_clip" and summary["steps"] == 2
    train_logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"train"' in line]
    assert all(abs(log["tanh_clip/ratio_mean"] - 1.0) < 1e-6 for log in train_logs)  # on-policy: r = 1
