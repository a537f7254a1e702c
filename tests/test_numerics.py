"""Numerical safety, property-based: random inputs with extremes, for every loss, every advantage estimator and the
samplers' group filter. Losses and gradients stay finite and the identities of docs/formulas.md hold wherever they
apply.

Input ranges (all float32, the trainer's dtype):
- log-probs in [−50, 0] for π_θ, π_old and π_ref, so log-ratios reach ±50 (r = e^{±50});
- masks of any bit pattern: empty rows, one-token rows, holes (tool masks), even a batch with no token;
- advantages |Â| ≤ 1e6, per sequence or per token;
- rewards |R| ≤ 1e6, with all-equal groups and unscorable (NaN, i.e. None) completions. Above ~1e6 float32 no longer
  resolves reward differences below 0.06, so identities stop being checkable; from ~1e19 the squares in the std
  overflow and std-normalised advantages (grpo, REINFORCE++) silently become 0, while staying finite.

Examples are derandomised (the same every run) and nothing is written to a hypothesis database.
"""

import dataclasses
import functools
import math
import warnings
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trl_zoo
from tests import tiny
from trl_zoo.advantages import AdvantageInputs
from trl_zoo.aggregation import AggregationContext
from trl_zoo.losses.base import PolicyBatch
from trl_zoo.losses.gspo import sequence_advantages
from trl_zoo.registry import ADVANTAGES, AGGREGATIONS, KL_ESTIMATORS, LOSSES, SAMPLERS
from trl_zoo.samplers.base import DynamicSamplingExhausted, Round, group_reward_spread

