"""LUFFY (trl_zoo/losses/luffy.py, trl_zoo/components/luffy.py): the mixed-policy loss against a transcription of the
authors' loss on random tensors, the expert traces in their group slots of a tiny model's training round (rewarded by
the reward functions, the advantages of the mixed groups), a training step, the refusals.

The reference, transcribed below (`reference_loss`, `reference_masked_mean`): ElliottYan/LUFFY, commit
01f4ae066249e6965ce0d5512ccdf99a12895c74, luffy/verl/verl/mix_src/mix_core_alg.py, `compute_token_on_off_policy_loss`
with its defaults (`on_policy_reshape="no_reshape"`, no off-policy clip, `all_max_clip=None`,
`loss_remove_token_mean=False`), `target_probs=None` (π_expert = 1) and `off_policy_reshape="p_div_p_<γ>"`; their
training script (exp_scripts/train.sh) sets `p_div_p_0.1` and `loss_remove_clip=True`, the paper keeps the clip.
"""

import math
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset

import trl_zoo
from tests import tiny
from tests.test_advantages import generate, one_thread  # noqa: F401  (autouse fixture)
from tests.tiny import make_trainer
from trl_zoo.losses.base import PolicyBatch

GAMMAS = (0.1, 0.3, 0.5)  # the reshapes the authors' code has: p_div_p_0.1 (theirs), p_div_p_0.3, p_div_p_0.5


# ---------------------------------------------------------------------------------------------------- the reference
def reference_masked_mean(values, mask):
    """verl's `masked_mean`."""
    return (values * mask).sum() / (mask.sum() + 1e-8)


def reference_loss(old_log_prob, log_prob, advantages, eos_mask, cliprange, prefix_mask, gamma, loss_remove_clip):
    """`compute_token_on_off_policy_loss`'s pg_loss (module docstring): the clipped (or unclipped) ratio on the
    on-policy tokens, p / (p + γ) times the advantage on the prefix (off-policy) tokens, one masked mean."""
    negative_approx_kl = log_prob - old_log_prob
    ratio = torch.exp(negative_approx_kl)
    on_pg_losses = -advantages * ratio
    upper_bound = max(1.0, 1.0 + cliprange)  # clip_upper_bound's default, 1
    if loss_remove_clip is False:
        on_pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - cliprange, upper_bound)
        on_pg_losses = torch.max(on_pg_losses, on_pg_losses2)
    off_ratio = torch.exp(log_prob)
    off_ratio = off_ratio / (off_ratio + gamma)
    off_pg_losses = -advantages * off_ratio
    prefix_mask = prefix_mask.float()
    pg_losses = off_pg_losses * prefix_mask + on_pg_losses * (1 - prefix_mask)
    return reference_masked_mean(pg_losses, eos_mask)


def random_batch(seed=0, rows=6, length=7):
    generator = torch.Generator().manual_seed(seed)
    logps = torch.log_softmax(2 * torch.randn(rows, length, 5, generator=generator, dtype=torch.float64), -1)[..., 0]
    old_logps = logps + 0.4 * torch.randn(rows, length, generator=generator, dtype=torch.float64)
    advantages = torch.randn(rows, 1, generator=generator, dtype=torch.float64)
    mask = torch.ones(rows, length, dtype=torch.float64)
    mask[1, 4:] = 0
    mask[4, 2:] = 0
    off_policy = torch.tensor([True, False, False, True, False, False])
    return logps.requires_grad_(), old_logps, advantages, mask, off_policy


def args_of(**overrides):
    return trl_zoo.GRPOConfig(**tiny.config_kwargs(loss_type="luffy", expert_column="answer", **overrides))


def our_loss(logps, old_logps, advantages, mask, off_policy, args):
    extras = {} if off_policy is None else {"off_policy": off_policy}
    term = trl_zoo.LOSSES.get("luffy").fn(PolicyBatch(logps, old_logps, advantages, mask, extras=extras), args)
    return (term.loss * mask).sum() / mask.sum(), term


