"""Extreme inputs give every registered loss a finite loss and finite gradients (under every aggregation).

Log-ratios of ±50 (r = e^{±50}), rows with no completion token, a batch with no token at all, one-token
completions. Losses that need inputs a plain batch does not have are skipped by their `requires_moe` option.
"""

import warnings

import pytest
import torch

import trl_zoo
from tests.tiny import TEST_OUTPUT_DIR, required_settings
from trl_zoo.aggregation import AggregationContext
from trl_zoo.losses.base import PolicyBatch
from trl_zoo.registry import AGGREGATIONS, LOSSES


def extreme_log_ratio(shape, seed=0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 3, shape, generator=generator) - 1  # −1, 0, +1
    return 50.0 * signs.float()


CASES = {
    "log_ratio_pm50": dict(mask=[[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 0, 0, 0, 0]], log_ratio=50.0),
    "all_plus_50": dict(mask=[[1, 1, 1, 1, 1]] * 4, log_ratio="+50"),
    "all_minus_50": dict(mask=[[1, 1, 1, 1, 1]] * 4, log_ratio="-50"),
    "masked_rows": dict(mask=[[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], log_ratio=0.5),
    "fully_masked_batch": dict(mask=[[0, 0, 0, 0, 0]] * 4, log_ratio=0.5),
    "one_token_completions": dict(mask=[[1]] * 4, log_ratio=50.0),
}


def make_case(case: str, token_advantages: bool) -> PolicyBatch:
    spec = CASES[case]
    mask = torch.tensor(spec["mask"], dtype=torch.float)
    generator = torch.Generator().manual_seed(1)
    logps = (-5 * torch.rand(mask.shape, generator=generator)).requires_grad_()
    if spec["log_ratio"] == "+50":
        log_ratio = torch.full(mask.shape, 50.0)
    elif spec["log_ratio"] == "-50":
        log_ratio = torch.full(mask.shape, -50.0)
    elif spec["log_ratio"] == 50.0:
        log_ratio = extreme_log_ratio(mask.shape)
    else:
        log_ratio = spec["log_ratio"] * torch.randn(mask.shape, generator=generator)
    advantages = torch.tensor([[1.5], [-2.0], [0.0], [0.7]])
    if token_advantages:
        advantages = advantages * torch.rand(mask.shape, generator=generator)
    return PolicyBatch(logps, logps.detach() - log_ratio, advantages, mask, ref_logps=logps.detach() + log_ratio)


LOSS_NAMES = [name for name in LOSSES.names() if not LOSSES.get(name).spec.requires_moe]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", LOSS_NAMES)
def test_finite_loss_and_gradients(name, case):
    args = trl_zoo.GRPOConfig(
        output_dir=TEST_OUTPUT_DIR, loss_type=name, bf16=False, use_cpu=True, report_to="none",
        max_completion_length=5, **required_settings(name),
    )
    for token_advantages in (False, True):
        batch = make_case(case, token_advantages)
        torch.manual_seed(0)
        term = trl_zoo.LOSSES.get(name).fn(batch, args)
        assert torch.isfinite(term.loss).all(), (name, case)
        for metric in term.metrics.values():
            value = metric[1] if isinstance(metric, tuple) else metric
            assert torch.isfinite(
                value[batch.mask.expand_as(value) > 0] if value.shape == batch.mask.shape else value
            ).all()
        for aggregation in AGGREGATIONS.names():
            loss, _ = AGGREGATIONS.get(aggregation).fn(
                term.loss, batch.mask, AggregationContext(max_completion_length=5)
            )
            (gradient,) = torch.autograd.grad(loss, batch.logps, retain_graph=True, allow_unused=True)
            assert torch.isfinite(loss), (name, case, aggregation)
            assert gradient is None or torch.isfinite(gradient).all(), (name, case, aggregation)
            if gradient is not None:
                assert (gradient[batch.mask == 0] == 0).all()  # padding never gets a gradient


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_log_ratios_of_pm100_give_finite_loss_and_gradients(name):
    """Old log-probs far from current (δ = ±100, r = e^{±100} overflows float32): the ratio is capped, never inf."""
    args = trl_zoo.GRPOConfig(
        output_dir=TEST_OUTPUT_DIR, loss_type=name, bf16=False, use_cpu=True, report_to="none",
        max_completion_length=5, **required_settings(name),
    )
    mask = torch.tensor(CASES["log_ratio_pm50"]["mask"], dtype=torch.float)
    for seed in range(3):
        for token_advantages in (False, True):
            batch = make_case("log_ratio_pm50", token_advantages)
            log_ratio = 2 * extreme_log_ratio(mask.shape, seed)  # −100, 0, +100
            batch.old_logps = batch.logps.detach() - log_ratio
            batch.ref_logps = batch.logps.detach() + log_ratio
            term = trl_zoo.LOSSES.get(name).fn(batch, args)
            aggregation = AGGREGATIONS.get(LOSSES.get(name).spec.aggregation).fn
            loss, _ = aggregation(term.loss, mask, AggregationContext(max_completion_length=5))
            (gradient,) = torch.autograd.grad(loss, batch.logps, allow_unused=True)
            assert torch.isfinite(loss), (name, seed, token_advantages)
            assert gradient is None or torch.isfinite(gradient).all(), (name, seed, token_advantages)


WIDEST_CLIPS = {"gmpo": dict(gmpo_epsilon=1e3), "dapo": dict(epsilon_high=1e3), "cispo": dict(epsilon_high=1e3),
                "grpo": dict(delta=1e12, dual_clip=1e12)}  # accepted with a warning: the clip is off


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_one_token_rows_at_log_ratios_of_pm100_give_finite_loss_and_gradients(name):
    """One-token completions (T_i = 1, so nothing averages δ = ±100 down), either sign of Â on each row, sequence and
    token advantages, at the loss's defaults and at the widest clip it accepts: GMPO's geometric mean used to be
    exp(100) = inf on the side its sign-aware clip leaves open."""
    mask = torch.tensor([[1, 0, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.float)
    log_ratio = torch.tensor([[100.0, 0, 0], [100.0, 0, 0], [-100.0, 100.0, 100.0], [-100.0, 0, 0]])
    settings = [{}] + ([WIDEST_CLIPS[name]] if name in WIDEST_CLIPS else [])
    for overrides in settings:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            args = trl_zoo.GRPOConfig(output_dir=TEST_OUTPUT_DIR, loss_type=name, bf16=False, use_cpu=True,
                                      report_to="none", max_completion_length=3, **overrides,
                                      **required_settings(name))
        for sign in (1.0, -1.0):
            for token_advantages in (False, True):
                advantages = sign * torch.tensor([[1.5], [-2.0], [-1.0], [0.7]])
                if token_advantages:
                    advantages = advantages.expand_as(mask).clone()
                logps = torch.full(mask.shape, -2.0, requires_grad=True)
                batch = PolicyBatch(logps, logps.detach() - log_ratio, advantages, mask,
                                    ref_logps=logps.detach() + log_ratio)
                term = trl_zoo.LOSSES.get(name).fn(batch, args)
                aggregation = AGGREGATIONS.get(LOSSES.get(name).spec.aggregation).fn
                loss, _ = aggregation(term.loss, mask, AggregationContext(max_completion_length=3))
                (gradient,) = torch.autograd.grad(loss, logps, allow_unused=True)
                assert torch.isfinite(loss), (name, overrides, sign, token_advantages)
                assert gradient is None or torch.isfinite(gradient).all(), (name, overrides, sign, token_advantages)


@pytest.mark.parametrize("name", trl_zoo.KL_ESTIMATORS.names())
def test_kl_estimators_are_finite_at_log_ratios_of_pm100(name):
    logps = torch.zeros(6, requires_grad=True)
    ref_logps = torch.tensor([-100.0, -20.0, 0.0, 20.0, 100.0, 5.0])
    kl = trl_zoo.KL_ESTIMATORS.get(name).fn(logps, ref_logps)
    (gradient,) = torch.autograd.grad(kl.sum(), logps)
    assert torch.isfinite(kl).all() and torch.isfinite(gradient).all()


def test_importance_ratio_is_exact_in_range_and_capped_beyond():
    from trl_zoo.numerics import MAX_LOG_RATIO, importance_ratio

    log_ratio = torch.tensor([-100.0, -3.0, 0.0, 0.5, 19.0, 100.0], requires_grad=True)
    ratio = importance_ratio(log_ratio)
    (gradient,) = torch.autograd.grad(ratio.sum(), log_ratio)
    expected = torch.exp(log_ratio.detach())[1:5]  # same shape as the ratio's own exp: same rounding on any CPU
    assert torch.equal(ratio[1:5], expected)
    assert torch.equal(gradient[1:5], expected)
    assert ratio[-1] == torch.exp(torch.tensor(MAX_LOG_RATIO)) and ratio[0] == torch.exp(torch.tensor(-MAX_LOG_RATIO))
    assert torch.isfinite(gradient).all()
