"""A*-PO (`loss_type="a2po"`, `advantage_estimator="a2po"`, `trl_zoo.sample_reference_rewards`): the loss's closed
form and gradient, the law at π = π_ref, parity with transcriptions of TRL's experimental A2POTrainer
(trl/experimental/a2po/a2po_trainer.py in TRL 1.16.0: `compute_loss` and the V* estimate of
`_estimate_optimal_values`) on random tensors, the reference-rewards column sampled from a tiny model and read
through the trainer, a training step, and the settings refused.

Gradients are taken with respect to the per-token log-probabilities, as in tests/test_losses_math.py.
"""

import json
import math

import pytest
import torch
from datasets import Dataset

import trl_zoo
from tests import tiny
from tests.test_losses_math import aggregated, config, token_gradient
from tests.trl_internals import generate_and_score
from trl_zoo.advantages import AdvantageInputs
from trl_zoo.advantages.a2po import optimal_values
from trl_zoo.cli import main
from trl_zoo.dataset_values import REFERENCE_REWARDS, DatasetValueError, reference_rewards
from trl_zoo.losses.base import PolicyBatch
from trl_zoo.registry import ADVANTAGES, LOSSES

MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.float)


def a2po(batch: PolicyBatch, beta: float):
    return LOSSES.get("a2po").fn(batch, config("a2po", beta=beta))


def random_batch(seed: int, rows: int = 3, width: int = 4, mask=MASK) -> PolicyBatch:
    generator = torch.Generator().manual_seed(seed)
    logps = (-3 * torch.rand(rows, width, generator=generator)).requires_grad_()
    ref_logps = logps.detach() + 0.5 * torch.randn(rows, width, generator=generator)
    advantages = torch.randn(rows, 1, generator=generator)
    return PolicyBatch(logps, logps.detach(), advantages, mask, ref_logps=ref_logps, state={})


# ------------------------------------------------------------------------------------------- the loss
@pytest.mark.parametrize("beta", [1e-3, 0.5])
def test_loss_and_gradient_are_the_closed_form(beta):
    batch = random_batch(seed=0)
    term = a2po(batch, beta)
    log_ratio = ((batch.logps.detach() - batch.ref_logps) * MASK).sum(-1, keepdim=True)
    residual = beta * log_ratio - batch.advantages
    torch.testing.assert_close(term.loss.detach(), residual**2)
    torch.testing.assert_close(term.metrics["a2po/implicit_reward"], beta * log_ratio)
    # sequence_mean of a per-sequence term: (1/B) Σ_i ℓ_i, so ∂/∂log π_{i,t} = 2β (β ln(π/π_ref)_i − Â_i) m_{i,t} / B
    loss = aggregated("a2po", term.loss, MASK)
    assert loss.item() == pytest.approx((residual**2).mean().item(), rel=1e-6)
    gradient = token_gradient(loss, batch)
    torch.testing.assert_close(gradient, 2 * beta * residual * MASK / 3)
    # one row by hand: row 1 has one token
    d = float(batch.logps[1, 0] - batch.ref_logps[1, 0])
    advantage = float(batch.advantages[1, 0])
    assert term.loss[1, 0].item() == pytest.approx((beta * d - advantage) ** 2, rel=1e-5)
    assert gradient[1, 0].item() == pytest.approx(2 * beta * (beta * d - advantage) / 3, rel=1e-5)
    assert (gradient[MASK == 0] == 0).all()


def test_at_the_reference_the_gradient_is_2_beta_times_reinforce_under_sequence_sum():
    batch = random_batch(seed=1)
    batch.ref_logps = batch.logps.detach().clone()
    beta = 0.02
    gradient = token_gradient(aggregated("a2po", a2po(batch, beta).loss, MASK), batch)
    reinforce = token_gradient(aggregated("sequence_sum", -batch.advantages * batch.logps, MASK), batch)
    torch.testing.assert_close(gradient, 2 * beta * reinforce)
    assert reinforce.abs().max() > 0


