"""Values a run can read from its dataset, checked before training rather than deep in the tokenizer.

A prompt is a non-blank string, or a non-empty list of chat messages ({"role": str, "content": str or a list of
parts}); the trainer's prompts are all of one kind, since TRL renders a batch one way, by its first row (`trl-zoo
train` makes a mixed file one kind first: cli/train/training_data.py). A column a reward function reads holds no None:
exact_match would compare the completion with "None" and score the row 0, silently. A map-style dataset is checked
whole at construction (the error names the first bad row); a streamed one shows its rows only while it is read, so
its prompts are checked per generation batch.

A*-PO's `reference_rewards` column (`advantages/a2po.py`) holds, per prompt, the rewards of the same number K of
reference samples, each a number within ±`MAX_ABS_REFERENCE_REWARD` (None or NaN for an unscorable one): a2po
regresses β₂·ln(π/π_ref) onto R − V*(x) with no group normalisation, so a reward of a million is a unit mistake,
and ±inf makes V* infinite. A map-style dataset's rows are all checked at construction (values, and every row's K
against row 0's), a stream's first generation batch too, and each later batch as the estimator reads it.

The expert column (`expert_column`: CHORD's answers, LUFFY's traces) holds text; None, and a blank string
('' or only whitespace), is "no expert answer for this prompt" (no demonstration, no trace); a number (42 from a
JSON file) is its str(), '42'; anything else is refused naming the row and its type. A map-style column with no
answer in any row is refused too (the run would be plain RL).

Tests: tests/test_dataset_values.py, tests/test_a2po.py (the reference-rewards column), tests/test_expert_sft.py and
tests/test_luffy.py (the expert column).
"""

from __future__ import annotations

import math
from numbers import Real

from .numerics import short_repr

REFERENCE_REWARDS = "reference_rewards"
MAX_ABS_REFERENCE_REWARD = 1e6  # A*-PO's R − V*(x) is regressed onto unscaled (module docstring)
FIX = "fix or filter that row, e.g. dataset.filter(lambda row: bool(row['{column}']))"
REFERENCE_FIX = (
    "fix that row, or write the column with trl_zoo.sample_reference_rewards(model, tokenizer, dataset, reward_funcs)"
)
EXPERT_FIX = "give the expert answer as text (None or '' for a prompt without one)"


