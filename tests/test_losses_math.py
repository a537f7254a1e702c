"""Closed forms of docs/formulas.md, checked with autograd on small random tensors: no model, no trainer.

Gradients are taken with respect to the per-token log-probabilities, so d loss / d log π_{i,t} is the weight each
token's score function ∇log π_{i,t} gets in the policy gradient.
"""

import math
from types import SimpleNamespace

import pytest
import torch

import trl_zoo
from tests.tiny import TEST_OUTPUT_DIR, required_settings
from trl_zoo.aggregation import AggregationContext
from trl_zoo.hooks.loss_step import StepMeans
from trl_zoo.losses.base import PolicyBatch
from trl_zoo.losses.clip_cov import token_covariance
from trl_zoo.losses.dppo import mask_thresholds
from trl_zoo.losses.ppo_kl import BETA, MEASURED_KL
from trl_zoo.registry import AGGREGATIONS, LOSSES

B, T = 4, 6
LENGTHS = [6, 4, 1, 3]


def completion_mask(lengths=LENGTHS, width=T) -> torch.Tensor:
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).float()


def make_batch(seed=0, log_ratio=None, advantages=None, mask=None, on_policy=False, state=None) -> PolicyBatch:
    """Random log-probs (a leaf with grad), old log-probs at `log_ratio` (default small noise) below them."""
    generator = torch.Generator().manual_seed(seed)
    mask = completion_mask() if mask is None else mask
    logps = (-3 * torch.rand(mask.shape, generator=generator)).requires_grad_()
    if log_ratio is None:
        log_ratio = 0.3 * torch.randn(mask.shape, generator=generator)
    old_logps = logps.detach() if on_policy else logps.detach() - log_ratio
    if advantages is None:
        advantages = torch.tensor([[1.2], [-0.7], [0.4], [-1.5]])[: mask.shape[0]]
    return PolicyBatch(logps, old_logps, advantages, mask, state={} if state is None else state)


def config(loss_type: str, **overrides):
    kwargs = dict(output_dir=TEST_OUTPUT_DIR, loss_type=loss_type, bf16=False, use_cpu=True, report_to="none")
    return trl_zoo.GRPOConfig(**{**kwargs, **overrides})


