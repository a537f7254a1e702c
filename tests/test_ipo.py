"""IPO (prime-rl's RL loss, `loss_type="ipo"`): its closed form on hand-built tokens, the two-sided probability-gap
mask, the sanity law of docs/formulas.md, and parity with a transcription of prime-rl's `ipo_loss_fn`
(PrimeIntellect-ai/prime-rl, src/prime_rl/trainer/rl/loss.py at commit 559b447, 2026-08-21) on random tensors.

Gradients are taken with respect to the per-token log-probabilities, as in tests/test_losses_math.py.
"""

import math

import pytest
import torch

from tests import test_losses_train
from tests.test_losses_math import aggregated, config, make_batch, probability_batch, token_gradient
from trl_zoo.cli import main
from trl_zoo.losses.base import PolicyBatch
from trl_zoo.registry import LOSSES

# (π_θ, π_old) per token; ε = 0.3 (prime-rl's default). Row 0 has Â > 0, row 1 Â < 0.
PAIRS = [
    [(0.9, 0.5), (0.5, 0.9), (1e-3, 1e-5), (0.6, 0.5)],  # +0.4 masked, −0.4 masked, ratio 100 kept, +0.1 kept
    [(0.5, 0.9), (0.9, 0.5), (0.8, 0.99), (0.05, 0.45)],  # −0.4 masked, +0.4 masked, −0.19 kept, −0.4 masked
]
ADVANTAGES = torch.tensor([[1.2], [-0.7]])
MASKED = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 1]], dtype=torch.float)
MARGIN = 0.02  # every gap is this far from every threshold used here: no token near a boundary


def gaps(pairs) -> torch.Tensor:
    return torch.tensor([[p - q for p, q in row] for row in pairs], dtype=torch.float64)


def ipo(batch: PolicyBatch, **overrides):
    return LOSSES.get("ipo").fn(batch, config("ipo", **overrides))


# ------------------------------------------------------------------------------------------- closed form
@pytest.mark.parametrize("kl_coef", [0.0, 1e-3, 0.5])
def test_loss_and_gradient_are_the_closed_form(kl_coef):
    batch = probability_batch(PAIRS, ADVANTAGES)
    assert (gaps(PAIRS).abs() - 0.3).abs().min() > MARGIN
    term = ipo(batch, ipo_kl_coef=kl_coef)
    torch.testing.assert_close(term.metrics["ipo/masked_fraction"], MASKED)
    delta = batch.log_ratio.detach()
    ratio = torch.exp(delta)
    torch.testing.assert_close(term.loss.detach(), -(1 - MASKED) * ratio * ADVANTAGES + kl_coef * delta**2)
    # token_mean_global: d loss / d log π_t = (−M r Â + 2 c δ) / N, N the batch's 8 tokens
    gradient = token_gradient(aggregated("ipo", term.loss, batch.mask), batch)
    torch.testing.assert_close(gradient, (-(1 - MASKED) * ratio * ADVANTAGES + 2 * kl_coef * delta) / 8)
    # two tokens by hand: (0.6, 0.5) with Â = 1.2 and (0.8, 0.99) with Â = −0.7
    d1, d2 = math.log(0.6 / 0.5), math.log(0.8 / 0.99)
    assert term.loss[0, 3].item() == pytest.approx(-1.2 * 1.2 + kl_coef * d1**2, rel=1e-5)
    assert term.loss[1, 2].item() == pytest.approx(0.7 * 0.8 / 0.99 + kl_coef * d2**2, rel=1e-5)
    assert gradient[0, 3].item() == pytest.approx((-1.44 + 2 * kl_coef * d1) / 8, rel=1e-5)
    assert gradient[1, 2].item() == pytest.approx((0.7 * 0.8 / 0.99 + 2 * kl_coef * d2) / 8, rel=1e-5)
    # a masked token keeps only the KL term's gradient
    assert gradient[0, 0].item() == pytest.approx(2 * kl_coef * math.log(0.9 / 0.5) / 8, abs=1e-7)


