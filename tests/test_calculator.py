"""The calculator environment: expressions of integers, +, − and × have their value and nothing else has one; each
call's turn reward says whether it computed the row's answer; TRL reads the tool's schema from its docstring; with
the packaged SmolLM2 tokenizer, TRL's Qwen2.5 template renders the tool and its parser reads a tool call back."""

import pytest
from transformers.utils import get_json_schema

from tests.packaged_model import needs_packaged_model
from trl_zoo.tasks.calculator import (
    MAX_EXPRESSION_CHARACTERS,
    Calculator,
    tool_call_text,
    use_tool_template,
    value_of,
)


@pytest.mark.parametrize("expression, value", [
    ("47 + 38", 85), ("47-38", 9), ("(3 + 4) * -2", -14), (" 12*12 ", 144), ("+5", 5), ("0 - 99 + 1", -98),
])
def test_an_integer_expression_has_its_value(expression, value):
    assert value_of(expression) == value


@pytest.mark.parametrize("expression, words", [
    ("2 ** 10", "only integers, +, -, * and parentheses"), ("7 / 2", "only integers"), ("a + 1", "only integers"),
    ("__import__('os')", "only integers"), ("1.5 + 1", "only integers"), ("True + 1", "only integers"),
    ("47 +", "is not an arithmetic expression"), ("", "non-empty string"),
    ("1" * (MAX_EXPRESSION_CHARACTERS + 1), f"at most {MAX_EXPRESSION_CHARACTERS} characters"),
    ("999999 * 999999 * 9", "beyond"),
])
def test_anything_else_has_no_value_and_says_why(expression, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace("*", r"\*").replace("+", r"\+")):
        value_of(expression)


def test_each_call_gets_the_turn_reward_of_whether_it_computed_the_answer():
    calculator = Calculator()
    assert calculator.reset(prompt=[{"role": "user", "content": "What is 47 + 38?"}], answer="85") is None
    assert calculator.turn_rewards == []
    assert calculator.calculate("47 + 38") == "85" and calculator.turn_rewards == [1.0]
    assert calculator.calculate("47 + 39") == "86" and calculator.turn_rewards == [1.0, 0.0]
    assert calculator.calculate("47 ** 2").startswith("error: only integers") and calculator.turn_rewards[-1] == 0.0
    calculator.reset(answer=9)
    assert calculator.turn_rewards == [] and calculator.answer == 9


def test_trl_reads_the_tools_schema_from_its_docstring():
    schema = get_json_schema(Calculator().calculate)["function"]
    assert schema["name"] == "calculate"
    assert schema["parameters"]["required"] == ["expression"]
    assert schema["parameters"]["properties"]["expression"]["type"] == "string"


@needs_packaged_model
def test_the_calculator_tasks_expert_trace_is_the_call_on_its_questions_expression():
    from trl_zoo.tasks import get_task

    task = get_task("chat_arithmetic_calculator")
    row = task.train_dataset(expert_traces=True)[0]
    expression = row["prompt"].removeprefix("What is ").removesuffix("?")
    assert value_of(expression) == int(row["answer"])
    assert row["expert_answer"] == tool_call_text("calculate", {"expression": expression})
    assert get_task("chat_arithmetic").train_dataset(expert_traces=True)[0]["expert_answer"].endswith(row["answer"])


def test_the_packaged_tokenizer_renders_the_tool_and_reads_a_call_back():
    from transformers import AutoTokenizer

    from trl_zoo.io.gguf_checkpoint import policy_path

    tokenizer = use_tool_template(AutoTokenizer.from_pretrained(policy_path("smollm2-135m-instruct")))
    calculate = Calculator().calculate
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 47 + 38?"}], tools=[calculate], tokenize=False,
        add_generation_prompt=True,
    )
    assert '"name": "calculate"' in rendered and rendered.endswith("<|im_start|>assistant\n")
    call = tool_call_text("calculate", {"expression": "47 + 38"}) + "<|im_end|>"
    parsed = tokenizer.parse_response(call, prefix=rendered)
    assert parsed["tool_calls"] == [
        {"type": "function", "function": {"name": "calculate", "arguments": {"expression": "47 + 38"}}}
    ]
    assert all(token in tokenizer.get_vocab() for token in ("<|im_start|>", "<|im_end|>"))


FIRST_TURNS = ['{"expression": "47 + 38"}', '{"expression": "47 + 39"}', '{"expression": "47 ** 2"}', None]
SECOND_TURNS = ["85", "86", "85"]  # after the replies 85, 86 and the error; row 3 answered "85" at once


def _first_turn(arguments):
    call = f'{{"name": "calculate", "arguments": {arguments}}}'
    return "85" if arguments is None else f"<tool_call>\n{call}\n</tool_call>"