class DatasetValueError(ValueError):
    """A dataset value the run cannot use, found while training (a streamed row): bad input, one line."""


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
            raise DatasetValueError(
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


def reference_rewards_problem(rewards) -> str | None:
    """What makes one row's `reference_rewards` unusable, as the end of a sentence; None when usable."""
    if not isinstance(rewards, (list, tuple)) or not rewards:
        return (
            f"is {short_repr(rewards)} ({type(rewards).__name__}), not a list of the rewards of its prompt's "
            f"reference samples, which advantage_estimator='a2po' reads"
        )
    for position, reward in enumerate(rewards):
        if reward is None:
            continue
        if not isinstance(reward, Real):
            return f"holds {short_repr(reward)} ({type(reward).__name__}) at position {position}, not a number"
        if math.isnan(reward):
            continue  # an unscorable sample, as None
        if math.isinf(reward):
            return (
                f"holds {float(reward)} at position {position}, not a finite reward (None or NaN marks an "
                f"unscorable sample)"
            )
        if abs(reward) > MAX_ABS_REFERENCE_REWARD:
            return (
                f"holds {float(reward):.3g} at position {position}, beyond ±{MAX_ABS_REFERENCE_REWARD:.0e} (a2po "
                f"regresses onto R − V*(x) unscaled); rescale the rewards"
            )
    return None


def check_reference_rewards(values, where: str = "train_dataset") -> None:
    """Raise a one-line ValueError naming the first of the rows' `reference_rewards` `values` (a map-style column,
    or a stream's first rows) that is unusable, or whose count K differs from row 0's."""
    count = None
    for row, rewards in enumerate(values):
        problem = reference_rewards_problem(rewards)
        if problem is not None:
            raise ValueError(f"{where}: row {row}'s {REFERENCE_REWARDS!r} {problem}; {REFERENCE_FIX}.")
        if count is None:
            count = len(rewards)
        elif len(rewards) != count:
            raise ValueError(
                f"{where}: row {row}'s {REFERENCE_REWARDS!r} holds {len(rewards)} rewards and row 0's {count}; give "
                f"every prompt the same number K of reference samples; {REFERENCE_FIX}."
            )


def reference_rewards(rows) -> list[list[float]]:
    """The `reference_rewards` of each of TRL's input `rows` (dicts of dataset columns), as floats (None: NaN); a
    one-line error naming the first row of the batch that `reference_rewards_problem` refuses, or whose count
    differs from the first row's (a map-style dataset was checked whole at construction; a stream is checked here)."""
    values = []
    for row, example in enumerate(rows):
        rewards = example.get(REFERENCE_REWARDS) if isinstance(example, dict) else None
        problem = reference_rewards_problem(rewards)
        if problem is not None:
            raise DatasetValueError(f"{REFERENCE_REWARDS}: row {row} of the batch {problem}; {REFERENCE_FIX}.")
        if values and len(rewards) != len(values[0]):
            raise DatasetValueError(
                f"{REFERENCE_REWARDS}: row {row} of the batch holds {len(rewards)} rewards and row 0 "
                f"{len(values[0])}; give every prompt the same number K of reference samples; {REFERENCE_FIX}."
            )
        values.append([math.nan if reward is None else float(reward) for reward in rewards])
    return values


def expert_answer_problem(answer) -> str | None:
    """What makes an expert-column value unusable, as the end of a sentence; None when usable (module docstring)."""
    if answer is None or isinstance(answer, str):
        return None
    if isinstance(answer, Real) and not isinstance(answer, bool) and math.isfinite(answer):
        return None
    return f"holds {short_repr(answer)} ({type(answer).__name__}), not an expert answer"


def expert_answer(answer) -> str | None:
    """An expert-column value as the answer's text: None for no answer (None, '' or whitespace), str() of a number
    (42 → '42'), a string as it is; a usable value (`expert_answer_problem`) only."""
    if answer is None:
        return None
    text = answer if isinstance(answer, str) else str(answer)
    return text if text.strip() else None


def check_expert_answers(values, column: str, where: str = "train_dataset", whole: bool = True) -> None:
    """Raise a one-line ValueError naming the first row of the expert `column`'s `values` that is not an answer;
    with `whole` (a map-style dataset's every row, not a stream's first ones), also when no row holds one."""
    answered = 0
    for row, answer in enumerate(values):
        problem = expert_answer_problem(answer)
        if problem is not None:
            raise ValueError(f"{where}: row {row}'s {column!r} (expert_column) {problem}; {EXPERT_FIX}.")
        answered += expert_answer(answer) is not None
    if whole and not answered:
        raise ValueError(
            f"{where}: the expert_column {column!r} holds no answer in any row (each None or blank), so the run "
            f"would be plain RL; name the column that holds the expert answers, or drop expert_column."
        )


def check_read_columns(
    dataset, reference_rewards: bool, expert_column: str | None, where: str = "train_dataset"
) -> None:
    """The values of the columns a run reads beyond the prompts: A*-PO's `reference_rewards` (when its estimator
    reads them) and the `expert_column`, in every row of a map-style `dataset`, or in each row of a list of a
    stream's first rows (dicts); the trainer checks its training set so, `trl-zoo train` a data file (its rows)."""

    def values(column):
        return [row.get(column) for row in dataset] if isinstance(dataset, list) else dataset[column]

    if reference_rewards:
        check_reference_rewards(values(REFERENCE_REWARDS), where)
    if expert_column is not None:
        check_expert_answers(values(expert_column), expert_column, where, whole=not isinstance(dataset, list))