PROPERTY = settings(
    max_examples=30, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
MAX_WIDTH = 6
LOGP = st.floats(-50.0, 0.0, width=32)
ADVANTAGE = st.floats(-1e6, 1e6, width=32)
REWARD = st.floats(-1e6, 1e6, width=32)
ROUTER_LAYERS, ROUTER_TOP_K = 2, 2


@functools.lru_cache(maxsize=None)
def config(loss_type: str, **overrides):
    return trl_zoo.GRPOConfig(**tiny.config_kwargs(loss_type=loss_type, max_completion_length=MAX_WIDTH, **overrides))


def tensor(values, *shape):
    return torch.tensor(values, dtype=torch.float32).reshape(*shape)


# ---------------------------------------------------------------------------------------------------- losses
@st.composite
def policy_batches(draw, on_policy: bool = False, token_advantages=None, with_router: bool = False):
    rows, width = draw(st.integers(1, 5)), draw(st.integers(1, MAX_WIDTH))
    mask = tensor(draw(st.lists(st.booleans(), min_size=rows * width, max_size=rows * width)), rows, width)
    logps = tensor(draw(st.lists(LOGP, min_size=rows * width, max_size=rows * width)), rows, width)
    old = tensor(draw(st.lists(LOGP, min_size=rows * width, max_size=rows * width)), rows, width)
    ref = tensor(draw(st.lists(LOGP, min_size=rows * width, max_size=rows * width)), rows, width)
    per_token = draw(st.booleans()) if token_advantages is None else token_advantages
    columns = width if per_token else 1
    advantages = tensor(draw(st.lists(ADVANTAGE, min_size=rows * columns, max_size=rows * columns)), rows, columns)
    logps = logps.requires_grad_()
    extras = {}
    if with_router:
        size = rows * width * ROUTER_LAYERS * ROUTER_TOP_K
        shape = (rows, width, ROUTER_LAYERS, ROUTER_TOP_K)
        extras["old_router_logps"] = tensor(draw(st.lists(LOGP, min_size=size, max_size=size)), *shape)
        extras["router_logps"] = (
            extras["old_router_logps"].clone()
            if on_policy
            else tensor(draw(st.lists(LOGP, min_size=size, max_size=size)), *shape)
        )
    return PolicyBatch(
        logps=logps,
        old_logps=logps.detach().clone() if on_policy else old,
        advantages=advantages,
        mask=mask,
        ref_logps=ref,
        entropies=-logps.detach(),
        extras=extras,
    )


def aggregate(name: str, aggregation: str, terms: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    loss, _ = AGGREGATIONS.get(aggregation).fn(terms, mask, AggregationContext(max_completion_length=MAX_WIDTH))
    return loss


def gradient(loss: torch.Tensor, batch: PolicyBatch) -> torch.Tensor:
    (grad,) = torch.autograd.grad(loss, batch.logps, retain_graph=True, allow_unused=True)
    return torch.zeros_like(batch.logps) if grad is None else grad


def default_aggregation(name: str) -> str:
    return LOSSES.get(name).spec.aggregation


@pytest.mark.parametrize("name", LOSSES.names())
def test_every_loss_stays_finite_under_every_aggregation(name):
    with_router = bool(LOSSES.get(name).spec.requires_moe)

    @PROPERTY
    @given(batch=policy_batches(with_router=with_router))
    def check(batch):
        torch.manual_seed(0)
        term = LOSSES.get(name).fn(batch, config(name, **tiny.required_settings(name)))
        assert torch.isfinite(term.loss).all()
        for metric in term.metrics.values():
            value = (metric[1] if isinstance(metric, tuple) else metric).detach()
            selected = value[batch.mask.expand_as(value) > 0] if value.shape[-1] == batch.mask.shape[-1] else value
            assert torch.isfinite(selected).all()
        for aggregation in AGGREGATIONS.names():
            loss = aggregate(name, aggregation, term.loss, batch.mask)
            grad = gradient(loss, batch)
            assert torch.isfinite(loss) and torch.isfinite(grad).all(), aggregation
            assert (grad[batch.mask == 0] == 0).all(), aggregation  # padding never gets a gradient

    check()


ON_POLICY_ARGS = {"cispo": dict(epsilon_high=5.0)}  # CISPO's cap is absolute: the law needs a cap ≥ 1
# One term per sequence with Â_i the masked mean of token advantages (docs/formulas.md: GSPO, GMPO, RSPO): their
# REINFORCE gradient is that of the per-sequence advantage.
SEQUENCE_ADVANTAGE_LOSSES = {"gspo", "gmpo", "rspo"}


@pytest.mark.parametrize("name", LOSSES.names())
def test_on_policy_gradient_is_reinforce_for_every_input(name):
    """docs/formulas.md sanity law: θ = θ_old, β = 0 ⇒ ∇loss = ∇ of −Â·log π under the loss's own aggregation."""
    with_router = bool(LOSSES.get(name).spec.requires_moe)
    if LOSSES.get(name).spec.applies_kl:
        pytest.skip(f"{name} regresses onto the KL-regularised optimum, not a policy gradient: its own law is tested")
    args = config(name, **ON_POLICY_ARGS.get(name, {}), **tiny.required_settings(name))

    @PROPERTY
    @given(batch=policy_batches(on_policy=True, with_router=with_router))
    def check(batch):
        torch.manual_seed(0)
        term = LOSSES.get(name).fn(batch, args)
        aggregation = default_aggregation(name)
        grad = gradient(aggregate(name, aggregation, term.loss, batch.mask), batch)
        advantages = sequence_advantages(batch) if name in SEQUENCE_ADVANTAGE_LOSSES else batch.advantages
        reinforce = gradient(aggregate(name, aggregation, -advantages * batch.logps, batch.mask), batch)
        if name == "clip_cov":  # its covariance selection detaches tokens whatever the ratio (a gradient mask)
            reinforce = torch.where(term.metrics["clip_cov/selected_fraction"].bool(), 0.0, reinforce)
        scale = max(1.0, batch.advantages.abs().max().item())
        torch.testing.assert_close(grad, reinforce, rtol=1e-5, atol=1e-6 * scale)

    check()


@PROPERTY
@given(batch=policy_batches(token_advantages=False))
def test_gspo_token_with_equal_token_advantages_is_gspo(batch):
    args = config("gspo_token")
    token_batch = PolicyBatch(
        batch.logps, batch.old_logps, batch.advantages.expand_as(batch.mask).contiguous(), batch.mask
    )
    gspo = aggregate("gspo", "sequence_mean", LOSSES.get("gspo").fn(batch, args).loss, batch.mask)
    gspo_token = aggregate(
        "gspo_token", "sequence_mean", LOSSES.get("gspo_token").fn(token_batch, args).loss, batch.mask
    )
    scale = max(1.0, gspo.abs().item())
    torch.testing.assert_close(gspo_token, gspo, rtol=1e-5, atol=1e-6 * scale)
    torch.testing.assert_close(gradient(gspo_token, batch), gradient(gspo, batch), rtol=1e-5, atol=1e-6 * scale)


@PROPERTY
@given(logps=st.lists(LOGP, min_size=1, max_size=40), ref=st.lists(LOGP, min_size=40, max_size=40))
def test_kl_estimators_finite_k1_is_d_and_k2_k3_nonnegative(logps, ref):
    logps, ref = torch.tensor(logps), torch.tensor(ref[: len(logps)])
    k1, k2, k3 = (KL_ESTIMATORS.get(name).fn(logps, ref) for name in ("k1", "k2", "k3"))
    assert torch.isfinite(torch.stack([k1, k2, k3])).all()
    assert torch.equal(k1, logps - ref)
    assert (k2 >= 0).all()
    # k3 = e^{−d} + d − 1 ≥ 0 exactly; in float32 its "− 1" can round to one ulp of 1 below zero (as in TRL)
    assert (k3 >= -(2.0**-24)).all()


# ---------------------------------------------------------------------------------------------------- estimators
GROUP_CENTRED = ("grpo", "dr_grpo", "rloo")
# the declared extras (`needs=`) these tests know how to draw
BUILDABLE_EXTRAS = {"score_sq_norms", "values", "reference_rewards"}
DECLARED_EXTRAS = {need for name in ADVANTAGES.names() for need in ADVANTAGES.get(name).spec.needs}
WEIGHTED_BASELINES = {"opo": "lengths", "optimal_baseline": "score_sq_norms"}


@st.composite
def reward_batches(draw, dtype=torch.float32):
    """Rewards of P groups of G (some groups all-equal, some completions unscorable), with the completion mask, a
    per-token KL penalty, ‖s‖² and, when a registered estimator declares them, critic values."""
    groups, size = draw(st.integers(1, 4)), draw(st.integers(2, 5))
    rewards = []
    for _ in range(groups):
        if draw(st.booleans()):
            rewards += [draw(REWARD)] * size  # a zero-signal group
        else:
            rewards += draw(st.lists(REWARD, min_size=size, max_size=size))
    count, width = groups * size, draw(st.integers(1, MAX_WIDTH))
    unscorable = (
        draw(st.lists(st.booleans(), min_size=count, max_size=count)) if draw(st.booleans()) else [False] * count
    )
    rewards = torch.tensor([math.nan if drop else value for value, drop in zip(rewards, unscorable)], dtype=dtype)
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=count * width, max_size=count * width)), dtype=dtype)
    mask = mask.view(count, width)
    penalty = None
    if draw(st.booleans()):
        values = draw(st.lists(st.floats(-10, 10, width=32), min_size=count * width, max_size=count * width))
        penalty = torch.tensor(values, dtype=dtype).view(count, width) * mask
    extras = {
        "score_sq_norms": torch.tensor(
            draw(st.lists(st.floats(0, 100, width=32), min_size=count, max_size=count)), dtype=dtype
        )
    }
    if "values" in DECLARED_EXTRAS:
        values = draw(st.lists(st.floats(-1e3, 1e3, width=32), min_size=count * width, max_size=count * width))
        extras["values"] = torch.tensor(values, dtype=dtype).view(count, width)
    if "reference_rewards" in DECLARED_EXTRAS:
        samples = draw(st.integers(1, 4))
        values = draw(st.lists(REWARD, min_size=count * samples, max_size=count * samples))
        extras["reference_rewards"] = torch.tensor(values, dtype=dtype).view(count, samples)
    return AdvantageInputs(rewards, size, mask=mask, token_penalty=penalty, **extras)


