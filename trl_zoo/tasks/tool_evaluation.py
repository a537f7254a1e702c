"""Greedy rollouts with one tool round, as TRL's tool loop runs them (`max_tool_calling_iterations=1`), for the
held-out evaluation of a task whose environment offers tools (`environment_factory`, e.g. tasks/calculator.py).

For each prompt, with a fresh environment reset on the prompt's dataset columns (`reset(**row)`) and its tools
(TRL's rule: every public method of the environment's class but `reset` and `get_reward`):

    turn 1      greedy decoding of the prompt rendered with the tools
    tool round  each tool call TRL's parser reads from turn 1 (`parse_response`) is run; a failing call replies
                {"error": ...}; the replies are the tool messages, rendered after turn 1 as the chat template renders
                them (with the next generation prompt)
    turn 2      greedy decoding after the replies, within what is left of the completion budget: as in TRL, turn 1,
                the replies and turn 2 together hold at most `max_new_tokens` tokens, and replies that do not fit are
                dropped (the rollout ends after turn 1)

The completions are TRL's messages: [assistant] or [assistant, tool…, assistant]. Every prompt decodes both turns (a
prompt without a call repeats its turn 1, unused), so every process of a distributed evaluation decodes the same
number of batches.

Tests: tests/test_tool_evaluation.py.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from .decoding import GREEDY, decoded_texts_and_ids

_PLACEHOLDER = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]


def environment_tools(environment) -> list:
    """The environment's tools as TRL offers them: its class's public functions but `reset` and `get_reward`."""
    return [
        getattr(environment, name) for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
        if not name.startswith("_") and name not in ("reset", "get_reward")
    ]


def tool_reply_suffix(tokenizer, tool_messages: list, tools: list) -> str:
    """The text the chat template renders after an assistant turn for `tool_messages`, with the next generation
    prompt."""
    head = tokenizer.apply_chat_template(_PLACEHOLDER, tools=tools, tokenize=False)
    full = tokenizer.apply_chat_template([*_PLACEHOLDER, *tool_messages], tools=tools, tokenize=False,
                                         add_generation_prompt=True)
    if not full.startswith(head):
        raise ValueError("the chat template renders an assistant turn differently once tool replies follow it; "
                         "the tool round cannot be evaluated with this template.")
    return full[len(head):]


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _run_calls(row_tools: list, message: dict) -> list[dict]:
    tools = {tool.__name__: tool for tool in row_tools}
    replies = []
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        name = function.get("name", "unknown")
        try:
            result = tools[name](**function.get("arguments", {})) if name in tools else {
                "error": f"Tool {name} not found."}
        except Exception as error:  # a tool's failure is the model's reply to read, as in TRL's loop
            result = {"error": str(error)}
        replies.append({"role": "tool", "name": name, "content": result if isinstance(result, list) else str(result)})
    return replies


def greedy_tool_completions(
    model, tokenizer, prompts: list, max_new_tokens: int, environment_factory: Callable, columns: dict,
    batch_size: int = 256, synced: bool = False, progress: Callable[[int, int], None] | None = None,
) -> tuple[list[list[dict]], list[list[int]]]:
    """Each prompt's greedy rollout with one tool round (module docstring): (completions as messages, their token
    ids as TRL's `completion_ids`: turn 1 and, where the round was held, the replies' tokens and turn 2)."""
    from trl.chat_template_utils import parse_response

    tools = []  # each row's tools, bound to its own environment
    for row in range(len(prompts)):
        environment = environment_factory()
        environment.reset(**{name: values[row] for name, values in columns.items()})
        tools.append(environment_tools(environment))
    rendered = [tokenizer.apply_chat_template(prompt, tools=row_tools, tokenize=False, add_generation_prompt=True)
                for prompt, row_tools in zip(prompts, tools, strict=True)]
    _, first_ids = decoded_texts_and_ids(model, tokenizer, rendered, False, max_new_tokens, GREEDY, batch_size,
                                         synced, progress)
    completions, second_prompts, budgets, suffixes = [], [], [], []
    for row_tools, text, ids in zip(tools, rendered, first_ids, strict=True):
        first = parse_response(tokenizer, ids, prefix=_ids(tokenizer, text), tools=row_tools)
        completions.append([first])
        replies = _run_calls(row_tools, first)
        suffix = tool_reply_suffix(tokenizer, replies, row_tools) if replies else ""
        suffixes.append(_ids(tokenizer, suffix))
        budget = max_new_tokens - len(ids) - len(suffixes[-1])
        if not replies or budget <= 0:
            second_prompts.append(text)
            budgets.append(0)
            continue
        completions[-1].extend(replies)
        second_prompts.append(text + tokenizer.decode(ids, skip_special_tokens=False) + suffix)
        budgets.append(budget)
    longest = max(budgets)
    _, second_ids = decoded_texts_and_ids(model, tokenizer, second_prompts, False, max(longest, 1), GREEDY,
                                          batch_size, synced)
    all_ids = []
    rows = zip(completions, first_ids, second_ids, budgets, suffixes, second_prompts, tools, strict=True)
    for messages, ids, more, budget, suffix, text, row_tools in rows:
        if budget > 0:
            more = more[:budget]
            if more:
                messages.append(parse_response(tokenizer, more, prefix=_ids(tokenizer, text), tools=row_tools))
            ids = ids + suffix + more
        all_ids.append(ids)
    return completions, all_ids