def test_the_loss_reads_no_ratio_to_the_old_policy():
    batch = random_batch(seed=2)
    moved = PolicyBatch(batch.logps, batch.old_logps - 3.0, batch.advantages, MASK, ref_logps=batch.ref_logps)
    torch.testing.assert_close(a2po(moved, 0.1).loss, a2po(batch, 0.1).loss)


# ------------------------------------------------------------------------------------------- TRL's A2PO
def trl_a2po_loss(per_token_logps, ref_per_token_logps, completion_mask, rewards, v_star, beta2):
    """TRL 1.16.0's A2POTrainer.compute_loss, transcribed: `_get_sequence_logps` sums the per-token log-probs over
    the completion mask, the implicit reward beta2 · (log π − log π_ref) is regressed onto rewards − v_star, and the
    loss is the mean of the squares (its ref_logps come summed already)."""
    policy_logps = (per_token_logps * completion_mask).sum(dim=1)
    ref_logps = (ref_per_token_logps * completion_mask).sum(dim=1)
    implicit_reward = beta2 * (policy_logps - ref_logps)
    target = rewards - v_star
    return ((implicit_reward - target) ** 2).mean()


def trl_v_star(rewards, beta1):
    """TRL 1.16.0's `_estimate_optimal_values`, transcribed: beta1 · (logsumexp(rewards / beta1, dim=1) − log n)."""
    return beta1 * (torch.logsumexp(rewards / beta1, dim=1) - math.log(rewards.size(1)))


@pytest.mark.parametrize("seed", range(5))
def test_parity_with_trls_a2po_on_random_tensors(seed):
    generator = torch.Generator().manual_seed(seed)
    rows, width, samples = 6, 7, 8
    beta1, beta2 = [(0.5, 1e-3), (0.1, 0.05), (2.0, 1.0), (0.5, 0.2), (0.05, 1e-3)][seed]
    lengths = torch.randint(1, width + 1, (rows,), generator=generator)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    logps = -4 * torch.rand(rows, width, generator=generator)
    ref_logps = logps + torch.randn(rows, width, generator=generator)
    rewards = torch.randint(0, 2, (rows,), generator=generator).float()
    reference = torch.randint(0, 2, (rows, samples), generator=generator).float()
    if seed % 2:  # rewards that are not 0/1
        rewards, reference = rewards + torch.rand(rows, generator=generator), 3 * torch.rand(rows, samples)

    v_star = trl_v_star(reference, beta1)
    torch.testing.assert_close(optimal_values(reference, beta1), v_star)
    args = config("a2po", beta=beta2, a2po_beta1=beta1)
    advantages = ADVANTAGES.get("a2po").fn(AdvantageInputs(rewards, 2, reference_rewards=reference), args)
    torch.testing.assert_close(advantages, rewards - v_star)

    ours_logps = logps.clone().requires_grad_()
    batch = PolicyBatch(ours_logps, logps, advantages.unsqueeze(1), mask, ref_logps=ref_logps)
    ours = aggregated("a2po", a2po(batch, beta2).loss, mask)
    (ours_gradient,) = torch.autograd.grad(ours, ours_logps)
    theirs_logps = logps.clone().requires_grad_()
    theirs = trl_a2po_loss(theirs_logps, ref_logps, mask, rewards, v_star, beta2)
    (theirs_gradient,) = torch.autograd.grad(theirs, theirs_logps)
    assert theirs.item() > 1e-4
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(ours_gradient, theirs_gradient, rtol=1e-5, atol=1e-8)


