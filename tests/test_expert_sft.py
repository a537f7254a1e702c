"""CHORD's SFT term on expert demonstrations inside the RL step (trl_zoo/sft_term.py,
trl_zoo/components/expert_sft.py, trl_zoo/config/expert_sft.py): μ's schedule and the (φ-weighted) SFT loss against
transcriptions of the authors' code, the combined loss's value and gradient on a tiny model against closed forms, the
demonstrations' path through the batch, the refusals, and training runs.

The reference, transcribed below (the `reference_*` functions): the CHORD authors' framework, modelscope/Trinity-RFT,
commit b458e2c26ff13b2f538ecbc819a2e0a40e98fc73, trinity/algorithm/policy_loss_fn/chord_policy_loss.py
(`mu_schedule_function`, `phi_function`, `SFTPhiLossFn`, `MIXCHORDPolicyLossFn`'s `(1 - mu) * grpo_loss + mu *
sft_loss`) and trinity/algorithm/utils.py (`masked_mean`, `masked_loss`'s "token-mean"), and
trinity/algorithm/policy_loss_fn/sft_loss.py (`SFTLossFn`) at commit 51d229f5ccb1d5ed5cd376c39f6d576789f54d4a; the
token-level loss, their default (`use_token_level_loss_in_sft: true`).
"""

import json
import math

import pytest
import torch
from datasets import Dataset

import trl_zoo
from tests import tiny
from tests.test_advantages import generate, one_thread  # noqa: F401  (autouse fixture)
from tests.tiny import make_trainer
from trl_zoo.cli import main
from trl_zoo.dataset_values import DatasetValueError
from trl_zoo.sft_term import mu_schedule, sft_loss


# ---------------------------------------------------------------------------------------------------- the reference
def reference_mu(global_step, mu_warmup_steps, mu_decay_steps, mu_peak, mu_valley):
    """Trinity-RFT's `mu_schedule_function`."""
    if global_step < mu_warmup_steps:
        return (global_step / mu_warmup_steps) * mu_peak
    if global_step >= (mu_warmup_steps + mu_decay_steps):
        return mu_valley
    adjusted_step = global_step - mu_warmup_steps
    cosine_decay = 0.5 * (1 + math.cos(math.pi * adjusted_step / mu_decay_steps))
    return (mu_peak - mu_valley) * cosine_decay + mu_valley


def reference_masked_mean(values, mask):
    return (values * mask).sum() / (mask.sum() + 1e-8)


def reference_sft(logprob, action_mask):
    """Trinity-RFT's `SFTLossFn` (token level)."""
    return reference_masked_mean(-logprob, action_mask)


def reference_sft_phi(logprob, action_mask):
    """Trinity-RFT's `SFTPhiLossFn` (token level, cutoff_prob 1.0: no clamp), with `phi_function`."""
    token_prob = torch.exp(logprob)
    weighted_phi = token_prob * (1 - token_prob)
    return reference_masked_mean(-logprob * weighted_phi.detach(), action_mask)


def reference_mix(grpo_loss, sft_loss, mu):
    """`MIXCHORDPolicyLossFn`'s combination, for one micro-batch holding the whole batch (its per-micro-batch
    weights are then 1)."""
    return (1 - mu) * grpo_loss + mu * sft_loss


# ---------------------------------------------------------------------------------------------------- the maths
RECIPES = {  # (warm-up, decay, peak, valley): the authors' CHORD-μ, CHORD-φ (their code's defaults), their example
    "chord_mu": (0, 200, 0.9, 0.05),
    "chord_phi": (0, 0, 0.1, 0.1),
    "example": (200, 400, 0.5, 0.02),
}


@pytest.mark.parametrize("recipe", RECIPES)
def test_mu_schedule_is_the_authors(recipe):
    for step in range(0, 800, 3):
        assert mu_schedule(step, *RECIPES[recipe]) == pytest.approx(reference_mu(step, *RECIPES[recipe]), abs=1e-12)


