"""Values a run can read from its dataset, checked before training rather than deep in the tokenizer.

A prompt is a non-blank string, or a non-empty list of chat messages ({"role": str, "content": str or a list of
parts}); the trainer's prompts are all of one kind, since TRL renders a batch one way, by its first row (`trl-zoo
train` makes a mixed file one kind first: cli/training_data.py). A column a reward function reads holds no None:
exact_match would compare the completion with "None" and score the row 0, silently. A map-style dataset is checked
whole at construction (the error names the first bad row); a streamed one shows its rows only while it is read, so
its prompts are checked per generation batch. A*-PO's `reference_rewards` column (`advantages/a2po.py`) holds, per
prompt, the rewards of the same number of reference samples, each a number (NaN for an unscorable one).

Tests: tests/test_dataset_values.py, tests/test_a2po.py (the reference-rewards column).
"""

from __future__ import annotations

import math

REFERENCE_REWARDS = "reference_rewards"
FIX = "fix or filter that row, e.g. dataset.filter(lambda row: bool(row['{column}']))"


def prompt_problem(prompt) -> str | None:
    """What makes `prompt` unusable, as the end of a sentence ("is None"); None when it is usable."""
    if prompt is None:
        return "is None"
    if isinstance(prompt, str):
        return "is blank" if not prompt.strip() else None
    if isinstance(prompt, list):
        if not prompt:
            return "is an empty list of messages"
        for message in prompt:
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                return f"holds {message!r}, not a chat message {{'role': ..., 'content': ...}}"
            if not isinstance(message.get("content"), (str, list)):
                return f"holds a {message['role']!r} message whose content is {message.get('content')!r}"
        return None
    return f"is {prompt!r} ({type(prompt).__name__}), not a string or a list of chat messages"


def check_prompts(dataset, column: str = "prompt", where: str = "train_dataset") -> None:
    """Raise a one-line ValueError naming the first row of a map-style `dataset` whose prompt is unusable."""
    for row, prompt in enumerate(dataset[column]):
        problem = prompt_problem(prompt)
        if problem is not None:
            raise ValueError(f"{where}: row {row}'s {column!r} {problem}; {FIX.format(column=column)}.")


def check_one_format(prompts, where: str = "train_dataset") -> None:
    """Raise a one-line ValueError when `prompts` (usable ones) mix plain strings and lists of chat messages."""
    text = next((row for row, prompt in enumerate(prompts) if isinstance(prompt, str)), None)
    chat = next((row for row, prompt in enumerate(prompts) if isinstance(prompt, list)), None)
    if text is not None and chat is not None:
        raise ValueError(
            f"{where}: row {text}'s 'prompt' is text and row {chat}'s a list of chat messages, and TRL renders a "
            f"batch one way (by its first row); give every row one format, e.g. dataset.map(lambda row: {{'prompt': "
            f"row['prompt'] if isinstance(row['prompt'], list) else [{{'role': 'user', 'content': row['prompt']}}]}})."
        )


def check_batch_prompts(prompts) -> None:
    """The same checks for the prompts of one generation batch of a streamed dataset (no row numbers to name)."""
    for prompt in prompts:
        problem = prompt_problem(prompt)
        if problem is not None:
            raise ValueError(
                f"train_dataset: a streamed row's 'prompt' {problem}; filter such rows, e.g. "
                f"dataset.filter(lambda row: bool(row['prompt']))."
            )
    check_one_format(prompts, where="train_dataset (a streamed generation batch)")


def check_no_none(dataset, column: str, reader: str, where: str = "train_dataset") -> None:
    """Raise a one-line ValueError naming the first row of a map-style `dataset` whose `column` (which `reader`
    reads) is None."""
    for row, value in enumerate(dataset[column]):
        if value is None:
            raise ValueError(
                f"{where}: row {row}'s {column!r} is None, which {reader} reads (it would score the row as if the "
                f"reference were 'None'); {FIX.format(column=column)}."
            )


def reference_rewards(rows) -> list[list[float]]:
    """The `reference_rewards` of each of TRL's input `rows` (dicts of dataset columns), as floats (None: NaN); a
    one-line ValueError naming the first row without such a list, or whose count differs from the first row's."""
    fix = "add the column with trl_zoo.sample_reference_rewards(model, tokenizer, dataset, reward_funcs)"
    values = []
    for row, example in enumerate(rows):
        rewards = example.get(REFERENCE_REWARDS) if isinstance(example, dict) else None
        if not isinstance(rewards, (list, tuple)) or not rewards:
            raise ValueError(
                f"{REFERENCE_REWARDS}: row {row} of the batch has {rewards!r}, not a list of the rewards of its "
                f"prompt's reference samples, which advantage_estimator='a2po' reads; {fix}."
            )
        if any(reward is not None and not isinstance(reward, (int, float)) for reward in rewards):
            raise ValueError(f"{REFERENCE_REWARDS}: row {row} holds {rewards!r}, not numbers; {fix}.")
        if values and len(rewards) != len(values[0]):
            raise ValueError(
                f"{REFERENCE_REWARDS}: row {row} holds {len(rewards)} rewards and row 0 {len(values[0])}; give every "
                f"prompt the same number of reference samples; {fix}."
            )
        values.append([math.nan if reward is None else float(reward) for reward in rewards])
    return values
