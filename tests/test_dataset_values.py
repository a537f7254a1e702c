"""Dataset values the run cannot use stop it with one line naming the row and the column: a prompt that is None,
blank, not text, or a chat message without text; a None in a column a reward reads; a stream smaller than one
generation batch, whatever the sampler. Before, they failed deep in the tokenizer after training had begun, or the
run ended at step 0 without a word."""

import json

import pytest
from datasets import Dataset, Features, Json

import trl_zoo
from tests import tiny
from trl_zoo.cli import main

CHAT = [{"role": "user", "content": "1+1="}]


def with_row_3(bad, n: int = 16, good="12+30=") -> Dataset:
    return Dataset.from_dict({"prompt": [good] * 3 + [bad] + [good] * (n - 4)})


def build(dataset, **overrides):
    return tiny.make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, dataset=dataset, **overrides)


@pytest.mark.parametrize(
    "dataset, problem",
    [
        (with_row_3(None), "is None"),
        (with_row_3(""), "is blank"),
        (with_row_3("  \n"), "is blank"),
        (Dataset.from_dict({"prompt": list(range(16))}), None),
        (with_row_3([], good=CHAT), "is an empty list of messages"),
        (with_row_3([{"role": "user", "content": None}], good=CHAT), "holds a 'user' message whose content is None"),
        (with_row_3([{"content": "1+1="}], good=CHAT), "holds {'role': None, 'content': '1+1='}, not a chat message"),
    ],
)
def test_an_unusable_prompt_is_refused_at_construction_naming_its_row(dataset, problem):
    with pytest.raises(ValueError) as error:
        build(dataset)
    message = str(error.value)
    if problem is None:  # a whole column of integers: the first row is named
        assert message.startswith(
            "train_dataset: row 0's 'prompt' is 0 (int), not a string or a list of chat messages"
        )
    else:
        assert message.startswith(f"train_dataset: row 3's 'prompt' {problem}")
    assert message.endswith("fix or filter that row, e.g. dataset.filter(lambda row: bool(row['prompt']))."), message


def test_a_none_prompt_in_a_stream_is_one_line_at_its_generation_batch():
    trainer = build(Dataset.from_dict({"prompt": [None] * 16}).to_iterable_dataset(), max_steps=1)
    with pytest.raises(ValueError, match=r"^train_dataset: a streamed row's 'prompt' is None; filter such rows"):
        trainer.train()


@pytest.mark.parametrize("sampler", [None, "resample", "reweight", "greso"])
def test_a_stream_smaller_than_one_generation_batch_is_refused_for_every_sampler(sampler):
    stream = Dataset.from_dict({"prompt": ["1+2="]}).to_iterable_dataset()
    who = f"dynamic_sampling={sampler!r}" if sampler else "train_dataset"
    with pytest.raises(
        ValueError, match=rf"^{who}: the training set holds 1 prompts, fewer than the 2 one generation"
    ):
        build(stream, dynamic_sampling=sampler)
    build(Dataset.from_dict({"prompt": ["1+2=", "3+4="]}).to_iterable_dataset(), dynamic_sampling=sampler)  # enough


@pytest.mark.parametrize("row, expected", [
    ({"prompt": None, "answer": "3"},
     "row 3's 'prompt' is None; fix or filter that row, e.g. dataset.filter(lambda row: bool(row['prompt']))."),
    ({"prompt": "1+2=", "answer": None},
     "row 3's 'answer' is None, which exact_match reads (it would score the row as if the reference were 'None'); "
     "fix or filter that row, e.g. dataset.filter(lambda row: bool(row['answer']))."),
])
def test_cli_names_the_files_row_before_any_split(tmp_path, capsys, row, expected):
    rows = [{"prompt": f"{a}+1=", "answer": str(a + 1)} for a in range(40)]
    rows[3] = row
    data = tmp_path / "sums.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    argv = ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data), "--max_steps", "1",
            "--write_report", "false", "--output_dir", str(tmp_path / "run")]
    assert main(argv) == 2
    assert (
        capsys.readouterr().err.strip().splitlines()[-1] == f"trl-zoo train: error: {data} (train split): {expected}"
    )


def test_prompts_mixing_text_and_chat_messages_are_one_line_at_construction():
    """TRL renders a batch by its first row, so a mix died in the tokenizer; `trl-zoo train` makes a mix one format
    (test_chat_prompts.py), a dataset given to the trainer must be one already."""
    mixed = Dataset.from_dict({"prompt": ["1+1="] * 3 + [CHAT] + ["1+1="] * 12}, features=Features({"prompt": Json()}))
    with pytest.raises(ValueError, match=r"^train_dataset: row 0's 'prompt' is text and row 3's a list of chat "
                                         r"messages, and TRL renders a batch one way \(by its first row\); give every "
                                         r"row one format, e.g. dataset.map\(lambda row: "):
        build(mixed)