# ------------------------------------------------------------------------------------------- V* and the estimator
def test_optimal_value_by_hand_between_the_mean_and_the_best():
    reference = torch.tensor([[0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 1.0, float("nan"), 1.0]])
    v_star = optimal_values(reference, 0.5)
    assert v_star[0].item() == pytest.approx(0.5 * math.log((3 + math.e**2) / 4), rel=1e-6)  # 0.4102
    assert v_star[1].item() == pytest.approx(1.0, rel=1e-6)
    assert v_star[2].item() == pytest.approx(0.5 * math.log((1 + 2 * math.e**2) / 3), rel=1e-6)  # NaN left out
    # β₁ large: the mean reward 0.25; small: the best, 1
    assert optimal_values(reference[:1], 1e3).item() == pytest.approx(0.25, abs=1e-3)
    assert optimal_values(reference[:1], 1e-2).item() == pytest.approx(1 - 0.01 * math.log(4), abs=1e-6)


def test_the_advantage_is_the_reward_minus_v_star_and_nan_without_a_scorable_reference():
    reference = torch.tensor([[0.0, 1.0], [float("nan"), float("nan")]])
    rewards = torch.tensor([1.0, 1.0])
    args = config("a2po", beta=1e-3)
    advantages = ADVANTAGES.get("a2po").fn(AdvantageInputs(rewards, 2, reference_rewards=reference), args)
    assert advantages[0].item() == pytest.approx(1 - 0.5 * math.log((1 + math.e**2) / 2), rel=1e-6)
    assert math.isnan(advantages[1].item())


def test_the_reference_rewards_column_is_read_with_one_line_errors():
    assert reference_rewards([{REFERENCE_REWARDS: [1, None]}, {REFERENCE_REWARDS: [0.5, 0.0]}])[0][0] == 1.0
    assert math.isnan(reference_rewards([{REFERENCE_REWARDS: [1, None]}])[0][1])
    assert math.isnan(reference_rewards([{REFERENCE_REWARDS: [1, math.nan]}])[0][1])  # NaN: unscorable, as None
    for rows, named in (
        ([{"prompt": "1+2="}], "row 0 of the batch is None (NoneType), not a list of the rewards"),
        ([{REFERENCE_REWARDS: [1.0, 0.0]}, {REFERENCE_REWARDS: [1.0]}],
         "row 1 of the batch holds 1 rewards and row 0 2"),
        ([{REFERENCE_REWARDS: ["yes"]}], "row 0 of the batch holds 'yes' (str) at position 0, not a number"),
        ([{REFERENCE_REWARDS: [0.0, -math.inf]}], "row 0 of the batch holds -inf at position 1, not a finite reward"),
        ([{REFERENCE_REWARDS: [0.0]}, {REFERENCE_REWARDS: [2e6]}],
         "row 1 of the batch holds 2e+06 at position 0, beyond ±1e+06"),
    ):
        with pytest.raises(DatasetValueError, match="^reference_rewards: ") as error:  # a streamed row, in training
            reference_rewards(rows)
        assert named in str(error.value) and "sample_reference_rewards" in str(error.value)
        assert "\n" not in str(error.value)


def column_with_row_5(bad, good=(0.0, 0.5), n=16) -> Dataset:
    return Dataset.from_dict({"prompt": [f"{a}+1=" for a in range(n)],
                              REFERENCE_REWARDS: [list(good)] * 5 + [bad] + [list(good)] * (n - 6)})


@pytest.mark.parametrize("dataset, problem", [
    (column_with_row_5([1.0]), "row 5's 'reference_rewards' holds 1 rewards and row 0's 2; give every prompt the same "
                               "number K of reference samples"),
    (column_with_row_5([0.0, math.inf]), "row 5's 'reference_rewards' holds inf at position 1, not a finite reward "
                                         "(None or NaN marks an unscorable sample)"),
    (column_with_row_5([1e30, 0.0]), "row 5's 'reference_rewards' holds 1e+30 at position 0, beyond ±1e+06 (a2po "
                                     "regresses onto R − V*(x) unscaled); rescale the rewards"),
    (column_with_row_5([-3e6, 0.0]), "row 5's 'reference_rewards' holds -3e+06 at position 0, beyond ±1e+06"),
    (column_with_row_5(["1.0", "0.5"], good=("0", "1")), "row 0's 'reference_rewards' holds '0' (str) at position 0, "
                                                         "not a number"),
    (column_with_row_5(None), "row 5's 'reference_rewards' is None (NoneType), not a list of the rewards"),
])
def test_every_row_of_the_column_is_checked_at_construction(dataset, problem):
    """Before, a row of another K was refused only once it met row 0 in a batch, after steps had run, and ±inf or
    1e30 stopped at the generic non-finite guard naming neither the column nor the row."""
    with pytest.raises(ValueError) as error:
        tiny.make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, dataset=dataset, loss_type="a2po",
                          advantage_estimator="a2po", beta=1e-3, num_generations=2)
    message = str(error.value)
    assert message.startswith(f"train_dataset: {problem}"), message
    assert message.endswith("; fix that row, or write the column with trl_zoo.sample_reference_rewards(model, "
                            "tokenizer, dataset, reward_funcs).") and "\n" not in message


