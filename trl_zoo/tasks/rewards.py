"""Verifiable rewards for answer-checked tasks: 1.0 when the completion's answer equals the reference, else 0.0.

    exact_match:   R = [ normalise(completion) == normalise(answer) ]
    final_number:  R = [ last number in completion == reference number ]   (GSM8K style: "... #### 72")
                   R = [ answer_line_number(completion) == reference number ]   where the dataset's column
                       `answer_first_line` is True (a base model's "Question: …\nAnswer:" prompt: the completion
                       opens with the answer line, then the model goes on with more questions); the answer line is
                       the completion's first line, its number the one after its last "=" if it has one (" 47 + 38
                       = 85"), else its first (" 85", " 85 (47 + 38)")
    final_answer:  R = [ normalise(text after the completion's last ":") == normalise(answer) ]   (worked solutions)

All follow TRL's reward-function signature `f(completions, **dataset_columns) -> list[float]`, reading the
reference from the dataset's `answer` column.

Tests: tests/test_quickstart.py (exact_match, final_number), tests/test_testbed_task.py (final_answer),
tests/test_chat_arithmetic.py (last number of a rambling answer), tests/test_base_prompt.py (the answer line).
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def completion_text(completion) -> str:
    """A completion as text: TRL passes a string, or a list of chat messages for conversational prompts, whose
    tool replies (role "tool", in a rollout with tools) are the environment's words, not the model's, and are left
    out; the model's turns are joined by a line break."""
    if isinstance(completion, list):
        return "\n".join(message.get("content") or "" for message in completion
                       if isinstance(message, dict) and message.get("role") != "tool")
    return str(completion)


def reference_answer(answer) -> str:
    """The checkable part of a reference: what follows GSM8K's '####' marker, or the whole answer, stripped."""
    text = str(answer)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return text.strip()


def normalise(text: str) -> str:
    return " ".join(text.strip().lower().split())


def exact_match_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 where the whole completion (trimmed, case- and space-normalised) equals the reference answer."""
    return [
        float(normalise(completion_text(completion)) == normalise(reference_answer(reference)))
        for completion, reference in zip(completions, answer, strict=True)
    ]


def final_number(text: str) -> str | None:
    """The last number in `text`, without thousands separators or a trailing '.0' (None if there is none)."""
    numbers = _NUMBER.findall(text)
    if not numbers:
        return None
    number = numbers[-1].replace(",", "")
    if "." in number:
        number = number.rstrip("0").rstrip(".")
    return number


def answer_line_number(text: str) -> str | None:
    """The number on the answer line, the first line of `text`: the first number after the line's last "=" if it
    has one (a worked " 47 + 38 = 85"), else the line's first number (" 85"); None if there is none there;
    normalised as `final_number`."""
    line = text.lstrip(" \t").split("\n", 1)[0]
    match = _NUMBER.search(line.rsplit("=", 1)[-1])
    return None if match is None else final_number(match.group())


def final_number_reward(completions, answer, answer_first_line=None, **kwargs) -> list[float]:
    """1.0 where the last number in the completion equals the reference's number (GSM8K's '#### N'); in the rows
    whose `answer_first_line` column is True, where the number on the completion's first line (`answer_line_number`)
    does."""
    first_line = answer_first_line if answer_first_line is not None else [False] * len(completions)
    rewards = []
    for completion, reference, on_first_line in zip(completions, answer, first_line, strict=True):
        text = completion_text(completion)
        predicted = answer_line_number(text) if on_first_line else final_number(text)
        expected = final_number(reference_answer(reference))
        rewards.append(float(predicted is not None and predicted == expected))
    return rewards


def final_answer_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 where the text after the completion's last ':' equals the reference (a worked solution's answer line);
    0.0 when there is no ':'."""
    rewards = []
    for completion, reference in zip(completions, answer, strict=True):
        text = completion_text(completion)
        said = text.rsplit(":", 1)[1] if ":" in text else None
        rewards.append(float(said is not None and normalise(said) == normalise(reference_answer(reference))))
    return rewards


REWARDS = {
    "exact_match": exact_match_reward,
    "final_number": final_number_reward,
    "final_answer": final_answer_reward,
}
