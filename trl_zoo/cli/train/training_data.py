"""The data `trl-zoo train` trains and evaluates on, from a dataset rather than a built-in task.

    _load_dataset_splits(task_args, seed, ...)  ->  (train, held-out, source)

loads it as `trl grpo` does (a hub dataset, a local data file or a `datasets` mixture, streamed or not), checks a
map-style dataset's prompts and the columns the rewards read (`dataset_values.py`), and splits off the held-out set:
the test split, else `test_split_size` or `num_heldout` rows (`heldout_count`); a streamed dataset holds out its
first rows, and `num_heldout 0` keeps none. `chat_prompts` makes the prompts what TRL renders (a built-in task's
too): chat-message rows kept, plain strings wrapped as a user message for a chat model, row by row. Bad input raises
`ConfigError` (one line naming the field).

Tests: tests/test_dataset_values.py (column values checked), tests/test_trl_grpo_fields.py (splits, mixtures,
streaming), tests/test_cli.py (data files and held-out counts), tests/test_chat_prompts.py (prompt formats).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from datasets import Dataset, DatasetDict, IterableDataset, IterableDatasetDict, load_dataset
from trl import DatasetMixtureConfig, get_dataset
from trl.data_utils import is_conversational

from ...dataset_values import REFERENCE_REWARDS, check_no_none, check_prompts, check_read_columns
from ...trainer import reads_reference_rewards
from ..errors import ConfigError, one_line

DATA_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
STREAMED_HELDOUT = 200  # rows a streamed dataset holds out without num_heldout (the cap of heldout_count)


def heldout_count(num_heldout: int | None, rows: int) -> int:
    """Rows to hold out of a split of `rows` rows: num_heldout when given, else max(1, min(200, ⌊rows / 10⌋))."""
    if num_heldout is not None:
        return num_heldout
    return max(1, min(200, rows // 10))


def _load_dataset(task_args, log=print):
    """The dataset (its splits are IterableDatasets when streamed) and its name, as `trl grpo` loads it:
    a `datasets` mixture through TRL's `get_dataset` (which wins over `dataset_name`, as in TRL), else
    `dataset_name`, a hub dataset or a local data file. `streaming` or `dataset_streaming` streams either."""
    streaming = task_args.streaming or task_args.dataset_streaming
    if task_args.datasets:
        if task_args.dataset_name:
            log(f"datasets: the mixture is used and dataset_name {task_args.dataset_name!r} is ignored, as in TRL.")
        # test_split_size is applied afterwards, with the run's seed, to mixtures and single datasets alike
        mixture = DatasetMixtureConfig(datasets=task_args.datasets, streaming=streaming, test_split_size=None)
        source = " + ".join(str(entry.data_files or entry.path) for entry in task_args.datasets)
        test_entries = mixture_test_entries(task_args.datasets, task_args.dataset_test_split)
        try:
            dataset = get_dataset(mixture)
            if test_entries:
                test = DatasetMixtureConfig(datasets=test_entries, streaming=streaming, test_split_size=None)
                dataset[task_args.dataset_test_split] = get_dataset(test)["train"]
        except Exception as error:  # a bad fraction, a missing file or dataset, mismatched columns
            raise ConfigError(f"datasets: cannot load the mixture ({one_line(error)}).") from None
        return dataset, source
    source = task_args.dataset_name
    suffix = Path(source).suffix.lower()
    if suffix in DATA_FILE_BUILDERS and not os.path.isfile(source):
        raise ConfigError(f"dataset_name: no such file {source!r}.")
    try:
        if os.path.isfile(source):
            if suffix not in DATA_FILE_BUILDERS:
                raise ConfigError(
                    f"dataset_name: cannot read {suffix or 'extension-less'} files; use "
                    f"{', '.join(DATA_FILE_BUILDERS)}."
                )
            dataset = load_dataset(DATA_FILE_BUILDERS[suffix], data_files=source, streaming=streaming)
        else:
            dataset = load_dataset(source, name=task_args.dataset_config, streaming=streaming)
    except ConfigError:
        raise
    except Exception as error:  # hub, file-format and network errors all mean "this dataset cannot be loaded"
        raise ConfigError(f"dataset_name: cannot load {source!r} ({one_line(error)}).") from None
    if not isinstance(dataset, (DatasetDict, IterableDatasetDict)):
        dataset = DatasetDict({task_args.dataset_train_split: dataset})
    return dataset, source


def mixture_test_entries(entries, test_split: str) -> list:
    """The mixture's test split: each entry whose `data_files` maps `test_split` to files, reading that split, whole
    (`fraction` shapes the training mixture only). TRL's `get_dataset` reads each entry's `split` ("train") alone."""
    return [
        dataclasses.replace(entry, split=test_split, fraction=None)
        for entry in entries
        if isinstance(entry.data_files, dict) and test_split in entry.data_files
    ]


def split_size(test_split_size: float) -> float | int:
    """TRL's `test_split_size` as `train_test_split` reads it: a fraction in (0, 1), or a whole number of rows."""
    if test_split_size >= 1 and float(test_split_size).is_integer():
        return int(test_split_size)
    if not 0 < test_split_size < 1:
        raise ConfigError(
            f"test_split_size: give a fraction in (0, 1) or a whole number of rows, got {test_split_size}."
        )
    return test_split_size