def test_a_streams_first_rows_are_checked_at_construction():
    stream = column_with_row_5([0.0, math.inf], n=16).to_iterable_dataset()
    with pytest.raises(ValueError, match=r"^train_dataset: row 5's 'reference_rewards' holds inf at position 1"):
        tiny.make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, dataset=stream, loss_type="a2po",
                          advantage_estimator="a2po", beta=1e-3, num_generations=2, max_steps=1,
                          per_device_train_batch_size=12)  # one generation batch: 6 prompts, rows 0-5


def test_cli_names_the_files_row_of_a_bad_reference_reward(tmp_path, capsys):
    rows = [{"prompt": f"{a}+1=", "answer": str(a + 1), REFERENCE_REWARDS: [0.0, 1.0]} for a in range(40)]
    rows[3][REFERENCE_REWARDS] = [0.0, 1e30]
    data = tmp_path / "sums.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows))
    argv = ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data), "--max_steps", "1",
            "--loss_type", "a2po", "--advantage_estimator", "a2po", "--beta", "0.001", "--num_generations", "2",
            "--write_report", "false", "--output_dir", str(tmp_path / "run")]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"trl-zoo train: error: {data} (train split): row 3's 'reference_rewards' holds 1e+30 at "
                           f"position 1, beyond ±1e+06"), line


def test_cli_ends_a_streamed_run_in_one_line_at_a_later_rows_bad_reference_reward(tmp_path, capsys):
    """A stream's first rows are checked before the run; a later row stops it at its batch, in one line (before, a
    traceback). Two steps read four prompts, of which at most two can be the good rows."""
    rows = [{"prompt": f"{a}+1=", "answer": str(a + 1), REFERENCE_REWARDS: [0.0, 1.0]} for a in range(40)]
    for row in rows[4:]:  # held out: rows 0, 1; checked before the run: 2, 3; the training stream is shuffled
        row[REFERENCE_REWARDS] = [0.0, -1e30]
    data = tmp_path / "sums.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows))
    argv = ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data), "--max_steps", "2",
            "--dataset_streaming", "true", "--num_heldout", "2", "--loss_type", "a2po", "--advantage_estimator",
            "a2po", "--beta", "0.001", "--num_generations", "2", "--per_device_train_batch_size", "4",
            "--max_completion_length", "4", "--write_report", "false", "--output_dir", str(tmp_path / "run")]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("trl-zoo train: error: reference_rewards: row "), line
    assert "of the batch holds -1e+30 at position 1, beyond ±1e+06" in line