def estimator_args(scale_rewards: str):
    return config("grpo", scale_rewards=scale_rewards)


def run_estimator(name: str, inputs: AdvantageInputs, scale_rewards: str = "group") -> torch.Tensor:
    return ADVANTAGES.get(name).fn(inputs, estimator_args(scale_rewards))


def scorable_counts(inputs: AdvantageInputs) -> torch.Tensor:
    """(N,) number of scorable completions in each completion's group."""
    counts = (~torch.isnan(inputs.grouped)).sum(1, keepdim=True)
    return counts.expand_as(inputs.grouped).reshape(-1)


@pytest.mark.parametrize("name", ADVANTAGES.names())
def test_every_estimator_is_finite_wherever_a_completion_has_a_baseline(name):
    """No ±inf ever (the trainer maps NaN to 0 but inf to ±3e38); NaN only for unscorable completions, for a group's
    only scorable completion, or for a batch-whitened estimator with fewer than two scorable tokens."""
    spec = ADVANTAGES.get(name).spec
    token_level = bool(spec.token_level)
    unknown = set(spec.needs) - BUILDABLE_EXTRAS
    if unknown:
        pytest.skip(f"{name} needs {sorted(unknown)}, which these tests cannot draw")

    @PROPERTY
    @given(inputs=reward_batches(), scale=st.sampled_from(["group", "batch", "none"]))
    def check(inputs, scale):
        if spec.nonnegative_rewards:  # its domain (a pass rate); negative rewards are refused, see test_advantages.py
            inputs = dataclasses.replace(inputs, rewards=inputs.rewards.abs())
        advantages = run_estimator(name, inputs, scale)
        assert not torch.isinf(advantages).any()
        scorable = ~torch.isnan(inputs.rewards)
        expected_finite = scorable & (scorable_counts(inputs) >= 2)
        if token_level:
            selected = inputs.mask.bool() & scorable.unsqueeze(1)
            if selected.sum() < 2:
                return
            assert torch.isfinite(advantages[expected_finite]).all()
        else:
            assert torch.isfinite(advantages[expected_finite]).all()

    check()