# ---------------------------------------------------------------------------------------------------- the maths
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("clip", [True, False])
def test_loss_and_gradient_are_the_authors(gamma, clip):
    logps, old_logps, advantages, mask, off_policy = random_batch()
    args = args_of(luffy_gamma=gamma, luffy_clip=clip)
    ours, _ = our_loss(logps, old_logps, advantages, mask, off_policy, args)
    prefix_mask = off_policy.unsqueeze(1).expand_as(mask)
    reference = reference_loss(old_logps, logps, advantages.expand_as(mask), mask, args.epsilon, prefix_mask, gamma,
                               not clip)
    torch.testing.assert_close(ours, reference)
    (gradient,) = torch.autograd.grad(ours, logps)
    (expected,) = torch.autograd.grad(reference, logps)
    torch.testing.assert_close(gradient, expected)
    # the off-policy rows' closed form: ∂ℓ/∂log p = −Â·γ·p/(p + γ)² per token, over Σ mask; no clip, no π_old
    p = logps.detach().exp()
    closed = -advantages * gamma * p / (p + gamma) ** 2 * mask / mask.sum()
    torch.testing.assert_close(gradient[off_policy], closed[off_policy])


def test_the_clip_and_the_shaping_change_the_loss():
    """The transcription's branches are told apart: the clip acts on the on-policy rows of this batch, and f differs
    from the plain ratio π_θ/π_old on the off-policy rows."""
    logps, old_logps, advantages, mask, off_policy = random_batch()
    clipped, _ = our_loss(logps, old_logps, advantages, mask, off_policy, args_of())
    unclipped, _ = our_loss(logps, old_logps, advantages, mask, off_policy, args_of(luffy_clip=False))
    assert (clipped - unclipped).abs() > 1e-3
    all_on_policy, _ = our_loss(logps, old_logps, advantages, mask, torch.zeros(6, dtype=torch.bool), args_of())
    assert (clipped - all_on_policy).abs() > 1e-3
    no_flag, term = our_loss(logps, old_logps, advantages, mask, None, args_of())  # evaluation: the GRPO term
    torch.testing.assert_close(no_flag, all_on_policy)
    grpo = trl_zoo.LOSSES.get("grpo").fn(PolicyBatch(logps, old_logps, advantages, mask), args_of())
    torch.testing.assert_close(term.loss, grpo.loss)


# ---------------------------------------------------------------------------------------------------- on a tiny model
def traces_dataset(n: int = 16, missing_every: int = 0, missing=None) -> Dataset:
    """Prompts "a+b=" with the expert trace "a+b" (`missing`, None or a blank string, for every `missing_every`-th
    prompt when set)."""
    a, b = range(10, 10 + n), range(30, 30 + n)
    answers = [missing if missing_every and i % missing_every == 0 else str(x + y)
               for i, (x, y) in enumerate(zip(a, b))]
    return Dataset.from_dict({"prompt": [f"{x}+{y}=" for x, y in zip(a, b)], "answer": answers})


class RecordedReward:
    """1 for the expert's answer exactly, plus the fraction of digits; records what it scored."""

    __name__ = "recorded_reward"

    def __init__(self):
        self.calls = []

    def __call__(self, completions, answer, **kwargs):
        rewards = [float(c == a) + tiny.digit_reward([c])[0] for c, a in zip(completions, answer)]
        self.calls.append((list(completions), list(answer), rewards))
        return rewards


def luffy_trainer(dataset=None, reward=None, **overrides):
    return make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=reward,
                        dataset=traces_dataset() if dataset is None else dataset,
                        **{"loss_type": "luffy", "expert_column": "answer", **overrides})


@pytest.mark.parametrize("off_rows, missing", [(1, None), (2, None), (1, "  ")])
def test_traces_fill_their_slots_are_rewarded_and_share_the_group_advantages(off_rows, missing):
    """A prompt without a trace (None, or a blank string: before, an empty trace was put into its group) keeps its
    group of the policy's own completions."""
    reward = RecordedReward()
    trainer = luffy_trainer(traces_dataset(missing_every=2, missing=missing), reward, luffy_off_policy_rows=off_rows,
                            per_device_train_batch_size=16)
    assert trainer.pipeline.get("luffy").active and not trainer.pipeline.get("expert_sft").active
    batch = generate(trainer)
    (completions, answers, rewards), = reward.calls
    rows, groups = len(completions), trainer.num_generations
    tokenizer = trainer.processing_class
    slot = torch.arange(rows) % groups < off_rows
    has_trace = torch.tensor([a != missing for a in answers])
    assert has_trace.any() and not has_trace.all()
    torch.testing.assert_close(batch["off_policy"], slot & has_trace)
    for row in range(rows):
        length = int(batch["completion_mask"][row].sum())
        tokens = batch["completion_ids"][row, :length].tolist()
        if bool(slot[row] & has_trace[row]):
            assert completions[row] == answers[row] and rewards[row] == pytest.approx(2.0)
            assert tokens == tokenizer(answers[row])["input_ids"] + [tokenizer.eos_token_id]
        else:
            assert rewards[row] < 1.5  # the policy's own completion (a random model's)
    # Â over each mixed group of G: (R − mean) / (std + ε), std unbiased (the grpo estimator's defaults)
    totals = torch.tensor(rewards).view(-1, groups)
    expected = (totals - totals.mean(1, keepdim=True)) / (totals.std(1, keepdim=True) + 1e-4)
    torch.testing.assert_close(batch["advantages"].view(-1, groups), expected.view(-1, groups), rtol=1e-5, atol=1e-6)
    traced_groups = has_trace.view(-1, groups)[:, 0]
    assert (batch["advantages"].view(-1, groups)[traced_groups, 0] > 0.5).all()  # the trace beats its group