# ------------------------------------------------------------------------------------------- sampling V*'s rewards
def test_sample_reference_rewards_scores_k_samples_of_each_prompt_as_grpo_calls_rewards():
    calls = []

    def length_reward(prompts, completions, completion_ids, answer, **kwargs):
        calls.append((list(prompts), list(answer), [len(ids) for ids in completion_ids]))
        return [float(len(ids)) if prompt.startswith("1") else None for prompt, ids in zip(prompts, completion_ids)]

    dataset = Dataset.from_dict({"prompt": ["12+3=", "4+5=", "11+1="], "answer": ["15", "9", "12"]})
    torch.manual_seed(0)
    sampled = trl_zoo.sample_reference_rewards(
        tiny.model(0), tiny.tokenizer(), dataset, [length_reward, tiny.digit_reward], reward_weights=[1.0, 0.0],
        num_samples=3, max_completion_length=5, batch_size=2,
    )
    assert sampled.column_names == ["prompt", "answer", REFERENCE_REWARDS]
    assert [len(row) for row in sampled[REFERENCE_REWARDS]] == [3, 3, 3]
    assert [prompts for prompts, _, _ in calls] == [["12+3="] * 3 + ["4+5="] * 3, ["11+1="] * 3]
    assert [answers for _, answers, _ in calls] == [["15"] * 3 + ["9"] * 3, ["12"] * 3]
    lengths = [length for _, _, row_lengths in calls for length in row_lengths]
    assert all(1 <= length <= 5 for length in lengths)
    # the weighted sum: 1 · length + 0 · digits where the length reward scored, the digits' 0 where it is None
    totals = [reward for row in sampled[REFERENCE_REWARDS] for reward in row]
    assert totals == [float(length) for length in lengths[:3]] + [0.0] * 3 + [float(length) for length in lengths[6:]]


def test_drop_unsolved_drops_the_prompts_whose_reference_rewards_are_all_zero():
    def solved_from_one(prompts, completions, **kwargs):
        return [1.0 if prompt.startswith("1") else 0.0 for prompt in prompts]

    dataset = Dataset.from_dict({"prompt": ["12+3=", "4+5=", "11+1="]})
    options = dict(num_samples=2, max_completion_length=3)
    model, tokenizer = tiny.model(0), tiny.tokenizer()
    kept = trl_zoo.sample_reference_rewards(model, tokenizer, dataset, solved_from_one, drop_unsolved=True, **options)
    assert kept["prompt"] == ["12+3=", "11+1="] and kept[REFERENCE_REWARDS] == [[1.0, 1.0], [1.0, 1.0]]
    every = trl_zoo.sample_reference_rewards(model, tokenizer, dataset, solved_from_one, **options)
    assert every[REFERENCE_REWARDS] == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]


@pytest.mark.parametrize(
    "reward_funcs, options, named",
    [
        (torch.nn.Linear(2, 1), {}, "reward_funcs: pass reward functions"),
        ([tiny.digit_reward], dict(reward_weights=[1.0, 2.0]), "reward_weights: 2 weights for 1 reward functions"),
        ([tiny.digit_reward], dict(num_samples=0), "num_samples: must be ≥ 1"),
        ([tiny.digit_reward], dict(nan_rewards="skip"), "nan_rewards: got 'skip'; use 'raise' or 'drop'"),
        ([tiny.digit_reward], dict(dataset=Dataset.from_dict({"question": ["1+2="]})),
         "dataset: no 'prompt' column (its columns: question); rename the prompt column to 'prompt'"),
        ([tiny.digit_reward], dict(dataset=Dataset.from_dict({"prompt": ["1+2=", "  "]})),
         "dataset: row 1's 'prompt' is blank; fix or filter that row"),
    ],
)
def test_sample_reference_rewards_refuses_bad_input_in_one_line(reward_funcs, options, named):
    dataset = options.pop("dataset", tiny.prompts_dataset(2))
    with pytest.raises(ValueError) as error:
        trl_zoo.sample_reference_rewards(tiny.model(0), tiny.tokenizer(), dataset, reward_funcs, **options)
    assert str(error.value).startswith(named) and "\n" not in str(error.value)


def returning(name, output):
    """A reward function named `name` whose output is `output(n)` for n completions."""
    def reward(prompts, completions, **kwargs):
        return output(len(completions))

    reward.__name__ = name
    return reward