@pytest.mark.parametrize("name", ("grpo", "dr_grpo", "rloo", "opo", "optimal_baseline", "reinforce_pp_baseline"))
def test_a_group_of_equal_rewards_gets_exactly_zero_advantage(name):
    """Even where the float mean of the group misses its value (|R| up to 1e6 in float32): no spurious signal."""

    @PROPERTY
    @given(value=REWARD, groups=st.integers(1, 4), size=st.integers(2, 7), width=st.integers(1, MAX_WIDTH))
    def check(value, groups, size, width):
        rewards = torch.full((groups * size,), value)
        inputs = AdvantageInputs(
            rewards, size, mask=torch.ones(groups * size, width), score_sq_norms=torch.linspace(0.5, 9, groups * size)
        )
        assert (run_estimator(name, inputs) == 0).all()

    check()


@PROPERTY
@given(inputs=reward_batches(dtype=torch.float64), scale=st.sampled_from(["group", "batch", "none"]))
def test_identities_of_the_estimators(inputs, scale):
    """In float64, on the scorable completions: group-centred estimators sum to 0 per group, weighted baselines give a
    weighted sum of 0, RLOO = G_s/(G_s − 1)·Dr. GRPO (G_s scorable per group), the batch baseline sums to 0 over the
    batch, REINFORCE is R."""
    scorable = ~torch.isnan(inputs.rewards)
    magnitude = max(1.0, inputs.rewards[scorable].abs().max().item()) if scorable.any() else 1.0
    tolerance = 1e-9 * magnitude * inputs.num_generations
    counts = scorable_counts(inputs)
    with_siblings = scorable & (counts >= 2)
    for name in GROUP_CENTRED:
        advantages = run_estimator(name, inputs, scale).masked_fill(~with_siblings, 0.0)
        sums = advantages.view(-1, inputs.num_generations).sum(1)
        if name == "grpo" and scale != "none":  # divided by a std that may be tiny: compare in units of Â
            tolerance_here = tolerance / (1e-4 if scale == "group" else 1.0) + 1e-9 * advantages.abs().max().item()
        else:
            tolerance_here = tolerance
        assert sums.abs().max().item() <= tolerance_here, name
    for name, weight in WEIGHTED_BASELINES.items():
        weights = inputs.lengths if weight == "lengths" else inputs.score_sq_norms
        advantages = run_estimator(name, inputs).masked_fill(~scorable, 0.0)
        grouped_weights = weights.view(-1, inputs.num_generations).masked_fill(
            ~scorable.view(-1, inputs.num_generations), 0
        )
        weighted = (advantages.view(-1, inputs.num_generations) * grouped_weights).sum(1)
        has_weight = grouped_weights.sum(1) > 0
        largest = weighted[has_weight].abs().max().item() if has_weight.any() else 0.0
        assert largest <= tolerance * max(1.0, weights.max().item()), name
    dr_grpo = run_estimator("dr_grpo", inputs)
    rloo = run_estimator("rloo", inputs)
    factor = counts.double() / (counts.double() - 1)
    torch.testing.assert_close(rloo[with_siblings], (factor * dr_grpo)[with_siblings], rtol=1e-9, atol=tolerance)
    baseline = run_estimator("reinforce_batch_baseline", inputs)
    assert baseline[scorable].sum().abs().item() <= tolerance * inputs.rewards.numel()
    torch.testing.assert_close(run_estimator("reinforce", inputs), inputs.rewards, equal_nan=True)