def column_names(dataset) -> list[str]:
    """A dataset's columns; a streamed one may not know them before its first row is read."""
    if dataset.column_names is not None:
        return list(dataset.column_names)
    first = next(iter(dataset), None)
    return list(first) if first is not None else []


def _load_dataset_splits(task_args, seed: int, log=print, reads: dict[str, str] | None = None, training_args=None):
    """(train, held-out). The held-out set is the test split; without one, `test_split_size` (TRL's) or
    `num_heldout` rows split off the training data. A streamed dataset holds out its first rows instead, and its
    held-out set is read into memory (it is measured again and again). `num_heldout 0`: no held-out set (None),
    every training row is trained on. Before any split, the prompts and the columns the rewards read (`reads`:
    column → reward) of a map-style dataset are checked, naming the file's row (`dataset_values.py`), and in its
    train split the columns the run reads (`training_args`: A*-PO's reference rewards, the expert column)."""
    dataset, source = _load_dataset(task_args, log)
    if task_args.dataset_train_split not in dataset:
        raise ConfigError(
            f"dataset_train_split: no split {task_args.dataset_train_split!r}; the dataset has {', '.join(dataset)}."
        )
    train = dataset[task_args.dataset_train_split]
    streaming = isinstance(train, IterableDataset)
    test_split = task_args.dataset_test_split
    if not streaming:
        for split in (task_args.dataset_train_split, test_split):
            if split in dataset:
                trained = training_args if split == task_args.dataset_train_split else None
                _check_values(dataset[split], f"{source} ({split} split)", task_args, reads or {}, trained)
    if task_args.num_heldout is not None and task_args.num_heldout < 0:
        raise ConfigError(f"num_heldout: must be ≥ 0 (0: no held-out set), got {task_args.num_heldout}.")
    if task_args.num_heldout == 0:
        if task_args.test_split_size is not None:
            raise ConfigError("num_heldout: 0 keeps no evaluation set, so test_split_size cannot split one; drop one.")
        log(f"{source}: num_heldout 0, so no held-out set: every training row is trained on and there is no held-out "
            f"evaluation (summary.json: heldout_size 0, accuracies null).")
        heldout = None
    elif streaming:
        if task_args.test_split_size is not None and test_split not in dataset:
            raise ConfigError(
                "test_split_size: a streamed dataset has no length to split by; give num_heldout N (its first N rows "
                "are held out) or a dataset with a test split."
            )
        count = task_args.num_heldout or STREAMED_HELDOUT
        if test_split in dataset:
            heldout = Dataset.from_list(list(dataset[test_split].take(count)))
        else:
            heldout = Dataset.from_list(list(train.take(count)))
            train = train.skip(count)
            log(f"{source}: streamed, no {test_split!r} split, so its first {len(heldout)} rows are held out for the "
                f"greedy evaluation (num_heldout).")
        if len(heldout) == 0 or (test_split not in dataset and next(iter(train), None) is None):
            raise ConfigError(f"num_heldout: the stream holds too few rows to hold out {count} and train on the rest.")
    elif test_split in dataset:
        heldout = dataset[test_split]
    elif task_args.test_split_size is not None:
        size = split_size(task_args.test_split_size)
        try:
            split = train.train_test_split(test_size=size, seed=seed)
        except ValueError as error:
            raise ConfigError(f"test_split_size: {one_line(error)}") from None
        train, heldout = split["train"], split["test"]
        log(f"{source}: no {test_split!r} split, so test_split_size={task_args.test_split_size:g} holds out "
            f"{len(heldout)} of its {len(train) + len(heldout)} rows for evaluation.")
    else:
        count = heldout_count(task_args.num_heldout, len(train))
        if not 0 < count < len(train):
            raise ConfigError(
                f"num_heldout: must be between 1 and {len(train) - 1} for this dataset (or 0: no held-out set)."
            )
        log(
            f"{source}: no {test_split!r} split, so {count} of its {len(train)} rows are held out "
            f"for the greedy evaluation (num_heldout)."
        )
        split = train.train_test_split(test_size=count, seed=seed)
        train, heldout = split["train"], split["test"]
    return (*_renamed_columns(train, heldout, task_args), source)