def aggregated(name_or_aggregation: str, terms: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    aggregation = (
        LOSSES.get(name_or_aggregation).spec.aggregation if name_or_aggregation in LOSSES else name_or_aggregation
    )
    return AGGREGATIONS.get(aggregation).fn(terms, mask, AggregationContext())[0]


def token_gradient(loss: torch.Tensor, batch: PolicyBatch) -> torch.Tensor:
    (gradient,) = torch.autograd.grad(loss, batch.logps)
    return gradient


# ---------------------------------------------------------------- SAPO
@pytest.mark.parametrize("tau_pos, tau_neg", [(1.0, 1.05), (2.0, 6.0)])
def test_sapo_gate_slope_is_sech_squared(tau_pos, tau_neg):
    batch = make_batch(log_ratio=torch.linspace(-1.2, 1.2, B * T).view(B, T))
    args = SimpleNamespace(
        sapo_temperature_pos=tau_pos, sapo_temperature_neg=tau_neg, importance_sampling_level="token"
    )
    term = LOSSES.get("sapo").fn(batch, args)
    gradient = token_gradient(term.loss.sum(), batch)  # = −f'(r)·r·Â per token
    ratio = torch.exp(batch.log_ratio.detach())
    advantages = batch.advantages.expand_as(ratio)
    slope = -gradient / (ratio * advantages)
    tau = torch.where(advantages > 0, tau_pos, tau_neg)
    expected = 1 / torch.cosh(tau * (ratio - 1) / 2) ** 2
    torch.testing.assert_close(slope, expected, rtol=1e-5, atol=1e-6)
    assert expected.min() < 0.5  # the gate really bends away from r = 1


# ---------------------------------------------------------------- GSPO and GSPO-token
def gspo_batch(advantages=None) -> PolicyBatch:
    """Sequence ratios s = [1.05, 1.5, 0.5, 1.5] with Â = [+, +, −, −]: sequences 1 and 2 clipped (ε = 0.2)."""
    targets = torch.log(torch.tensor([1.05, 1.5, 0.5, 1.5]))
    noise = 0.2 * torch.randn(B, T, generator=torch.Generator().manual_seed(3))
    mask = completion_mask()
    noise = noise - (noise * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)  # masked mean of noise = 0
    advantages = torch.tensor([[0.8], [1.1], [-0.6], [-1.3]]) if advantages is None else advantages
    return make_batch(seed=4, log_ratio=(targets[:, None] + noise) * mask, advantages=advantages, mask=mask)


def test_gspo_gradient_weight_is_s_times_advantage_over_length():
    batch = gspo_batch()
    args = config("gspo", epsilon=0.2)
    term = LOSSES.get("gspo").fn(batch, args)
    assert term.loss.shape == (B, 1)
    gradient = token_gradient(aggregated("gspo", term.loss, batch.mask), batch)
    s = torch.tensor([1.05, 1.5, 0.5, 1.5])
    lengths = torch.tensor(LENGTHS, dtype=torch.float)
    weight = s * batch.advantages.squeeze(1) / lengths  # d J / d log π_{i,t} for unclipped i, times B
    unclipped = torch.tensor([True, False, False, True])
    expected = torch.where(unclipped, weight, 0.0)[:, None] * batch.mask / B
    torch.testing.assert_close(-gradient, expected, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(
        term.loss.detach().squeeze(1),
        -torch.min(s * batch.advantages.squeeze(1), s.clamp(0.8, 1.2) * batch.advantages.squeeze(1)),
        rtol=1e-5,
        atol=1e-7,
    )


def test_gspo_equals_sequence_level_grpo():
    batch = gspo_batch()
    gspo = LOSSES.get("gspo").fn(batch, config("gspo"))
    grpo = LOSSES.get("grpo").fn(batch, config("grpo", importance_sampling_level="sequence"))
    torch.testing.assert_close(gspo.loss, grpo.loss)
    torch.testing.assert_close(
        token_gradient(aggregated("gspo", gspo.loss, batch.mask), batch),
        token_gradient(aggregated("grpo", grpo.loss, batch.mask), batch),
    )


def test_gspo_token_equals_gspo_with_sequence_advantages():
    sequence_batch = gspo_batch()
    token_batch = gspo_batch(advantages=sequence_batch.advantages.expand(B, T).clone())
    gspo = LOSSES.get("gspo").fn(sequence_batch, config("gspo"))
    gspo_token = LOSSES.get("gspo_token").fn(token_batch, config("gspo_token"))
    gspo_value = aggregated("gspo", gspo.loss, sequence_batch.mask)
    gspo_token_value = aggregated("gspo_token", gspo_token.loss, token_batch.mask)
    torch.testing.assert_close(gspo_token_value, gspo_value)
    gradient = token_gradient(gspo_token_value, token_batch)
    torch.testing.assert_close(gradient, token_gradient(gspo_value, sequence_batch))
    assert gradient.abs().max() > 0 and (gradient == 0).any()  # both clipped and unclipped sequences present


def test_gspo_token_gives_each_token_its_own_advantage():
    token_advantages = torch.randn(B, T, generator=torch.Generator().manual_seed(5))
    batch = make_batch(seed=6, log_ratio=0.02 * torch.randn(B, T), advantages=token_advantages)
    gradient = token_gradient(
        aggregated("gspo_token", LOSSES.get("gspo_token").fn(batch, config("gspo_token")).loss, batch.mask), batch
    )
    s = torch.exp((batch.log_ratio.detach() * batch.mask).sum(-1, keepdim=True) / batch.lengths)
    assert ((s > 0.8) & (s < 1.2)).all()  # nothing clipped
    torch.testing.assert_close(-gradient, s * token_advantages * batch.mask / batch.lengths / B, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------- CISPO
@pytest.mark.parametrize("cispo_epsilon_low", [None, 0.2])
def test_cispo_never_zeroes_a_token_gradient(cispo_epsilon_low):
    log_ratio = torch.linspace(-3, 3, B * T)[
        torch.randperm(B * T, generator=torch.Generator().manual_seed(0))
    ].view(B, T)
    batch = make_batch(log_ratio=log_ratio)
    args = config("cispo", epsilon_high=1.3, cispo_epsilon_low=cispo_epsilon_low)
    term = LOSSES.get("cispo").fn(batch, args)
    gradient = token_gradient(aggregated("cispo", term.loss, batch.mask), batch)
    ratio = torch.exp(batch.log_ratio.detach())
    floor = None if cispo_epsilon_low is None else 1 - cispo_epsilon_low
    weight = ratio.clamp(min=floor, max=1.3)
    expected = -weight * batch.advantages * batch.mask / batch.mask.sum()
    torch.testing.assert_close(gradient, expected, rtol=1e-5, atol=1e-8)
    assert (gradient[batch.mask.bool()] != 0).all()
    assert (ratio[batch.mask.bool()] > 1.3).any() and (ratio[batch.mask.bool()] < 0.8).any()  # both clips reached


# ---------------------------------------------------------------- GMPO
def test_gmpo_objective_bounded_by_grpo_unclipped():
    """Per sequence, AM–GM: |ρ̄_i·Â_i| ≤ |(1/T_i) Σ_t r_{i,t}·Â_i|, equality only when the ratios are equal."""
    batch = make_batch(seed=7, log_ratio=0.8 * torch.randn(B, T, generator=torch.Generator().manual_seed(8)))
    gmpo = -LOSSES.get("gmpo").fn(batch, config("gmpo", gmpo_epsilon=100.0)).loss.detach().squeeze(1)
    wide = SimpleNamespace(epsilon=100.0, epsilon_high=100.0, importance_sampling_level="token")
    grpo_terms = -LOSSES.get("grpo").fn(batch, wide).loss.detach()
    grpo = (grpo_terms * batch.mask).sum(-1) / batch.lengths.squeeze(1)
    log_ratio = batch.log_ratio.detach()
    torch.testing.assert_close(
        gmpo, torch.exp((log_ratio * batch.mask).sum(-1) / batch.lengths.squeeze(1)) * batch.advantages.squeeze(1)
    )
    assert (gmpo.abs() <= grpo.abs() + 1e-7).all()
    several_tokens = torch.tensor(LENGTHS) > 1
    assert (gmpo.abs() < grpo.abs() - 1e-4)[several_tokens].all()
    torch.testing.assert_close(gmpo[~several_tokens], grpo[~several_tokens])  # one token: equal


# ---------------------------------------------------------------- TOPR
def sequence_log_ratio_batch(sequence_log_ratios, advantages, seed=16) -> PolicyBatch:
    """Token log-ratios with the given masked sums Σ_t δ_{i,t} (noise that sums to 0 over each row's tokens)."""
    mask = completion_mask()
    noise = 0.4 * torch.randn(B, T, generator=torch.Generator().manual_seed(seed)) * mask
    noise = noise - mask * noise.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)
    log_ratio = (noise + mask * torch.tensor(sequence_log_ratios)[:, None] / mask.sum(-1, keepdim=True)) * mask
    return make_batch(seed=seed, log_ratio=log_ratio, advantages=advantages, mask=mask)


def test_topr_tapers_only_negative_sequences_by_their_truncated_sequence_ratio():
    """Σ_t δ = [+1, −0.7, −2, +0.5], Â = [+, −, +, −]: weights 1 (positive), e^−0.7 (tapered), 1 (positive, however
    unlikely it became), 1 (negative whose ratio e^0.5 > 1 is clipped at 1)."""
    advantages = torch.tensor([[1.2], [-0.7], [0.4], [-1.5]])
    batch = sequence_log_ratio_batch([1.0, -0.7, -2.0, 0.5], advantages)
    term = LOSSES.get("topr").fn(batch, config("topr"))
    gradient = token_gradient(aggregated("topr", term.loss, batch.mask), batch)
    weights = torch.tensor([1.0, torch.exp(torch.tensor(-0.7)).item(), 1.0, 1.0])
    expected = -(weights[:, None] * advantages) * batch.mask / B  # sequence_sum: (1/B) Σ_i Σ_t
    torch.testing.assert_close(gradient, expected, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(term.metrics["topr/weight/mean"], weights[:, None], rtol=1e-5, atol=1e-7)
    product_of_token_ratios = torch.exp((batch.log_ratio.detach() * batch.mask).sum(-1))
    assert product_of_token_ratios[1] == pytest.approx(weights[1].item(), rel=1e-5)  # the full ratio, not GSPO's mean


def test_topr_splits_token_advantages_by_their_own_sign():
    mask = completion_mask()
    advantages = torch.randn(B, T, generator=torch.Generator().manual_seed(17))
    batch = sequence_log_ratio_batch([-0.3, -1.1, -0.5, 0.2], advantages * mask)
    gradient = token_gradient(aggregated("topr", LOSSES.get("topr").fn(batch, config("topr")).loss, batch.mask), batch)
    taper = torch.exp(torch.tensor([-0.3, -1.1, -0.5, 0.0]))[:, None]  # min(π/μ, 1) per sequence
    weights = torch.where(batch.advantages >= 0, 1.0, taper)
    torch.testing.assert_close(gradient, -weights * batch.advantages * mask / B, rtol=1e-5, atol=1e-7)
    assert ((batch.advantages < 0) & (mask > 0) & (taper < 1)).any() and ((batch.advantages > 0) & (mask > 0)).any()


# ---------------------------------------------------------------- M2PO
def m2po_expected_kept(squares: list[float], threshold: float) -> list[bool]:
    """Drop the largest δ² one at a time until the mean of the rest is below τ (all but one if it never is)."""
    order = sorted(range(len(squares)), key=lambda k: -squares[k])
    for dropped in range(len(squares)):
        rest = [squares[k] for k in order[dropped:]]
        if sum(rest) / len(rest) < threshold:
            break
    else:
        dropped = len(squares) - 1
    return [k not in order[:dropped] for k in range(len(squares))]


@pytest.mark.parametrize("threshold", [0.04, 0.09, 1e-6])
def test_m2po_masks_the_largest_squared_log_ratios_until_the_mean_is_below_tau(threshold):
    log_ratio = 0.35 * torch.randn(B, T, generator=torch.Generator().manual_seed(18))
    log_ratio[1, 5] = 40.0  # padding (row 1 has 4 tokens): an outlier there must count for nothing
    batch = make_batch(seed=18, log_ratio=log_ratio)
    term = LOSSES.get("m2po").fn(batch, config("m2po", m2po_threshold=threshold))
    valid = batch.mask.bool()
    kept = torch.zeros(B, T)
    kept[valid] = torch.tensor(m2po_expected_kept((log_ratio[valid] ** 2).tolist(), threshold), dtype=torch.float)
    torch.testing.assert_close(term.metrics["m2po/masked_fraction"], (1.0 - kept) * batch.mask)
    gradient = token_gradient(aggregated("m2po", term.loss, batch.mask), batch)
    ratio = torch.exp(log_ratio)
    torch.testing.assert_close(gradient, -kept * ratio * batch.advantages * batch.mask / batch.mask.sum())
    masked = valid & (kept == 0)
    if threshold == 1e-6:  # no suffix qualifies: every token but the smallest δ² is masked
        assert int(kept[valid].sum()) == 1 and kept[valid][(log_ratio[valid] ** 2).argmin()] == 1
    else:
        assert masked.any() and (kept[valid] == 1).any()
        assert (log_ratio[valid & (kept == 1)] ** 2).mean() < threshold
        assert (log_ratio[masked] ** 2).min() >= (log_ratio[valid & (kept == 1)] ** 2).max()  # the largest go
    if threshold == 0.04:
        signs = batch.advantages.expand(B, T)[masked]
        assert (signs > 0).any() and (signs < 0).any()  # one pool, whatever the advantage's sign


# ---------------------------------------------------------------- DPPO
def probability_batch(pairs, advantages) -> PolicyBatch:
    """One row per advantage, tokens with (π_θ, π_old) = pairs[i][t]."""
    current = torch.tensor([[p for p, _ in row] for row in pairs]).log().requires_grad_()
    old = torch.tensor([[q for _, q in row] for row in pairs]).log()
    return PolicyBatch(current, old, advantages, torch.ones(current.shape), state={})


DPPO_PAIRS = [  # (π_θ, π_old); ε_low = ε_high = 0.15 (the paper's TV thresholds)
    [(0.9, 0.5), (0.5, 0.9), (1e-3, 1e-5), (0.6, 0.5)],  # Â > 0: masked if π_θ rose by more than 0.15
    [(0.5, 0.9), (0.9, 0.5), (0.8, 0.99), (0.45, 0.5)],  # Â < 0: masked if π_θ fell by more than 0.15
]
DPPO_ADVANTAGES = torch.tensor([[1.2], [-0.7]])


@pytest.mark.parametrize("kl_coef", [0.0, 1e-3, 0.5])
def test_dppo_tv_masks_by_probability_gap_in_the_direction_of_the_advantage(kl_coef):
    batch = probability_batch(DPPO_PAIRS, DPPO_ADVANTAGES)
    args = config("dppo", dppo_kl_coef=kl_coef)
    term = LOSSES.get("dppo").fn(batch, args)
    masked = torch.tensor([[1, 0, 0, 0], [1, 0, 1, 0]], dtype=torch.float)
    # the ratio-100 token (1e-5 → 1e-3) stays (PPO would clip it); 0.99 → 0.8 goes (PPO's clip would not, r = 0.81)
    torch.testing.assert_close(term.metrics["dppo/masked_fraction"], masked)
    delta = batch.log_ratio.detach()
    ratio = torch.exp(delta)
    per_token = -(1 - masked) * ratio * batch.advantages + kl_coef * 2 * delta
    gradient = token_gradient(aggregated("token_mean_global", term.loss, batch.mask), batch)
    torch.testing.assert_close(gradient, per_token / batch.mask.sum(), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(term.loss.detach(), -(1 - masked) * ratio * batch.advantages + kl_coef * delta**2)


def binary_kl(p: float, q: float) -> float:
    return q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))


def test_dppo_kl_masks_by_binary_kl_in_the_direction_of_the_advantage():
    batch = probability_batch(DPPO_PAIRS, DPPO_ADVANTAGES)
    term = LOSSES.get("dppo").fn(batch, config("dppo", dppo_divergence="kl", dppo_kl_coef=0.0))
    expected = torch.zeros(2, 4)
    for i, row in enumerate(DPPO_PAIRS):
        for t, (p, q) in enumerate(row):
            upward = p > q if DPPO_ADVANTAGES[i] > 0 else p < q
            expected[i, t] = float(upward and binary_kl(p, q) > 0.05)  # the paper's KL threshold
    assert expected.sum() >= 2 and expected[0, 2] == 0  # 1e-5 → 1e-3: binary KL ≈ 0.006, kept
    torch.testing.assert_close(term.metrics["dppo/masked_fraction"], expected)
    gradient = token_gradient(aggregated("token_mean_global", term.loss, batch.mask), batch)
    ratio = torch.exp(batch.log_ratio.detach())
    torch.testing.assert_close(gradient, -(1 - expected) * ratio * batch.advantages / batch.mask.sum())


def test_a_bare_dppo_is_the_papers_loss():
    """Every default from one source, the paper's: its thresholds, no KL term, Dr. GRPO's normaliser."""
    args = config("dppo")
    assert (args.dppo_divergence, args.dppo_mask_low, args.dppo_mask_high) == ("tv", None, None)
    assert args.dppo_kl_coef == 0.0
    assert mask_thresholds(args) == (0.15, 0.15)
    assert mask_thresholds(config("dppo", dppo_divergence="kl")) == (0.05, 0.05)
    assert LOSSES.get("dppo").spec.aggregation == "token_sum_over_max_length"


ROUNDING_MARGIN = 1e-3  # far beyond float32's rounding of p − q (~1e-7): no gap is within rounding of a threshold


@pytest.mark.parametrize("low, high", [(0.3, None), (0.03, 0.45)])
def test_dppo_thresholds_are_one_per_direction(low, high):
    batch = probability_batch(DPPO_PAIRS, DPPO_ADVANTAGES)
    term = LOSSES.get("dppo").fn(batch, config("dppo", dppo_mask_low=low, dppo_mask_high=high))
    high = low if high is None else high
    gaps = torch.tensor([[p - q for p, q in row] for row in DPPO_PAIRS], dtype=torch.float64)
    assert (gaps - high).abs().min() > ROUNDING_MARGIN and (gaps + low).abs().min() > ROUNDING_MARGIN
    expected = torch.where(DPPO_ADVANTAGES > 0, gaps > high, gaps < -low).float()
    torch.testing.assert_close(term.metrics["dppo/masked_fraction"], expected)


@pytest.mark.parametrize("below", [False, True])
def test_dppo_a_gap_equal_to_its_threshold_is_inside_the_region(below):
    """The documented rule is strict (Â > 0: masked if p − q > ε_high; Â < 0: masked if p − q < −ε_low), so a gap
    equal to its threshold is kept, and one float32 step below it is masked. The thresholds are the gaps the loss
    itself computes from these log-probs (p and q within a factor 2 of each other, so p − q is exact in float32),
    which makes the boundary the same on every CPU, however it rounds exp and log."""
    batch = probability_batch([[(0.7, 0.4)], [(0.35, 0.6)]], DPPO_ADVANTAGES)
    gaps = (batch.logps.detach().exp() - batch.old_logps.exp()).abs()  # (2, 1): +ε_high, then −(−ε_low)
    if below:
        gaps = torch.nextafter(gaps, torch.zeros_like(gaps))
    high, low = float(gaps[0, 0]), float(gaps[1, 0])
    term = LOSSES.get("dppo").fn(batch, config("dppo", dppo_mask_low=low, dppo_mask_high=high, dppo_kl_coef=0.01))
    masked = torch.full((2, 1), float(below))
    torch.testing.assert_close(term.metrics["dppo/masked_fraction"], masked)
    delta = batch.log_ratio.detach()
    expected = -(1 - masked) * torch.exp(delta) * batch.advantages + 0.01 * delta**2
    torch.testing.assert_close(term.loss.detach(), expected)


# ---------------------------------------------------------------- the sanity law, for every registered loss
def needs_special_inputs(name: str) -> bool:
    return bool(LOSSES.get(name).spec.requires_moe)


@pytest.mark.parametrize("name", LOSSES.names())
def test_on_policy_gradient_is_reinforce(name):
    if needs_special_inputs(name):
        pytest.skip(f"{name} needs inputs a plain batch does not have (requires_moe)")
    if LOSSES.get(name).spec.applies_kl:
        pytest.skip(f"{name} regresses onto the KL-regularised optimum, not a policy gradient: its own law is tested")
    torch.manual_seed(0)
    batch = make_batch(seed=9, on_policy=True, advantages=torch.tensor([[2.0], [-1.5], [0.5], [1.8]]))
    # CISPO's cap is the absolute value epsilon_high (TRL's default 0.2 would scale every weight to 0.2; the
    # recommended cap is 5.0): the law holds for any cap ≥ 1.
    args = config(name, beta=0.0, **({"epsilon_high": 5.0} if name == "cispo" else {}), **required_settings(name))
    term = LOSSES.get(name).fn(batch, args)
    gradient = token_gradient(aggregated(name, term.loss, batch.mask), batch)
    reinforce = token_gradient(aggregated(name, -batch.advantages * batch.logps, batch.mask), batch)
    if name == "clip_cov":
        # The covariance selection is a stochastic gradient mask, not a trust region: it still detaches its tokens.
        selected = term.metrics["clip_cov/selected_fraction"].bool()
        assert selected.sum() == 1  # ⌊2e-4 · 14⌋ = 0 → at least one token
        assert (reinforce[selected] != 0).all()
        reinforce = torch.where(selected, 0.0, reinforce)
    torch.testing.assert_close(gradient, reinforce, rtol=1e-5, atol=1e-8)
    assert reinforce.abs().max() > 0


# ---------------------------------------------------------------- Clip-Cov and KL-Cov
def reference_covariance(batch: PolicyBatch) -> torch.Tensor:
    valid = batch.mask.bool()
    logps = batch.logps.detach()[valid]
    advantages = batch.advantages.expand_as(batch.mask)[valid]
    covariance = torch.zeros_like(batch.mask)
    covariance[valid] = (logps - logps.mean()) * (advantages - advantages.mean())
    return covariance


def covariance_batch(seed=10) -> PolicyBatch:
    return make_batch(seed=seed, advantages=torch.tensor([[2.5], [-2.0], [0.5], [-3.0]]))


def test_token_covariance_is_centred_over_masked_tokens():
    batch = covariance_batch()
    torch.testing.assert_close(token_covariance(batch), reference_covariance(batch))


@pytest.mark.parametrize("ratio, expected_count", [(2e-4, 1), (0.25, 3), (1.0, None)])  # 14 masked tokens
def test_clip_cov_detaches_a_random_subset_of_the_covariance_window(ratio, expected_count):
    batch = covariance_batch()
    args = config("clip_cov", epsilon=0.2, clip_cov_ratio=ratio, clip_cov_lower=0.5, clip_cov_upper=3.0)
    torch.manual_seed(0)
    term = LOSSES.get("clip_cov").fn(batch, args)
    selected = term.metrics["clip_cov/selected_fraction"].bool()
    ratio_t = torch.exp(batch.log_ratio.detach())
    advantages = batch.advantages.expand_as(ratio_t)
    covariance = reference_covariance(batch)
    already_clipped = ratio_t.clamp(0.8, 1.2) * advantages < ratio_t * advantages
    window = batch.mask.bool() & (covariance > 0.5) & (covariance < 3.0) & ~already_clipped
    torch.testing.assert_close(term.metrics["clip_cov/candidate_fraction"].bool(), window)
    assert window.sum() > 4 and already_clipped[batch.mask.bool()].any()
    assert (selected <= window).all()
    assert selected.sum() == (window.sum() if expected_count is None else expected_count)
    ppo = LOSSES.get("grpo").fn(batch, args)
    torch.testing.assert_close(term.loss, ppo.loss)  # the value stays PPO's
    gradient = token_gradient(aggregated("clip_cov", term.loss, batch.mask), batch)
    ppo_gradient = token_gradient(aggregated("clip_cov", ppo.loss, batch.mask), batch)
    torch.testing.assert_close(gradient, torch.where(selected, 0.0, ppo_gradient))
    assert (ppo_gradient[selected] != 0).all()


def test_clip_cov_draws_uniformly_from_the_window():
    batch = covariance_batch()
    args = config("clip_cov", clip_cov_lower=0.5, clip_cov_upper=3.0)
    torch.manual_seed(1)
    counts = sum(LOSSES.get("clip_cov").fn(batch, args).metrics["clip_cov/selected_fraction"] for _ in range(400))
    window = LOSSES.get("clip_cov").fn(batch, args).metrics["clip_cov/candidate_fraction"].bool()
    assert counts.sum() == 400 and (counts[~window] == 0).all()
    expected = 400 / window.sum()
    assert ((counts[window] - expected).abs() < 5 * expected.sqrt()).all()


def test_clip_cov_selects_nothing_when_no_token_qualifies():
    batch = covariance_batch()
    term = LOSSES.get("clip_cov").fn(batch, config("clip_cov", clip_cov_lower=50.0, clip_cov_upper=60.0))
    assert not term.metrics["clip_cov/selected_fraction"].any()


@pytest.mark.parametrize("ratio, expected_count", [(2e-3, 1), (0.3, 4)])  # 14 masked tokens
def test_kl_cov_penalises_the_top_covariance_tokens(ratio, expected_count):
    batch = covariance_batch()
    args = config("kl_cov", kl_cov_ratio=ratio, kl_cov_coef=0.7)
    term = LOSSES.get("kl_cov").fn(batch, args)
    selected = term.metrics["kl_cov/selected_fraction"].bool()
    covariance = reference_covariance(batch).masked_fill(~batch.mask.bool(), float("-inf"))
    top = covariance.flatten().argsort(descending=True)[:expected_count]
    expected_selected = torch.zeros(B * T, dtype=torch.bool)
    expected_selected[top] = True
    torch.testing.assert_close(selected, expected_selected.view(B, T))
    log_ratio = batch.log_ratio.detach()
    ratio_t = torch.exp(log_ratio)
    torch.testing.assert_close(
        term.loss, -ratio_t * batch.advantages + torch.where(selected, 0.7 * log_ratio.abs(), 0.0)
    )
    gradient = token_gradient(aggregated("kl_cov", term.loss, batch.mask), batch)
    per_token = -ratio_t * batch.advantages + torch.where(selected, 0.7 * log_ratio.sign(), 0.0)
    torch.testing.assert_close(gradient, per_token * batch.mask / batch.mask.sum())


# ---------------------------------------------------------------- PPO-KL
def test_ppo_kl_term_is_ratio_advantage_minus_beta_kl():
    batch = make_batch(seed=11, state={BETA: 0.3})
    term = LOSSES.get("ppo_kl").fn(batch, config("ppo_kl"))
    log_ratio = batch.log_ratio.detach()
    ratio = torch.exp(log_ratio)
    kl = ratio - 1 - log_ratio  # k3 of KL(π_old ‖ π_θ) on samples of π_old
    torch.testing.assert_close(term.loss, -(ratio * batch.advantages - 0.3 * kl))
    gradient = token_gradient(term.loss.sum(), batch)
    torch.testing.assert_close(gradient, -(ratio * batch.advantages - 0.3 * (ratio - 1)))


@pytest.mark.parametrize(
    "target, expected_factor",
    [(None, 1.0), (1e-4, 2.0), (1.0, 0.5), ("measured", 1.0)],
)
def test_ppo_kl_beta_adapts_once_per_optimizer_step(target, expected_factor):
    entry = LOSSES.get("ppo_kl")
    state: dict = {}
    micro_batches = [
        make_batch(seed=12, state=state), make_batch(seed=13, mask=completion_mask([2, 6, 5, 0]), state=state)
    ]
    kl_sum = sum(((torch.exp(b.log_ratio) - 1 - b.log_ratio) * b.mask).sum() for b in micro_batches).item()
    step_kl = kl_sum / sum(b.mask.sum() for b in micro_batches).item()
    assert 0.01 < step_kl < 0.1
    args = config("ppo_kl", ppo_kl_beta=0.4, ppo_kl_target=step_kl if target == "measured" else target)
    window = StepMeans()  # what the trainer's loss step feeds from every training micro-batch's logged metrics
    for batch in micro_batches:
        _add_to_window(window, entry.fn(batch, args), batch)
    with torch.no_grad():  # an evaluation forward does not count towards the step's KL
        entry.fn(make_batch(seed=14, log_ratio=torch.full((B, T), 5.0), state=state), args)
    assert state == {}  # the loss is pure: it reads β, never writes
    logged = entry.spec.on_optimizer_step(state, args, window.pop())
    assert logged["ppo_kl/step_kl"] == pytest.approx(step_kl, rel=1e-5)
    assert logged[BETA] == 0.4
    assert state[BETA] == pytest.approx(0.4 * expected_factor)
    assert set(state) == {BETA}
    batch = make_batch(seed=12, state=state)
    term = entry.fn(batch, args)  # the next step uses the new β
    log_ratio = batch.log_ratio.detach()
    torch.testing.assert_close(
        term.loss,
        -(torch.exp(log_ratio) * batch.advantages - 0.4 * expected_factor * (torch.exp(log_ratio) - 1 - log_ratio)),
    )


def test_ppo_kl_beta_follows_the_rule_over_many_steps():
    entry = LOSSES.get("ppo_kl")
    args = config("ppo_kl", ppo_kl_beta=1.0, ppo_kl_target=0.01)
    state: dict = {}
    betas = []
    for log_ratio_scale in (0.5, 0.5, 0.0, 0.12, 0.0):
        batch = make_batch(seed=15, log_ratio=torch.full((B, T), log_ratio_scale), state=state)
        window = StepMeans()
        _add_to_window(window, entry.fn(batch, args), batch)
        entry.spec.on_optimizer_step(state, args, window.pop())
        betas.append(state[BETA])
    # KL(0.5) ≈ 0.149 > 0.015 → ×2; KL(0) = 0 < 0.0067 → ÷2; KL(0.12) ≈ 0.0075 in the dead band → unchanged
    assert betas == [2.0, 4.0, 2.0, 2.0, 1.0]


def _add_to_window(window, term, batch):
    kl = term.metrics[MEASURED_KL]
    window.add(MEASURED_KL, (kl * batch.mask).sum().item(), batch.mask.sum().item())


def test_ppo_kl_config_is_validated():
    with pytest.raises(ValueError, match="ppo_kl_target"):
        config("ppo_kl", ppo_kl_target=0.0)
    with pytest.raises(ValueError, match="clip_cov_lower"):
        config("clip_cov", clip_cov_lower=5.0, clip_cov_upper=1.0)
    with pytest.raises(ValueError, match="kl_cov_ratio"):
        config("kl_cov", kl_cov_ratio=0.0)