def test_the_mask_is_two_sided_and_blind_to_the_sign_of_the_advantage():
    """A token that moved far against its advantage (Â > 0 and π fell, Â < 0 and π rose) is masked by IPO, kept by
    DPPO at the same threshold; flipping every advantage changes no mask."""
    batch = probability_batch(PAIRS, ADVANTAGES)
    masked = ipo(batch).metrics["ipo/masked_fraction"]
    flipped = ipo(probability_batch(PAIRS, -ADVANTAGES)).metrics["ipo/masked_fraction"]
    torch.testing.assert_close(masked, flipped)
    dppo = LOSSES.get("dppo").fn(batch, config("dppo", dppo_mask_low=0.3, dppo_mask_high=0.3))
    dppo_masked = dppo.metrics["dppo/masked_fraction"]
    torch.testing.assert_close(dppo_masked, torch.tensor([[1, 0, 0, 0], [1, 0, 0, 1]], dtype=torch.float))
    against = torch.tensor([[0, 1, 0, 0], [0, 1, 0, 0]], dtype=torch.float)
    torch.testing.assert_close(masked - dppo_masked, against)
    torch.testing.assert_close(ipo(batch).metrics["ipo/masked_against_advantage_fraction"], against)
    torch.testing.assert_close(
        ipo(batch).metrics["ipo/masked_up_fraction"], torch.tensor([[1, 0, 0, 0], [0, 1, 0, 0]], dtype=torch.float)
    )


@pytest.mark.parametrize("eps", [0.03, 0.15, 0.5])
def test_a_token_is_masked_when_its_probability_moved_by_more_than_eps(eps):
    batch = probability_batch(PAIRS, ADVANTAGES)
    absolute = gaps(PAIRS).abs()
    assert (absolute - eps).abs().min() > MARGIN
    expected = (absolute > eps).float()
    torch.testing.assert_close(ipo(batch, ipo_eps=eps).metrics["ipo/masked_fraction"], expected)


def test_a_masked_token_far_off_policy_has_no_policy_gradient_and_stays_finite():
    batch = probability_batch([[(0.9, 1e-12), (1e-12, 0.9)]], torch.tensor([[2.0]]))
    term = ipo(batch, ipo_kl_coef=0.0)
    assert term.metrics["ipo/masked_fraction"].tolist() == [[1.0, 1.0]]
    gradient = token_gradient(aggregated("ipo", term.loss, batch.mask), batch)
    assert torch.isfinite(term.loss).all() and gradient.abs().max() == 0


def test_the_mask_acts_on_the_trainers_off_policy_batch():
    """In the real loss step (tests/test_losses_train.py's check): nothing masked on-policy, part of the tokens once
    the policy moved with a narrow ε, none with ε = 0.99."""
    check = test_losses_train.test_trust_region_masks_act_on_the_trainers_off_policy_batch
    check("ipo", dict(ipo_eps=1e-3), dict(ipo_eps=0.99))


# ------------------------------------------------------------------------------------------- the sanity law
@pytest.mark.parametrize("kl_coef", [0.0, 1e-3])
@pytest.mark.parametrize("per_token_advantages", [False, True])
def test_on_policy_the_gradient_is_reinforces_under_token_mean_global(kl_coef, per_token_advantages):
    advantages = torch.randn(4, 6, generator=torch.Generator().manual_seed(3)) if per_token_advantages else None
    batch = make_batch(seed=1, on_policy=True, advantages=advantages)
    term = ipo(batch, ipo_kl_coef=kl_coef)
    assert term.metrics["ipo/masked_fraction"].sum() == 0
    gradient = token_gradient(aggregated("token_mean_global", term.loss, batch.mask), batch)
    reinforce = LOSSES.get("reinforce").fn(batch, config("reinforce"))
    expected = token_gradient(aggregated("token_mean_global", reinforce.loss, batch.mask), batch)
    torch.testing.assert_close(gradient, expected)
    assert LOSSES.get("ipo").spec.aggregation == "token_mean_global"


