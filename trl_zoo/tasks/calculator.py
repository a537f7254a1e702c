"""A calculator tool for the arithmetic questions: the environment of a two-turn rollout (TRL's
`environment_factory`), for the multi-turn estimators GiGPO and MT-GRPO.

A rollout is the model's first turn, which may call the tool `calculate(expression)`, the tool's reply, and the
model's second turn, the answer (TRL runs the loop; a first turn that calls no tool is the answer itself). The
environment, one per rollout:

    reset(**row)              keeps the row's `answer` (chat_arithmetic's label column); adds nothing to the prompt
    calculate(expression)     the tool: the value of an integer expression of +, − and × (`value_of`), as text, or
                              the reason it has none ("error: ...")
    turn_rewards              per call, 1.0 when the tool's value is the answer, 0.0 when it is not or the
                              expression has no value (components/turns.py reads it: each tool turn's reward; the
                              answer's turn is the reward functions')

so MT-GRPO's turn advantage credits a call that computes the right thing and the outcome reward credits the answer
(MT-GRPO reads two turns: run it with TRL's `max_tool_calling_iterations=1`).
An expression is read by Python's own parser and evaluated over its tree: integers, +, −, ×, unary minus and
parentheses only, at most `MAX_EXPRESSION_CHARACTERS` characters and values within ±`MAX_VALUE`; anything else (a
name, a division, a power, a call) has no value.

`use_tool_template(tokenizer)` gives a ChatML tokenizer (SmolLM2's, Qwen2.5's) TRL's Qwen2.5 chat template, which
renders the tools' schema and `<tool_call>` blocks, and TRL's parser of those blocks (`add_response_schema`), which
TRL needs to read the model's tool calls.

Tests: tests/test_calculator.py.
"""

from __future__ import annotations

import ast
import json

MAX_EXPRESSION_CHARACTERS = 64
MAX_VALUE = 10**12
_OPERATIONS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__}


def value_of(expression: str) -> int:
    """The integer value of `expression` (module docstring); a ValueError saying why it has none."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValueError("an expression is a non-empty string such as '47 + 38'")
    if len(expression) > MAX_EXPRESSION_CHARACTERS:
        raise ValueError(f"an expression has at most {MAX_EXPRESSION_CHARACTERS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"{expression!r} is not an arithmetic expression") from None
    return _evaluated(tree.body)


def _evaluated(node) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = node.value
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluated(node.operand) * (-1 if isinstance(node.op, ast.USub) else 1)
    elif isinstance(node, ast.BinOp) and type(node.op) in _OPERATIONS:
        value = _OPERATIONS[type(node.op)](_evaluated(node.left), _evaluated(node.right))
    else:
        raise ValueError("only integers, +, -, * and parentheses are calculated")
    if abs(value) > MAX_VALUE:
        raise ValueError(f"values beyond ±{MAX_VALUE:.0e} are not calculated")
    return value


class Calculator:
    """The environment of one rollout (module docstring)."""

    def reset(self, answer=None, **row) -> None:
        self.answer = None if answer is None else int(answer)
        self.turn_rewards: list[float] = []

    def calculate(self, expression: str) -> str:
        """Calculate an arithmetic expression of integers with +, - and *.

        Args:
            expression: The expression, for example "47 + 38".

        Returns:
            The expression's value, or why it has none.
        """
        try:
            value = value_of(expression)
        except ValueError as error:
            self.turn_rewards.append(0.0)
            return f"error: {error}"
        self.turn_rewards.append(1.0 if value == self.answer else 0.0)
        return str(value)


def tool_call_text(name: str, arguments: dict) -> str:
    """A tool call as the Qwen2.5 tool template renders it in an assistant turn (and its parser reads it back)."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def use_tool_template(tokenizer):
    """`tokenizer` with TRL's Qwen2.5 tool-calling chat template and its response parser (module docstring)."""
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template

    tokenizer.chat_template = qwen2_5_chat_template
    return add_response_schema(tokenizer)