@needs_packaged_model
def test_a_two_turn_rollout_trains_with_mt_grpo_and_its_turn_advantage_credits_the_right_call(monkeypatch):
    """One group of four: the right call, a wrong one, one with no value, and an answer without a call. Outcome
    rewards [1, 0, 1, 1], the calls' turn rewards [1, 0, 0] (none for row 3); MT-GRPO's per-token advantages are
    their closed form: Â^O + Â^T on a call's turn, Â^O on the answer after it, Â^C where no tool was called."""
    import statistics

    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer

    import trl_zoo
    from tests import tiny
    from tests.test_gigpo import Recording
    from tests.trl_internals import replace_decoding
    from trl_zoo.io.gguf_checkpoint import policy_path
    from trl_zoo.tasks.tiny import build_tiny_causal_lm

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer = use_tool_template(AutoTokenizer.from_pretrained(policy_path("smollm2-135m-instruct")))

    def encoded(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    def decode(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        turns = [_first_turn(a) for a in FIRST_TURNS] if num_generations > 1 else SECOND_TURNS
        return [encoded(turns[i % len(turns)]) for i in range(len(prompt_ids))], None

    def answer_reward(completions, **kwargs):
        return [1.0 if completion[-1]["content"].strip() == "85" else 0.0 for completion in completions]

    torch.manual_seed(0)
    config = trl_zoo.GRPOConfig(**tiny.config_kwargs(
        max_steps=1, max_completion_length=128, per_device_train_batch_size=4, num_generations=4,
    ), advantage_estimator="mt_grpo", max_tool_calling_iterations=1)
    question = [{"role": "user", "content": "What is 47 + 38?"}]
    trainer = Recording(
        model=build_tiny_causal_lm(tokenizer, hidden_size=16, num_layers=1, num_heads=2, max_positions=512),
        args=config,
        processing_class=tokenizer, reward_funcs=answer_reward, environment_factory=Calculator,
        train_dataset=Dataset.from_dict({"prompt": [question] * 4, "answer": ["85"] * 4}),
    )
    replace_decoding(trainer, decode)
    trainer.train()
    batch = trainer.batch

    def normalised(values):
        mean, std = statistics.fmean(values), statistics.stdev(values)
        return [(v - mean) / (std + 1e-4) for v in values]

    outcome, turn = normalised([1.0, 0.0, 1.0, 1.0]), normalised([1.0, 0.0, 0.0, 0.0])
    combined = normalised([2.0, 0.0, 1.0, 1.0])
    model_tokens = (batch["completion_mask"] * batch["tool_mask"]).bool()
    reply = (batch["completion_mask"] * (1 - batch["tool_mask"])).bool()
    for row in range(4):
        advantages = batch["advantages"][row]
        if row == 3:
            assert not reply[row].any()
            tokens = int(model_tokens[row].sum())
            assert advantages[model_tokens[row]].tolist() == pytest.approx([combined[3]] * tokens)
            continue
        start, end = int(reply[row].nonzero()[0]), int(reply[row].nonzero()[-1]) + 1
        call, answer = model_tokens[row][:start], model_tokens[row][end:]
        assert advantages[:start][call].tolist() == pytest.approx([outcome[row] + turn[row]] * int(call.sum()))
        assert advantages[end:][answer].tolist() == pytest.approx([outcome[row]] * int(answer.sum()))
        assert answer.sum() == len(encoded(SECOND_TURNS[row]))


@needs_packaged_model
def test_the_calculator_task_builds_trls_tool_loop_and_evaluates_its_tool_round(tmp_path, monkeypatch):
    from trl.chat_template_utils import qwen2_5_chat_template

    import trl_zoo.cli.train.heldout_accuracy as heldout_accuracy
    from trl_zoo.cli.arguments.train_arguments import parse_train_args
    from trl_zoo.cli.train.training_setup import prepare_training
    from trl_zoo.tasks.evaluation import HeldOutResult

    argv = ["--task", "chat_arithmetic_calculator", "--output_dir", str(tmp_path / "run"), "--num_heldout", "2",
            "--max_steps", "1"]
    task_args, training_args, model_args = parse_train_args(argv, log=lambda *_: None)
    assert training_args.max_tool_calling_iterations == 1 and training_args.max_completion_length == 160
    setup = prepare_training(task_args, training_args, model_args, log=lambda *_: None)
    trainer = setup.trainer
    assert trainer.environment_factories == {None: Calculator}
    assert trainer.processing_class.chat_template == qwen2_5_chat_template
    assert [tool.__name__ for tool in trainer.tools] == ["calculate"]
    seen = {}

    def evaluation(*args, **kwargs):
        seen.update(kwargs)
        return HeldOutResult(0.5, 0.5, False)

    monkeypatch.setattr(heldout_accuracy, "greedy_evaluation", evaluation)
    assert setup.accuracy.measure(trainer.model, 0).accuracy == 0.5
    assert seen["environment_factory"] is Calculator and seen["max_new_tokens"] == 160