# ------------------------------------------------------------------------------------------- prime-rl's function
def prime_rl_ipo(trainer_logprobs, inference_logprobs, advantages, loss_mask, eps, kl_tau, adv_tau=1.0):
    """A transcription of prime-rl's IPO, written here from its formula: per sample (a list of 1-D tensors, prime-rl's
    packed layout) the sum over the loss mask of −keep·adv_tau·Â·r + kl_tau·(log r)², keep = loss_mask and
    |e^trainer − e^inference| ≤ eps; the samples' sums added and divided by the total loss-token count (its
    rl_scale, at least 1)."""
    total = 0.0
    for t_logp, i_logp, adv, mask in zip(trainer_logprobs, inference_logprobs, advantages, loss_mask):
        log_ratio = t_logp - i_logp
        keep = mask & ~((t_logp.exp() - i_logp.exp()).abs() > eps)
        per_token = -(keep * adv_tau * adv * log_ratio.exp()) + kl_tau * (mask * log_ratio**2)
        total = total + per_token.sum()
    scale = max(int(sum(int(m.sum()) for m in loss_mask)), 1)
    return total / scale


@pytest.mark.parametrize("seed", range(6))
def test_parity_with_prime_rls_function_on_random_tensors(seed):
    generator = torch.Generator().manual_seed(seed)
    eps = [0.3, 0.1, 0.2, 0.05, 0.5, 0.3][seed]
    kl_coef = [0.0, 1e-3, 0.0, 0.1, 1e-3, 0.5][seed]
    lengths = torch.randint(1, 9, (5,), generator=generator)
    mask = (torch.arange(8)[None, :] < lengths[:, None]).float()
    old_logps = torch.log(torch.rand(5, 8, generator=generator).clamp(min=1e-4))
    logps = (old_logps + 0.6 * torch.randn(5, 8, generator=generator)).clamp(max=0.0)
    advantages = torch.randn(5, 8, generator=generator) if seed % 2 else torch.randn(5, 1, generator=generator)
    gap = (logps.exp() - old_logps.exp()).abs()
    in_loss = mask.bool()
    masked_share = (gap[in_loss] > eps).float().mean()
    assert 0 < masked_share < 1 or eps == 0.5  # the mask acts on these tensors (ε = 0.5 may keep every token)

    ours_logps = logps.clone().requires_grad_()
    batch = PolicyBatch(ours_logps, old_logps, advantages, mask, state={})
    term = ipo(batch, ipo_eps=eps, ipo_kl_coef=kl_coef)
    ours = aggregated("ipo", term.loss, mask)
    (ours_gradient,) = torch.autograd.grad(ours, ours_logps)

    theirs_logps = logps.clone().requires_grad_()
    per_token_advantages = advantages.expand(5, 8)
    theirs = prime_rl_ipo(
        [theirs_logps[i, : lengths[i]] for i in range(5)],
        [old_logps[i, : lengths[i]] for i in range(5)],
        [per_token_advantages[i, : lengths[i]] for i in range(5)],
        [in_loss[i, : lengths[i]] for i in range(5)],
        eps, kl_coef,
    )
    (theirs_gradient,) = torch.autograd.grad(theirs, theirs_logps)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours_gradient, theirs_gradient, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------------------------- fields and list
def test_a_bare_ipo_has_prime_rls_current_defaults():
    args = config("ipo")
    assert (args.ipo_eps, args.ipo_kl_coef) == (0.3, 0.0)


@pytest.mark.parametrize(
    "overrides, message",
    [(dict(ipo_eps=0.0), "ipo_eps"), (dict(ipo_eps=1.0), "ipo_eps"), (dict(ipo_kl_coef=-1e-3), "ipo_kl_coef")],
)
def test_out_of_range_settings_are_refused_naming_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        config("ipo", **overrides)


def test_list_shows_ipo_with_its_fields(capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    (row,) = [i for i, line in enumerate(lines) if line.split()[:1] == ["ipo"]]
    assert "PrimeIntellect-ai/prime-rl" in lines[row]
    assert lines[row + 1].split()[:2] == ["--ipo_eps", "0.3"]
    assert lines[row + 2].split()[:2] == ["--ipo_kl_coef", "0.0"]
