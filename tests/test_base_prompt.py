"""The chat-arithmetic levels for a base model: a plain-text format it continues, chosen when the tokenizer has no
chat template, and the reward reading the answer line. Gemma 3 270M's measured accuracies are in docs/models.md."""

import re

import pytest
from tokenizers.processors import TemplateProcessing

from tests import tiny
from trl_zoo.tasks import get_task
from trl_zoo.tasks.chat_arithmetic import BASE_FORMAT, FEW_SHOT_EXAMPLES
from trl_zoo.tasks.evaluation import adds_special_tokens, decoded_completions_and_ids
from trl_zoo.tasks.rewards import answer_line_number, final_number_reward


def test_a_tokenizer_without_a_chat_template_gets_the_few_shot_format():
    tokenizer = tiny.tokenizer()
    task = get_task("chat_arithmetic")
    assert tokenizer.chat_template is None and task.prompt_format_for(tokenizer) == BASE_FORMAT == "few_shot"
    templated = tiny.build_char_tokenizer()
    templated.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert task.prompt_format_for(templated) == "chat"


def test_the_few_shot_prompt_is_three_solved_training_questions_then_the_question():
    task = get_task("chat_arithmetic")
    train, heldout = task.train_dataset(), task.heldout_dataset()
    based = task.heldout_dataset("few_shot")
    worked = [f"Question: {q}\nAnswer: {q[8:-1]} = {a}\n\n" for q, a in zip(train["prompt"][:3], train["answer"][:3])]
    assert FEW_SHOT_EXAMPLES == 3 and worked[0].startswith("Question: What is ") and " + " in worked[0]
    assert based[0]["prompt"] == "".join(worked) + f"Question: {heldout[0]['prompt']}\nAnswer:"
    short = [f"Question: {q}\nAnswer: {a}\n\n" for q, a in zip(train["prompt"][:3], train["answer"][:3])]
    assert task.heldout_dataset("few_shot_short")[0]["prompt"] == "".join(short) + based[0]["prompt"][-len(
        f"Question: {heldout[0]['prompt']}\nAnswer:"):]
    assert based["answer"] == heldout["answer"] and based["answer_first_line"] == [True] * len(heldout)
    examples = set(train["prompt"][:3])
    assert not examples & set(heldout["prompt"])  # the solved examples are never held-out questions
    qa = task.heldout_dataset("question_answer")
    assert qa[0]["prompt"] == f"Question: {heldout[0]['prompt']}\nAnswer:"
    assert task.heldout_dataset("chat")["prompt"] == heldout["prompt"]
    assert "answer_first_line" not in heldout.column_names


def test_each_level_solves_its_own_examples():
    for name, example in [("chat_arithmetic_medium", r"What is (\d+) - (\d+)\?"),
                          ("chat_arithmetic_hard", r"What is (\d+) \+ (\d+) - (\d+)\?")]:
        header = get_task(name).few_shot_header(worked=False)
        pairs = re.findall(rf"Question: {example}\nAnswer: (-?\d+)\n\n", header)
        assert len(pairs) == 3
        worked = get_task(name).few_shot_header(worked=True)
        assert [line.split(" = ")[-1] for line in worked.split("\n") if line.startswith("Answer:")] == [
            answer for *_, answer in pairs]
        for *numbers, answer in pairs:
            numbers = [int(n) for n in numbers]
            expected = numbers[0] - numbers[1] if len(numbers) == 2 else numbers[0] + numbers[1] - numbers[2]
            assert int(answer) == expected


def test_a_bad_prompt_format_is_one_line():
    expected = r"^prompt_format: one of chat, few_shot, few_shot_short, question_answer, got 'fewshot'\.$"
    with pytest.raises(ValueError, match=expected):
        get_task("chat_arithmetic").heldout_dataset("fewshot")


def test_prompts_for_rewrites_only_for_a_base_model():
    task = get_task("chat_arithmetic_medium")
    train, heldout = task.train_dataset().select(range(6)), task.heldout_dataset().select(range(4))
    lines = []
    based_train, based_heldout = task.prompts_for(train, heldout, tiny.tokenizer(), log=lines.append)
    assert based_heldout["prompt"] == task.heldout_dataset("few_shot")["prompt"][:4]
    assert based_train["prompt"] == task.train_dataset("few_shot")["prompt"][:6]
    assert len(lines) == 1 and "no chat template" in lines[0] and "few_shot" in lines[0]
    templated = tiny.build_char_tokenizer()
    templated.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert task.prompts_for(train, heldout, templated, log=lines.append) == (train, heldout) and len(lines) == 1
    assert task.prompts_for(train, None, tiny.tokenizer(), log=lines.append)[1] is None


@pytest.mark.parametrize("completion, read", [
    (" 85\n\nQuestion: What is 12 + 30?\nAnswer: 42", "85"),  # the model goes on: only the answer line counts
    (" 47 + 38 = 85\nQuestion: What is 1 + 2?", "85"),  # a worked line: the number after its last "="
    (" 85 (47 + 38)", "85"),  # no "=": the line's first number
    (" 47 + 38 =\n85", None),  # the answer line holds no number after its "="
    ("\n85", None),  # an empty answer line
    (" 1,085.0", "1085"),
    (" -7\n", "-7"),
])
def test_the_answer_line_number(completion, read):
    assert answer_line_number(completion) == read


def test_the_reward_reads_the_answer_line_only_where_the_column_says_so():
    completions = [" 85\n\nQuestion: What is 10 + 11?\nAnswer: 21", " 85\n\nQuestion: What is 10 + 11?\nAnswer: 21"]
    assert final_number_reward(completions, answer=["85", "85"], answer_first_line=[True, False]) == [1.0, 0.0]
    assert final_number_reward(completions, answer=["21", "21"]) == [1.0, 1.0]  # no column: the last number


def test_plain_text_prompts_are_tokenized_with_the_special_tokens_as_trl_does(monkeypatch):
    """TRL tokenizes plain-text prompts with `processing_class(text=prompts)` (a base model's BOS added), chat
    prompts through the template (which writes its own); the held-out evaluation does the same."""
    assert adds_special_tokens(["Question: 1 + 2\nAnswer:"]) is True
    assert adds_special_tokens([[{"role": "user", "content": "1 + 2"}]]) is False
    tokenizer = tiny.build_char_tokenizer()
    bos = tokenizer.bos_token_id
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", bos)])
    model = tiny.model()
    seen = []
    original = model.generate

    def recording_generate(**kwargs):
        seen.append(kwargs["input_ids"])
        return original(**kwargs)

    monkeypatch.setattr(model, "generate", recording_generate)
    decoded_completions_and_ids(model, tokenizer, ["12+3=", "7+1="], 2, {"do_sample": False})
    rows = seen[0].tolist()
    # left-padded: each row's first real token is BOS, then the prompt's characters
    assert [row[row.index(bos):] for row in rows] == [[bos, *tokenizer("12+3=", add_special_tokens=False).input_ids],
                                                     [bos, *tokenizer("7+1=", add_special_tokens=False).input_ids]]