@pytest.mark.parametrize("reward, options, named", [
    (returning("short", lambda n: [1.0] * (n - 1)), {},
     "reward 'short': returned 3 values for 4 completions; return a list of 4 floats, one per completion"),
    (returning("text", lambda n: "1.0"), {}, "reward 'text': returned '1.0' (str) for 4 completions; return a list"),
    (returning("scalar", lambda n: 1.0), {}, "reward 'scalar': returned 1.0 (float) for 4 completions; return a list"),
    (returning("quoted", lambda n: ["1.0"] * n), {}, "reward 'quoted': completion 0 got '1.0' (str), not a number"),
    (returning("nan", lambda n: [math.nan] * n), {},
     "nan_rewards: reward functions returned NaN or ±inf: 'nan' (4 of 4, e.g. completion 0 got nan); return None"),
    (returning("inf", lambda n: [0.0] + [math.inf] * (n - 1)), {},
     "nan_rewards: reward functions returned NaN or ±inf: 'inf' (3 of 4, e.g. completion 1 got inf)"),
    (returning("huge", lambda n: [1e20] * n), {}, "reward 'huge': returned 1e+20; rewards beyond ±1e+15 overflow"),
    (returning("large", lambda n: [0.0, 0.0, 3e7, 0.0][:n]), {},
     "reward 'large': returned 3e+07 for completion 2; the reference_rewards column holds rewards within ±1e+06"),
    (returning("weighted", lambda n: [1e5] * n), dict(reward_weights=[100.0]),
     "reward_weights: the weighted sum is 1e+07 for completion 0; the reference_rewards column holds rewards within"),
])
def test_sample_reference_rewards_refuses_a_bad_reward_output_naming_the_function(reward, options, named):
    """Before: a view-shape RuntimeError, a ValueError or TypeError from torch, or the values written into the
    column without a word ('1.0', NaN, ±inf, 1e20), which the trainer then refused."""
    with pytest.raises(ValueError) as error:
        trl_zoo.sample_reference_rewards(tiny.model(0), tiny.tokenizer(), tiny.prompts_dataset(2), reward,
                                         num_samples=2, max_completion_length=3, **options)
    assert str(error.value).startswith(named), str(error.value)
    assert "\n" not in str(error.value)


def test_sample_reference_rewards_drops_nonfinite_rewards_on_request():
    """nan_rewards='drop': a NaN or ±inf reward is unscored (None), so a sample with no other reward is NaN in the
    column, which a2po leaves out of V*(x); a warning names the function."""
    reward = returning("half_nan", lambda n: [math.nan if i % 2 else 1.0 for i in range(n)])
    with pytest.warns(UserWarning, match=r"^nan_rewards='drop': reward functions returned NaN or ±inf: 'half_nan' "
                                         r"\(2 of 4, e.g. completion 1 got nan\); those completions are treated as "
                                         r"unscorable \(left out of V\*\(x\)\)"):
        sampled = trl_zoo.sample_reference_rewards(tiny.model(0), tiny.tokenizer(), tiny.prompts_dataset(2), reward,
                                                   num_samples=2, max_completion_length=3, nan_rewards="drop")
    values = sampled[REFERENCE_REWARDS]
    assert [row[0] for row in values] == [1.0, 1.0] and all(math.isnan(row[1]) for row in values)


# ------------------------------------------------------------------------------------------- through the trainer
def a2po_trainer(beta=1e-3, **overrides):
    torch.manual_seed(0)
    dataset = trl_zoo.sample_reference_rewards(
        tiny.model(0), tiny.tokenizer(), tiny.prompts_dataset(), tiny.digit_reward, num_samples=4,
        max_completion_length=8,
    )
    return tiny.make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, dataset=dataset, loss_type="a2po", advantage_estimator="a2po",
        beta=beta, num_generations=2, **overrides,
    )