def _renamed_columns(train, heldout, task_args):
    """(train, held-out) with `prompt_column` and `answer_column` renamed to "prompt" and "answer"; a missing
    prompt column is refused naming the dataset's columns (a missing answer column is left to the rewards)."""
    columns = column_names(train)
    for column_arg, target in (("prompt_column", "prompt"), ("answer_column", "answer")):
        column = getattr(task_args, column_arg)
        if column not in columns:
            if target == "answer":
                continue  # a custom reward may not need one
            raise ConfigError(
                f"{column_arg}: no column {column!r}; the dataset has {', '.join(columns)}: name the one that holds "
                f"the prompts, e.g. --prompt_column {columns[0]}."
            )
        if column != target:
            train, heldout = (
                d.rename_column(column, target) if d is not None and target not in column_names(d) else d
                for d in (train, heldout)
            )
    return train, heldout


def _check_values(dataset, where: str, task_args, reads: dict[str, str], training_args=None) -> None:
    """The prompts and the columns the rewards read, as named in the file (before `prompt_column` and
    `answer_column` rename them), and with `training_args` the columns the run reads; a missing column is reported
    later, by name."""
    columns = column_names(dataset)
    if task_args.prompt_column in columns:
        check_prompts(dataset, task_args.prompt_column, where)
    for column, reader in reads.items():
        named = task_args.answer_column if column == "answer" else column
        if named in columns:
            check_no_none(dataset, named, reader, where)
    if training_args is not None:
        expert = getattr(training_args, "expert_column", None)
        expert = task_args.answer_column if expert == "answer" else expert
        reference = reads_reference_rewards(training_args) and REFERENCE_REWARDS in columns
        check_read_columns(dataset, reference, expert if expert in columns else None, where)


def _is_chat(prompt) -> bool:
    """A prompt TRL reads as conversational (`trl.data_utils.is_conversational`): a list of role messages."""
    return is_conversational({"prompt": prompt})


def chat_prompts(dataset, task_args, tokenizer, where: str, log=print):
    """The dataset's prompts as TRL will render them, row by row: a list of chat messages is kept as it is (TRL
    applies the chat template to it); a plain string becomes one user message (after `system_prompt`, if given) when
    `conversational` is on — by default, when the tokenizer has a chat template — else stays text. TRL renders a
    batch by its first row, so a map-style dataset left mixed (strings kept as text beside message lists), message
    lists without a chat template, and `conversational true` without one are refused, naming a row."""
    has_template = getattr(tokenizer, "chat_template", None) is not None
    wrap = has_template if task_args.conversational is None else task_args.conversational
    if wrap and not has_template:
        raise ConfigError(
            "conversational: true needs a chat template, and the tokenizer has none; give a chat model or drop "
            "--conversational true (plain-string prompts are then read as text)."
        )
    if not isinstance(dataset, IterableDataset):
        chat_rows = [row for row, prompt in enumerate(dataset["prompt"]) if _is_chat(prompt)]
        if chat_rows and not has_template:
            raise ConfigError(
                f"prompt: row {chat_rows[0]} of {where} is a list of chat messages, and the tokenizer has no chat "
                "template to render it (TRL's trainer would fail on it); give a chat model, or plain-string prompts."
            )
        if chat_rows and not wrap and len(chat_rows) < len(dataset):
            text_row = next(row for row in range(len(dataset)) if row not in set(chat_rows))
            raise ConfigError(
                f"conversational: false leaves row {text_row} of {where} as text while row {chat_rows[0]} is chat "
                "messages, and TRL renders a batch one way (by its first row); drop --conversational false (the "
                "text prompts become user messages) or give one format."
            )
        if chat_rows and task_args.system_prompt:
            log(f"system_prompt: added to the plain-string prompts only; the {len(chat_rows)} rows of {where} that "
                "are chat messages keep their own.")
    if not wrap:
        return dataset
    system = [{"role": "system", "content": task_args.system_prompt}] if task_args.system_prompt else []

    def as_messages(prompt):
        return prompt if _is_chat(prompt) else [*system, {"role": "user", "content": prompt}]

    return dataset.map(lambda row: {"prompt": as_messages(row["prompt"])})
