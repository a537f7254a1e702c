"""The greedy held-out evaluation of `trl-zoo train` on two CPU processes, under FSDP2 and DDP (issue 27: under
FSDP2 one process read 0.0 % while the other read 57.0 %).

Every process takes part in each evaluation (under FSDP every forward is a collective), decodes its half of the
held-out prompts, and gets the same accuracy; the run log records it once per evaluation. The tiny policy is made to
end its greedy answers at different lengths, so the two halves finish decoding at different steps (the decoding is
synchronised: a finished process keeps stepping until the other has finished). The held-out answers are the policy's
own greedy answers on half of the prompts and wrong on the other half: 50 % before training, where the first
evaluation is taken once the trainer has prepared (and, under FSDP2, sharded) the model."""

import json

import pytest
import torch

from tests import tiny
from tests.two_processes import launch_two_processes
from trl_zoo.tasks.evaluation import greedy_completions, process_share

SETUPS = {"ddp": "configs/accelerate/ddp.yaml", "fsdp2": "configs/accelerate/fsdp2.yaml"}
TRAIN_PROMPTS = [f"{a}+{b}=" for a, b in zip(range(10, 26), range(30, 46))]
HELDOUT_PROMPTS = [f"{a}+{b}=" for a, b in zip(range(50, 62), range(20, 32))]


def early_stopping_policy(folder):
    """The tiny random policy, moved off its near-uniform start, with an end-of-sequence embedding twice that of
    "=" (tied to the output layer): its greedy answers end after 1 to 6 tokens depending on the prompt."""
    model, tokenizer = tiny.model(0), tiny.tokenizer()
    tiny.perturb(model, seed=1, scale=0.3)
    with torch.no_grad():
        embeddings = model.get_input_embeddings().weight
        embeddings[tokenizer.eos_token_id] = 2.0 * embeddings[tokenizer.convert_tokens_to_ids("=")]
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("heldout_eval")
    model, tokenizer = early_stopping_policy(folder / "model")
    said = greedy_completions(model, tokenizer, HELDOUT_PROMPTS, 6)
    lengths = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in said]
    first, second = (process_share(len(HELDOUT_PROMPTS), index, 2)[0] for index in (0, 1))
    assert max(lengths[i] for i in first[3:]) != max(lengths[i] for i in second[3:])  # halves end at other steps
    (folder / "train.jsonl").write_text("\n".join(json.dumps({"prompt": p, "answer": "x"}) for p in TRAIN_PROMPTS))
    (folder / "test.jsonl").write_text("\n".join(
        json.dumps({"prompt": p, "answer": text if i % 2 == 0 else "wrong"})
        for i, (p, text) in enumerate(zip(HELDOUT_PROMPTS, said))
    ))
    return {
        setup: launch_two_processes("heldout_eval_two_processes.py", folder / f"{setup}.json", str(folder),
                                    str(folder / "model"), str(folder / f"run_{setup}"), config_file=config_file)
        for setup, config_file in SETUPS.items()
    }


def test_both_processes_report_the_same_accuracy_under_fsdp2(runs):
    fsdp = runs["fsdp2"]
    assert fsdp["distributed_type"] == "FSDP"
    first, second = fsdp["histories"]
    assert [step for step, _ in first] == [0, 1, 2, 3]
    assert first == second
    assert first[0] == [0, 0.5]  # the policy's own answers on half of the prompts
    assert fsdp["eval_records"] == first  # recorded once per evaluation


def test_fsdp2_evaluates_as_ddp_does(runs):
    ddp, fsdp = runs["ddp"], runs["fsdp2"]
    assert ddp["distributed_type"] == "MULTI_CPU"
    assert ddp["histories"][0] == ddp["histories"][1] == ddp["eval_records"]
    assert len({accuracy for _, accuracy in ddp["histories"][0]}) > 1  # training moved the greedy answers
    torch.testing.assert_close(torch.tensor(fsdp["histories"][0]), torch.tensor(ddp["histories"][0]))