def test_mu_schedule_values():
    example = RECIPES["example"]
    assert mu_schedule(50, *example) == pytest.approx(0.125)  # a quarter of the warm-up: μ_p / 4
    assert mu_schedule(400, *example) == pytest.approx(0.26)  # half the decay: (μ_p + μ_v) / 2
    assert mu_schedule(700, *example) == pytest.approx(0.02)
    assert mu_schedule(100, *RECIPES["chord_mu"]) == pytest.approx(0.475)
    assert mu_schedule(150, *RECIPES["chord_mu"]) == pytest.approx(0.05 + 0.85 * (1 - math.sqrt(0.5)) / 2)
    assert [mu_schedule(step, *RECIPES["chord_phi"]) for step in (0, 7, 5000)] == pytest.approx([0.1] * 3)
    args = trl_zoo.GRPOConfig(**tiny.config_kwargs(), expert_column="answer")
    defaults = (args.expert_mu_warmup_steps, args.expert_mu_decay_steps, args.expert_mu_peak, args.expert_mu_valley)
    assert defaults == RECIPES["chord_phi"] and args.expert_phi is True


def random_logps(seed=0, rows=3, length=5):
    generator = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(rows, length, 6, generator=generator, dtype=torch.float64)
    tokens = torch.randint(0, 6, (rows, length), generator=generator)
    logps = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    mask = torch.ones(rows, length, dtype=torch.int64)
    mask[0, 3:] = 0
    mask[2, 1:] = 0
    return logps.requires_grad_(), mask


@pytest.mark.parametrize("use_phi", [False, True])
def test_sft_loss_and_its_gradient_are_the_authors(use_phi):
    logps, mask = random_logps()
    reference = (reference_sft_phi if use_phi else reference_sft)(logps, mask)
    ours = sft_loss(logps, mask, use_phi)
    torch.testing.assert_close(ours, reference)
    (gradient,) = torch.autograd.grad(ours, logps)
    (expected,) = torch.autograd.grad(reference, logps)
    torch.testing.assert_close(gradient, expected)
    # the closed form: ∂L/∂log p_t = −m_t·[φ(p_t)] / Σ m; φ carries no gradient
    p = logps.detach().exp()
    weight = p * (1 - p) if use_phi else torch.ones_like(p)
    torch.testing.assert_close(gradient, -weight * mask / mask.sum())
    if use_phi:
        assert (ours - sft_loss(logps, mask, False)).abs() > 0.1  # φ ≤ ¼ shrinks the NLL


def test_rows_weighted_by_their_count_are_the_rows_repeated():
    """The component's forward runs over the distinct rows, each weighted by how many rows carry it."""
    logps, mask = random_logps(seed=1)
    counts = torch.tensor([3, 1, 2])
    repeated = sft_loss(logps.repeat_interleave(counts, 0), mask.repeat_interleave(counts, 0), True)
    torch.testing.assert_close(sft_loss(logps, mask * counts.unsqueeze(1), True), repeated)
    assert (repeated - sft_loss(logps, mask, True)).abs() > 1e-3


# ---------------------------------------------------------------------------------------------------- on a tiny model
def answers_dataset(n: int = 16, missing_every: int = 0) -> Dataset:
    """Prompts "a+b=" with the expert answer "a+b" (None for every `missing_every`-th prompt when set)."""
    a, b = range(10, 10 + n), range(30, 30 + n)
    answers = [None if missing_every and i % missing_every == 0 else str(x + y) for i, (x, y) in enumerate(zip(a, b))]
    return Dataset.from_dict({"prompt": [f"{x}+{y}=" for x, y in zip(a, b)], "answer": answers})


def expert_trainer(dataset=None, **overrides):
    dataset = answers_dataset() if dataset is None else dataset
    return make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, dataset=dataset, **{"expert_column": "answer",
                                                                                      **overrides})