def test_the_trainer_regresses_onto_reward_minus_v_star_of_each_rows_prompt_without_a_kl_term():
    trainer = a2po_trainer(beta=0.5)
    trainer.model.train()
    rows = next(iter(trainer.get_train_dataloader()))
    batch = generate_and_score(trainer, rows)
    completions = trainer.processing_class.batch_decode(batch["completion_ids"], skip_special_tokens=True)
    rewards = torch.tensor(tiny.digit_reward(completions))
    v_star = optimal_values(torch.tensor([row[REFERENCE_REWARDS] for row in rows]), 0.5)
    expected = rewards - v_star
    torch.testing.assert_close(batch["advantages"], expected, rtol=1e-5, atol=1e-6)
    assert expected.abs().max() > 1e-3 and (expected > 0).any() and (expected < 0).any()

    tiny.perturb(trainer.model)  # π ≠ π_ref: the implicit reward is not 0, and a k3 term would not be either
    trainer.current_gradient_accumulation_steps = 1
    mask = batch["completion_mask"].float()
    with torch.no_grad():
        logps = trainer._policy_forward(trainer.model, batch, compute_entropy=False).logps
        loss = trainer.compute_loss(trainer.model, batch)
    log_ratio = ((logps - batch["ref_per_token_logps"]) * mask).sum(-1)
    assert log_ratio.abs().min() > 1e-2
    assert loss.item() == pytest.approx(((0.5 * log_ratio - expected) ** 2).mean().item(), rel=1e-5)


def test_a_training_step_moves_the_policy_and_logs_the_implicit_reward():
    trainer = a2po_trainer()
    initial = [parameter.detach().clone() for parameter in trainer.model.parameters()]
    trainer.train()
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    assert len(losses) == 2 and all(math.isfinite(loss) and loss > 0 for loss in losses)
    implicit = [row["a2po/implicit_reward"] for row in trainer.state.log_history if "a2po/implicit_reward" in row]
    assert implicit[0] == 0.0 and implicit[1] != 0.0  # the first step is at π_ref, the second is not
    assert any(not torch.equal(before, after) for before, after in zip(initial, trainer.model.parameters()))


def test_a_dataset_without_the_column_is_refused_naming_it():
    with pytest.raises(ValueError, match="^train_dataset: no 'reference_rewards' column, which advantage_estimator="):
        tiny.make_trainer(
            trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, loss_type="a2po", advantage_estimator="a2po", beta=1e-3,
        )


# ------------------------------------------------------------------------------------------- refused settings
@pytest.mark.parametrize(
    "overrides, named",
    [
        (dict(loss_type="a2po"), "beta: a2po regresses"),
        (dict(loss_type="a2po", beta=1e-3, kl_placement="reward"), "kl_placement: not with loss_type='a2po'"),
        (dict(loss_type="a2po", beta=1e-3, kl_target=0.1), "kl_target: not with loss_type='a2po'"),
        (dict(loss_type="a2po", beta=1e-3, ref_reset_steps=10), "ref_reset_steps: not with loss_type='a2po'"),
        (dict(loss_type="a2po", beta=1e-3, advantage_estimator="reinforce_pp"), "advantage_estimator: 'reinforce_pp'"),
        (dict(advantage_estimator="a2po", dynamic_sampling="resample"), "dynamic_sampling: 'resample'"),
        (dict(advantage_estimator="a2po", multi_objective_aggregation="normalize_then_sum"),
         "multi_objective_aggregation: 'normalize_then_sum'"),
        (dict(advantage_estimator="a2po", a2po_beta1=0.0), "a2po_beta1: must be > 0"),
    ],
)
def test_settings_a2po_cannot_work_with_are_refused_in_one_line(overrides, named):
    with pytest.raises(ValueError) as error:
        trl_zoo.GRPOConfig(**tiny.config_kwargs(**overrides))
    assert str(error.value).startswith(named) and "\n" not in str(error.value)


def test_the_paper_defaults():
    args = trl_zoo.GRPOConfig(**tiny.config_kwargs(loss_type="a2po", advantage_estimator="a2po", beta=1e-3))
    assert args.a2po_beta1 == 0.5 and LOSSES.get("a2po").spec.applies_kl
    assert LOSSES.get("a2po").spec.zero_advantage_is_inert is False