@PROPERTY
@given(inputs=reward_batches(dtype=torch.float64))
def test_reinforce_pp_whitens_the_scorable_tokens(inputs):
    selected = inputs.mask.bool() & ~torch.isnan(inputs.rewards).unsqueeze(1)
    if selected.sum() < 2:
        return
    for name in ("reinforce_pp", "reinforce_pp_baseline"):
        whitened = run_estimator(name, inputs)[selected]
        if (whitened == 0).all():  # every selected return was equal
            continue
        scale = max(1.0, whitened.abs().max().item())
        assert abs(whitened.mean().item()) <= 1e-9 * scale, name
        assert whitened.std().item() <= 1.0 + 1e-9, name  # std / (std + ε)


# ---------------------------------------------------------------------------------------------------- samplers
@PROPERTY
@given(inputs=reward_batches())
def test_group_filter_keeps_exactly_the_groups_with_spread(inputs):
    spread = group_reward_spread(inputs.rewards, inputs.num_generations)
    for group, kept in zip(inputs.grouped.tolist(), spread.tolist()):
        scored = [value for value in group if not math.isnan(value)]
        assert kept == (len(scored) > 0 and max(scored) > min(scored))


class ScriptedSession:
    """A `SamplingSession` whose rounds have scripted group spreads; `assemble` returns the picks."""

    def __init__(self, spreads: list[list[bool]], group_size: int):
        self._script = [torch.tensor(spread) for spread in spreads]
        self.num_groups = len(spreads[0])
        self.group_size = group_size
        self.rounds: list[Round] = []
        self.generate_round()

    def generate_round(self) -> Round:
        spread = self._script[len(self.rounds)]
        rows = self.num_groups * self.group_size
        advantages = torch.linspace(-1, 1, rows)
        scored = Round({"advantages": advantages}, spread, torch.arange(rows) // self.group_size)
        self.rounds.append(scored)
        return scored

    def assemble(self, picks):
        return {"picks": picks}


@st.composite
def spread_scripts(draw):
    groups, rounds = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    return [draw(st.lists(st.booleans(), min_size=groups, max_size=groups)) for _ in range(rounds)]


@PROPERTY
@given(script=spread_scripts(), group_size=st.integers(2, 4))
def test_resample_takes_the_first_groups_with_spread_then_fills(script, group_size):
    args = SimpleNamespace(dynamic_sampling_max_rounds=len(script), dynamic_sampling_on_exhausted="fill")
    session = ScriptedSession(script, group_size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fill warning; its text is tested in test_sampling.py
        sampled = SAMPLERS.get("resample").fn(session, args)
    target = len(script[0])
    informative = [
        (r, g) for r, spread in enumerate(script[: len(session.rounds)]) for g, kept in enumerate(spread) if kept
    ]
    picks = sampled.batch["picks"]
    assert len(picks) == target
    assert picks[: min(target, len(informative))] == informative[:target]
    for index, group in picks[len(informative) :]:
        assert not script[index][group]  # filled with zero-spread groups
    # it stops generating as soon as the batch is full
    rounds_needed = next((r + 1 for r in range(len(script)) if sum(map(sum, script[: r + 1])) >= target), len(script))
    assert len(session.rounds) == rounds_needed
    assert all(math.isfinite(value) or key.endswith("per_sample_trained") for key, value in sampled.metrics.items())
    if len(informative) < target:
        exhausted = SimpleNamespace(dynamic_sampling_max_rounds=len(script), dynamic_sampling_on_exhausted="raise")
        with pytest.raises(DynamicSamplingExhausted, match="^dynamic_sampling_max_rounds: "):
            SAMPLERS.get("resample").fn(ScriptedSession(script, group_size), exhausted)


@PROPERTY
@given(spread=st.lists(st.booleans(), min_size=1, max_size=6), group_size=st.integers(2, 4))
def test_reweight_zeroes_zero_spread_groups_and_scales_the_rest_finitely(spread, group_size):
    session = ScriptedSession([spread], group_size)
    advantages = session.rounds[0].batch["advantages"]
    sampled = SAMPLERS.get("reweight").fn(session, SimpleNamespace())
    kept = sum(spread)
    weights = torch.tensor(spread, dtype=torch.float32).repeat_interleave(group_size)
    scale = len(spread) / kept if kept else 0.0
    torch.testing.assert_close(sampled.batch["advantages"], advantages * weights * scale)
    assert torch.isfinite(sampled.batch["advantages"]).all()
    assert sampled.metrics["dynamic_sampling/informative_share"] == kept / len(spread)