def expected_expert_rows(trainer, batch, dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """The expert ids and mask built by hand: each row's prompt decoded, its answer's characters and EOS, cut at
    max_completion_length, right-padded."""
    tokenizer = trainer.processing_class
    prompts = tokenizer.batch_decode([ids[m.bool()] for ids, m in zip(batch["prompt_ids"], batch["prompt_mask"])])
    answer_of = dict(zip(dataset["prompt"], dataset["answer"]))
    width = trainer.args.max_completion_length
    ids = torch.full((len(prompts), width), tokenizer.pad_token_id)
    mask = torch.zeros((len(prompts), width), dtype=torch.int64)
    for row, prompt in enumerate(prompts):
        if answer_of[prompt] is None:
            continue
        tokens = (tokenizer(answer_of[prompt], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
        tokens = tokens[:width]
        ids[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1
    return ids, mask


def expert_logps_by_hand(model, batch, ids, mask) -> torch.Tensor:
    """log π(y*_t) of the expert tokens after each row's prompt from the model's full logits, every row (B, T)."""
    width = int(mask.any(0).nonzero().max()) + 1
    input_ids = torch.cat([batch["prompt_ids"], ids[:, :width]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], mask[:, :width]], dim=1)
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -width - 1 : -1].double()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, :width].unsqueeze(-1)).squeeze(-1), mask[:, :width]


def loss_and_gradients(trainer, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    trainer.model.train()
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    return loss.detach().double(), {n: p.grad.double().clone() for n, p in trainer.model.named_parameters()}


@pytest.mark.parametrize("use_phi", [False, True])
def test_combined_loss_and_gradient_against_closed_forms(use_phi):
    """(1 − μ)·L_GRPO + μ·L_SFT / accumulation at μ = 0 (trl_zoo's plain loss, parity), μ = 1 (the SFT loss alone)
    and between, L_SFT the authors' (φ-weighted) NLL of the expert tokens over every row of the micro-batch."""
    accumulation = 2
    dataset = answers_dataset()
    trainer = expert_trainer(dataset, expert_phi=use_phi)
    plain = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, dataset=dataset)
    generated = generate(trainer)
    # a micro-batch of 4 completions of one prompt and 1 of another: its demonstrations weigh 4 : 1
    rows = torch.tensor([0, 1, 2, 3, 5])
    batch = {k: v[rows] if isinstance(v, torch.Tensor) and v.dim() > 0 else v for k, v in generated.items()}
    ids, mask = expected_expert_rows(trainer, batch, dataset)
    torch.testing.assert_close(batch["expert_ids"], ids)
    torch.testing.assert_close(batch["expert_mask"], mask)
    assert not torch.equal(ids[0], ids[4])
    for each in (trainer, plain):
        each.current_gradient_accumulation_steps = accumulation

    plain_loss, plain_gradients = loss_and_gradients(plain, batch)
    trainer.model.zero_grad(set_to_none=True)
    logps, token_mask = expert_logps_by_hand(trainer.model, batch, ids, mask)
    reference_sft_loss = (reference_sft_phi if use_phi else reference_sft)(logps, token_mask) / accumulation
    reference_sft_loss.backward()
    sft_gradients = {n: p.grad.double().clone() for n, p in trainer.model.named_parameters()}
    assert reference_sft_loss.item() > 0.1 / (4 if use_phi else 1)

    for mu in (0.0, 0.3, 1.0):
        trainer.args.expert_mu_peak = trainer.args.expert_mu_valley = mu
        loss, gradients = loss_and_gradients(trainer, batch)
        expected = reference_mix(plain_loss, reference_sft_loss.detach(), mu)
        torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
        for name, gradient in gradients.items():
            expected_gradient = reference_mix(plain_gradients[name], sft_gradients[name], mu)
            torch.testing.assert_close(gradient, expected_gradient, rtol=1e-4, atol=1e-6, msg=f"μ={mu}: {name}")
    # the two terms pull differently, so the mixtures above are told apart
    difference = sum((sft_gradients[n] - plain_gradients[n]).pow(2).sum() for n in sft_gradients).sqrt()
    assert difference > 0.1 * sum(g.pow(2).sum() for g in sft_gradients.values()).sqrt()