def test_evaluation_rounds_are_the_policy_own():
    reward = RecordedReward()
    trainer = luffy_trainer(reward=reward)
    batch = generate(trainer)
    assert batch["off_policy"].tolist() == [True, False, False, False] * 2  # the first slot of each group of 4
    trainer.model.eval()
    luffy = trainer.pipeline.get("luffy")
    inputs = [{"prompt": "10+30=", "answer": "40"}] * 4
    assert luffy.generate(lambda prompts: "untouched", ["10+30="] * 4) == "untouched"
    assert luffy.generated_round(lambda rows: {"rows": rows}, inputs) == {"rows": inputs}


def test_a_training_step_end_to_end():
    reward = RecordedReward()
    trainer = luffy_trainer(reward=reward, max_steps=1)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    moved = max((p.detach() - before[n]).abs().max().item() for n, p in trainer.model.named_parameters())
    assert moved > 1e-4
    (log,) = [log for log in trainer.state.log_history if "loss" in log]
    assert math.isfinite(log["loss"])
    # the flag reached the loss through TRL's shuffling and splitting: the expert tokens' share of the batch's
    assert 0.05 < log["luffy/off_policy_token_fraction"] < 0.6
    assert any(c == a for completions, answers, _ in reward.calls for c, a in zip(completions, answers))


def test_refusals():
    with pytest.raises(ValueError, match="^expert_column: loss_type='luffy' needs the dataset column"):
        trl_zoo.GRPOConfig(**tiny.config_kwargs(loss_type="luffy"))
    with pytest.raises(ValueError, match="^luffy_off_policy_rows: 4 expert traces leave no on-policy completion"):
        args_of(luffy_off_policy_rows=4)
    with pytest.raises(ValueError, match="^luffy_off_policy_rows: "):
        args_of(luffy_off_policy_rows=0)
    with pytest.raises(ValueError, match="^luffy_gamma: "):
        args_of(luffy_gamma=0.0)
    with pytest.raises(ValueError, match="^expert_mu_peak: CHORD's SFT term is not part of loss_type='luffy'"):
        args_of(expert_mu_peak=0.5)
    with pytest.raises(ValueError, match="^expert_column: the training set has no column 'solution'"):
        luffy_trainer(expert_column="solution")
    refused = (r"^dynamic_sampling: 'adaptive_budget' regroups completions across rounds and cannot carry the "
               r"per-round state of loss_type='luffy' \(its traces fill the first slots of groups of num_generations "
               r"rows in a row\); use another loss")
    with pytest.raises(ValueError, match=refused):
        args_of(dynamic_sampling="adaptive_budget")  # before, accepted: its rounds' slots left prompts without a trace
    args_of(dynamic_sampling="resample")  # its rounds are groups of G in a row


def test_slots_follow_trl_gathered_order_across_processes():
    """A row's slot is its place in TRL's gathered order (process-major, G consecutive rows a group): with 6 rows a
    process and G = 4, process 1's rows are the global rows 6..11, slots 2, 3, 0, 1, 2, 3. No collective is needed."""
    trainer = luffy_trainer(luffy_off_policy_rows=2)
    luffy = trainer.pipeline.get("luffy")
    stand_in = SimpleNamespace(accelerator=SimpleNamespace(process_index=1), num_generations=4)
    luffy.trainer = stand_in
    try:
        assert luffy.slots(6).tolist() == [False, False, True, True, False, False]
        stand_in.accelerator.process_index = 0
        assert luffy.slots(6).tolist() == [True, True, False, False, True, True]
    finally:
        luffy.trainer = trainer
