"""The chat_arithmetic tasks (questions for pretrained chat models) and the null-reward control."""

import pytest

from trl_zoo.cli.rewards.null_reward_control import permuted_reward
from trl_zoo.tasks import get_task
from trl_zoo.tasks.chat_arithmetic import ChatArithmeticTask
from trl_zoo.tasks.rewards import final_number_reward


@pytest.mark.parametrize("name, terms, signs", [
    ("chat_arithmetic", 2, ["+"]), ("chat_arithmetic_medium", 2, ["-"]), ("chat_arithmetic_hard", 3, ["+", "-"]),
])
def test_levels_have_disjoint_heldout_sets_and_right_answers(name, terms, signs):
    task = get_task(name)
    train, heldout = task.train_dataset(), task.heldout_dataset()
    assert len(heldout) >= 500 and len(set(train["prompt"])) == len(train)
    assert not set(train["prompt"]) & set(heldout["prompt"])
    prompts, answers = list(heldout["prompt"]) + train["prompt"][:500], list(heldout["answer"]) + train["answer"][:500]
    for prompt, answer in zip(prompts, answers):
        tokens = prompt.rstrip("?").split()[2:]  # "What is a + b - c?" -> a, +, b, -, c
        numbers, operators = [int(t) for t in tokens[::2]], tokens[1::2]
        assert len(numbers) == terms and all(10 <= n <= 99 for n in numbers) and operators == signs
        expected = numbers[0] + sum(n if sign == "+" else -n for sign, n in zip(operators, numbers[1:]))
        assert int(answer) == expected and (int(answer) >= 0 or signs != ["-"])  # a - b is asked with a ≥ b


def test_the_medium_level_draws_every_ordered_pair_once_at_most():
    task = ChatArithmeticTask("m", terms=2, num_train=4095 - 500, num_heldout=500, level="medium", signs=("-",))
    prompts = list(task.train_dataset()["prompt"]) + list(task.heldout_dataset()["prompt"])
    assert len(set(prompts)) == 4095  # 90 · 91 / 2 pairs a ≥ b
    with pytest.raises(ValueError, match="more than the 4095 distinct questions"):
        ChatArithmeticTask("m", terms=2, num_train=4000, num_heldout=500, level="medium", signs=("-",))._split
    with pytest.raises(ValueError, match="signs: one"):
        ChatArithmeticTask("m", terms=3, num_train=1, num_heldout=1, level="x", signs=("-",))


def test_the_reward_reads_the_last_number_of_a_rambling_answer():
    completions = [[{"role": "assistant", "content": "Let me add 47 and 38. The sum is 85."}],
                   [{"role": "assistant", "content": "85 is close, but the answer is 75"}]]
    assert final_number_reward(completions, answer=["85", "85"]) == [1.0, 0.0]
    assert ChatArithmeticTask.reward is final_number_reward


def test_prompts_spell_the_expression():
    assert ChatArithmeticTask.prompt((47, 38)) == "What is 47 + 38?"
    assert ChatArithmeticTask.prompt((47, 38, 21)) == "What is 47 + 38 - 21?"
    assert ChatArithmeticTask.answer((47, 38, 21)) == 64
    assert ChatArithmeticTask.prompt((47, 38), ("-",)) == "What is 47 - 38?"
    assert ChatArithmeticTask.answer((47, 38), ("-",)) == 9


def test_null_reward_control_keeps_the_rewards_and_breaks_their_link_to_completions():
    rewards = [float(i % 3 == 0) for i in range(64)]
    control = permuted_reward(lambda completions, **kwargs: list(rewards), seed=0)
    shuffled = [control(list(range(64))) for _ in range(5)]
    assert all(sorted(batch) == sorted(rewards) for batch in shuffled)  # the same multiset of rewards
    assert sum(batch != rewards for batch in shuffled) == 5  # each call draws a new order
    assert control.__name__ == "<lambda>"  # the wrapped function's name, so logs name the reward as before


def test_the_chat_task_preset_names_the_packaged_model_and_keeps_the_shared_defaults(tmp_path):
    from trl_zoo.cli.arguments.train_arguments import parse_train_args

    task_args, training_args, model_args = parse_train_args(
        ["--task", "chat_arithmetic_hard", "--output_dir", str(tmp_path / "run")]
    )
    assert model_args.model_name_or_path == "smollm2-135m-instruct"
    assert (training_args.learning_rate, training_args.max_steps) == (2e-4, 40)
    assert training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps == 128
    assert training_args.max_completion_length == 64 and training_args.num_generations == 8
    assert model_args.lora_r == 16 and training_args.beta == 0.0  # shared with the built-in tasks' defaults
    assert not task_args.null_reward_control


@pytest.mark.parametrize("name", ["chat_arithmetic", "chat_arithmetic_medium", "chat_arithmetic_hard"])
def test_the_expert_traces_are_the_tasks_own_answers_as_worked_lines(name):
    from trl_zoo.tasks.chat_arithmetic import EXPERT_COLUMN
    from trl_zoo.tasks.rewards import final_number

    task = get_task(name)
    assert EXPERT_COLUMN not in task.train_dataset().column_names  # off by default: existing runs unchanged
    train = task.train_dataset(expert_traces=True)
    assert EXPERT_COLUMN not in task.heldout_dataset().column_names
    for prompt, answer, trace in list(zip(train["prompt"], train["answer"], train[EXPERT_COLUMN]))[:300]:
        expression, result = trace.split(" = ")
        assert prompt == f"What is {expression}?"  # the question's own expression, worked as the few-shot answers
        assert final_number(trace) == answer == result
        assert final_number_reward([trace], [answer]) == [1.0]
    assert train["prompt"] == task.train_dataset()["prompt"]  # the same questions in the same order


def test_the_expert_traces_survive_a_base_models_prompt_format():
    from trl_zoo.tasks.chat_arithmetic import EXPERT_COLUMN

    task = get_task("chat_arithmetic")
    few_shot = task.train_dataset("few_shot", expert_traces=True)
    assert few_shot[0][EXPERT_COLUMN] == task.train_dataset(expert_traces=True)[0][EXPERT_COLUMN]
    assert few_shot[0]["prompt"].endswith("Answer:")


def test_the_cli_adds_the_expert_traces_to_a_chat_task_only_when_asked():
    from types import SimpleNamespace

    from trl_zoo.cli.arguments.train_arguments import TaskArguments
    from trl_zoo.cli.errors import ConfigError
    from trl_zoo.cli.train.training_setup import _training_splits
    from trl_zoo.tasks.chat_arithmetic import EXPERT_COLUMN

    training = SimpleNamespace(eval_strategy="no")
    task = get_task("chat_arithmetic")
    for asked in (False, True):
        task_args = TaskArguments(task="chat_arithmetic", expert_traces=asked)
        train, heldout, _ = _training_splits(task, task_args, training, None, {}, log=lambda *_: None)
        assert (EXPERT_COLUMN in train.column_names) == asked and EXPERT_COLUMN not in heldout.column_names
    with pytest.raises(ConfigError, match="expert_traces: the chat_arithmetic tasks"):
        _training_splits(get_task("addition"), TaskArguments(task="addition", expert_traces=True), training, None,
                         {}, log=lambda *_: None)