@pytest.mark.parametrize("option", [{}, dict(dynamic_sampling="resample", advantage_estimator="grpo")])
def test_demonstrations_travel_with_their_rows(option):
    """Each row of the generation batch carries its own prompt's answer (none where the row's answer is None), also
    after dynamic sampling's regrouping of rounds."""
    dataset = answers_dataset(missing_every=3)
    trainer = expert_trainer(dataset, **option)
    batch = generate(trainer)
    ids, mask = expected_expert_rows(trainer, batch, dataset)
    torch.testing.assert_close(batch["expert_ids"], ids)
    torch.testing.assert_close(batch["expert_mask"], mask)


def test_answers_become_tokens_then_eos_cut_at_the_completion_length():
    trainer = expert_trainer(max_completion_length=4)
    tokenizer = trainer.processing_class
    batch = {"completion_ids": torch.zeros(3, 2, dtype=torch.int64), "completion_mask": torch.ones(3, 2)}
    ids, mask = trainer.pipeline.get("expert_sft").expert_tokens(["12", None, "98765"], batch)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    assert ids.tolist() == [
        tokenizer("12")["input_ids"] + [eos, pad], [pad] * 4, tokenizer("9876")["input_ids"]
    ]
    assert mask.tolist() == [[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]] and mask.dtype == batch["completion_mask"].dtype


def test_refusals():
    base = tiny.config_kwargs()
    for settings, field in (
        (dict(expert_mu_peak=1.5), "expert_mu_peak"),
        (dict(expert_mu_valley=-0.1), "expert_mu_valley"),
        (dict(expert_mu_warmup_steps=-1), "expert_mu_warmup_steps"),
        (dict(expert_mu_decay_steps=2.5), "expert_mu_decay_steps"),
    ):
        with pytest.raises(ValueError, match=f"^{field}: "):
            trl_zoo.GRPOConfig(**base, expert_column="answer", **settings)
    with pytest.raises(ValueError, match="^expert_column: got ''"):
        trl_zoo.GRPOConfig(**base, expert_column="")
    with pytest.raises(ValueError, match="^expert_phi: has no effect without expert demonstrations; set expert_col"):
        trl_zoo.GRPOConfig(**base, expert_phi=False)
    with pytest.raises(ValueError, match="^expert_column: remove_unused_columns=True"):
        trl_zoo.GRPOConfig(**base, expert_column="answer", remove_unused_columns=True)
    with pytest.raises(ValueError, match="^expert_column: the training set has no column 'solution'"):
        make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, dataset=answers_dataset(), expert_column="solution")
    lists = answers_dataset().map(lambda row, i: {"steps": [7] if i == 5 else "7"}, with_indices=True)
    with pytest.raises(ValueError, match=r"^train_dataset: row 5's 'steps' \(expert_column\) holds \[7\] \(list\), "
                                         r"not an expert answer; give the expert answer as text \(None or '' for a "
                                         r"prompt without one\)\.$"):
        expert_trainer(lists, expert_column="steps")
    blank = answers_dataset().map(lambda row, i: {"answer": None if i % 2 else " "}, with_indices=True)
    with pytest.raises(ValueError, match=r"^train_dataset: the expert_column 'answer' holds no answer in any row "
                                         r"\(each None or blank\), so the run would be plain RL"):
        expert_trainer(blank)
    streamed = answers_dataset().to_iterable_dataset().map(lambda row: row)  # a stream that declares no columns
    assert streamed.column_names is None
    with pytest.raises(ValueError, match=r"^expert_column: the training set has no column 'solution' \(its columns: "
                                         r"prompt, answer\)"):
        expert_trainer(streamed, expert_column="solution", max_steps=1)
    with pytest.raises(ValueError, match=r"^train_dataset: row 1's 'answer' \(expert_column\) holds \{'text': '4'\} "):
        expert_trainer(Dataset.from_list([{"prompt": f"{a}+1=", "answer": {"text": "4"}} for a in range(16)])
                       .to_iterable_dataset().map(lambda row, i: row if i == 1 else {**row, "answer": "4"},
                                                  with_indices=True), max_steps=1)


def test_blank_answers_are_no_demonstration_and_numbers_are_their_text():
    """'' or whitespace is "no answer for this prompt", as None (before, '' trained an end-of-text-only
    demonstration); a number, as a JSON file gives one, is the answer str(number) (before, a traceback)."""
    trainer = expert_trainer(max_completion_length=4)
    tokenizer = trainer.processing_class
    batch = {"completion_ids": torch.zeros(5, 2, dtype=torch.int64), "completion_mask": torch.ones(5, 2)}
    ids, mask = trainer.pipeline.get("expert_sft").expert_tokens(["", "  \n", None, 42, 2.5], batch)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    text = [tokenizer(answer)["input_ids"] for answer in ("42", "2.5")]
    assert ids.tolist() == [[pad] * 4] * 3 + [text[0] + [eos, pad], text[1] + [eos]]
    assert mask.sum(1).tolist() == [0, 0, 0, 3, 4]
    numbers = answers_dataset().map(lambda row: {"answer": int(row["answer"])})
    numbered_trainer = expert_trainer(numbers)
    numbered = generate(numbered_trainer)
    ids, mask = expected_expert_rows(numbered_trainer, numbered, answers_dataset())  # the answers as text
    torch.testing.assert_close(numbered["expert_ids"], ids)
    torch.testing.assert_close(numbered["expert_mask"], mask)


def test_cli_trains_on_number_answers_of_a_json_file(tmp_path, capsys):
    """A JSON file's answers 41, 42, … load as integers; they are the answers '41', '42' (before, a traceback at the
    first batch); a list in their place stops the run in one line naming the file's row."""
    rows = [{"prompt": f"{a}+1=", "answer": str(a + 1), "solution": a + 1} for a in range(40)]
    data = tmp_path / "sums.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows))
    argv = ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data), "--max_steps", "1",
            "--expert_column", "solution", "--max_completion_length", "8", "--per_device_train_batch_size", "4",
            "--num_generations", "2", "--num_heldout", "0", "--use_cpu", "true", "--write_report", "false"]
    assert main([*argv, "--output_dir", str(tmp_path / "run")]) == 0
    data.write_text("\n".join(json.dumps({**row, "solution": [row["solution"]]}) for row in rows))
    assert main([*argv, "--output_dir", str(tmp_path / "refused")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"trl-zoo train: error: {data} (train split): row 0's 'solution' (expert_column) holds [1] (list), not an "
        f"expert answer; give the expert answer as text (None or '' for a prompt without one)."
    )


def test_a_streamed_row_that_is_not_an_answer_is_one_line_at_its_batch():
    """A stream's first generation batch is checked at construction (test_refusals), a later row when its batch's
    answers are tokenized, as a DatasetValueError (`trl-zoo train` says it in one line)."""
    trainer = expert_trainer(answers_dataset().to_iterable_dataset(), max_steps=1)
    batch = {"completion_ids": torch.zeros(2, 2, dtype=torch.int64), "completion_mask": torch.ones(2, 2)}
    with pytest.raises(DatasetValueError, match=r"^train_dataset: a streamed row's 'answer' \(expert_column\) holds "
                                                r"\[1\] \(list\), not an expert answer; give the expert answer as"):
        trainer.pipeline.get("expert_sft").expert_tokens(["12", [1]], batch)
