"""adaptive_budget: prompts generated in increments along a grid, stopped at reward spread or given up; the batch
is exactly the configured number of completions in informative groups of unequal sizes, whose advantages are
computed again over those groups. Counts against closed forms (`expected_counts`, checked against an enumeration of
every reward sequence) and against resample's."""

import itertools
import math
import warnings
from types import SimpleNamespace

import pytest
import torch

import trl_zoo
from tests.scripts.resample_two_processes import RecordsTrainedBatches
from tests.tiny import config_kwargs, make_trainer
from trl_zoo.registry import SAMPLERS
from trl_zoo.samplers.adaptive_budget import (
    FILL_WARNING,
    all_equal_probability,
    budget_grid,
    decision,
    expected_counts,
    kept_rows,
    validate_adaptive_budget,
)
from trl_zoo.samplers.base import DynamicSamplingExhausted, Round

# scripted task rewards of the k-th completion of a prompt, by the prompt's class (its name's first letter)
SEQUENCES = {
    "a": [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0],  # spread at 2
    "b": [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # spread at 4
    "c": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0],  # spread at 8
    "z": [0.0] * 8,  # never
}
SHAPING = 10.0  # total reward = task reward + SHAPING: the estimator must get the totals


def budget_args(**overrides):
    values = dict(
        num_generations=8, generation_batch_size=16, adaptive_budget_first_size=2, adaptive_budget_max_size=None,
        adaptive_budget_min_size=None, adaptive_budget_give_up_size=None, dynamic_sampling_max_rounds=8,
        dynamic_sampling_on_exhausted="fill", advantage_estimator=None, kl_placement="loss", teacher_model=None,
        multi_objective_aggregation="sum_then_normalize",
    )
    values.update(overrides)
    return SimpleNamespace(**values)


class ScriptedSession:
    """A `SamplingSession` whose prompts (named by class and number: a0, b0, …) score `SEQUENCES` in order."""

    def __init__(self, classes: str, num_groups: int = 2, group_size: int = 8):
        self.classes, self.num_groups, self.group_size = classes, num_groups, group_size
        self.state: dict = {}
        self.rounds: list[Round] = []
        self.drawn = 0
        self.scored: dict[str, int] = {}

    def draw_prompts(self) -> list:
        names = []
        for _ in range(self.num_groups):
            kind = self.classes[self.drawn % len(self.classes)]
            names.append(f"{kind}{self.drawn // len(self.classes)}")
            self.drawn += 1
        return [{"prompt": name} for name in names for _ in range(self.group_size)]

    def generate_round(self, rows=None) -> Round:
        assert len(rows) == self.num_groups * self.group_size  # every round is one whole generation batch
        rewards = []
        for row in rows:
            name = row["prompt"]
            count = self.scored.get(name, 0)
            self.scored[name] = count + 1
            rewards.append(SEQUENCES[name[0]][count])
        task = torch.tensor(rewards)
        scored = Round({"names": [row["prompt"] for row in rows]}, torch.zeros(0, dtype=torch.bool),
                       torch.arange(len(rows)), task_rewards=task, total_rewards=task + SHAPING)
        self.rounds.append(scored)
        return scored

    def assemble_rows(self, order):
        return {"order": order, "names": [self.rounds[index].batch["names"][row] for index, row in order]}


def run(session, args):
    return SAMPLERS.get("adaptive_budget").fn(session, args)


# ---------------------------------------------------------------------------------------------------- the rule
def test_grid_rule_and_give_up_confidence():
    assert budget_grid(2, 8) == [2, 4, 8]
    assert budget_grid(2, 6) == [2, 4, 6]
    assert budget_grid(3, 8) == [3, 6, 8]
    assert budget_grid(4, 4) == [4]
    assert decision([0.0, 1.0], 2, 8, 8) == "stop"
    assert decision([0.0, 1.0], 4, 8, 8) == "continue"  # spread below n_stop
    assert decision([1.0, 1.0, 1.0, 1.0], 2, 8, 8) == "continue"
    assert decision([1.0, 1.0, 1.0, 1.0], 2, 4, 8) == "give up"
    assert decision([0.0] * 8, 2, 8, 8) == "give up"
    assert decision([float("nan"), 1.0], 2, 8, 8) == "continue"  # an unscorable completion is no spread
    # q(n) = p^n + (1 − p)^n: the probability of giving up a prompt of success rate p
    assert all_equal_probability(0.5, 8) == 2 / 256
    assert all_equal_probability(0.25, 8) == pytest.approx(0.75**8 + 0.25**8)
    assert all_equal_probability(0.25, 8) == pytest.approx(0.1001, abs=1e-4)
    assert all_equal_probability(0.25, 4) == pytest.approx(0.3203, abs=1e-4)


def test_cut_group_keeps_spread():
    assert kept_rows([0.0, 1.0, 0.0, 0.0], 2) == [0, 1]  # the first two have spread
    assert kept_rows([0.0, 0.0, 0.0, 1.0], 2) == [0, 3]  # first lowest and first highest
    assert kept_rows([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], 4) == [0, 1, 2, 7]
    assert kept_rows([float("nan"), 2.0, 2.0, 5.0], 2) == [1, 3]


def enumerated_counts(p: float, grid: list[int], n_stop: int, n_give: int):
    """The same expectations by running `decision` on every binary reward sequence of length G_max."""
    top = grid[-1]
    completions = trained = informative = 0.0
    for sequence in itertools.product((0.0, 1.0), repeat=top):
        weight = math.prod(p if reward else 1 - p for reward in sequence)
        for point in grid:
            outcome = decision(list(sequence[:point]), n_stop, n_give, top)
            if outcome != "continue":
                break
        completions += weight * point
        if outcome == "stop":
            trained += weight * point
            informative += weight
    return completions, trained, informative


@pytest.mark.parametrize("p", [0.0, 0.1, 0.3, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("n_stop, n_give", [(2, 8), (8, 4), (4, 4), (2, 2), (8, 8)])
def test_expected_counts_match_an_enumeration_of_every_sequence(p, n_stop, n_give):
    expected = enumerated_counts(p, [2, 4, 8], n_stop, n_give)
    assert expected_counts(p, [2, 4, 8], n_stop, n_give) == pytest.approx(expected, abs=1e-12)


def test_expected_counts_closed_forms():
    # defaults, p = 0.5: 2 + 2·q(2) + 4·q(4) = 3.5 completions, 2·0.5 + 4·0.375 + 8·(0.125 − 1/128) trained
    assert expected_counts(0.5, [2, 4, 8], 2, 8) == pytest.approx((3.5, 3.4375, 1 - 2 / 256))
    assert expected_counts(0.0, [2, 4, 8], 2, 8) == (8.0, 0.0, 0.0)  # hopeless: as resample, 8 and nothing
    # give up at 4, top up to 8: 2 + 2 + 4·(1 − q(4)) = 7.5, 8·(1 − q(4)) = 7
    assert expected_counts(0.5, [2, 4, 8], 8, 4) == pytest.approx((7.5, 7.0, 0.875))
    assert expected_counts(1.0, [2, 4, 8], 8, 4) == (4.0, 0.0, 0.0)


def generated_per_trained(p_mix: dict[float, float], grid, n_stop, n_give):
    completions = sum(share * expected_counts(p, grid, n_stop, n_give)[0] for p, share in p_mix.items())
    trained = sum(share * expected_counts(p, grid, n_stop, n_give)[1] for p, share in p_mix.items())
    return completions / trained


def resample_generated_per_trained(p_mix: dict[float, float], group_size: int):
    return 1 / sum(share * (1 - all_equal_probability(p, group_size)) for p, share in p_mix.items())


def test_per_trained_completion_defaults_never_beat_resample_and_early_give_up_does():
    # On the same prompts, resample 1 + H/I ≤ adaptive_budget's defaults 1 + H·G/Σn (module docstring).
    for p in (0.05, 0.2, 0.5, 0.8):
        assert generated_per_trained({p: 1.0}, [2, 4, 8], 2, 8) >= resample_generated_per_trained({p: 1.0}, 8)
    # 88 % of prompts hopeless (the real model's medium level), 12 % at p = 0.5
    mix = {0.0: 0.44, 1.0: 0.44, 0.5: 0.12}
    resample = resample_generated_per_trained(mix, 8)
    assert resample == pytest.approx(1 / (0.12 * (1 - 2 / 256)))  # 8.40
    assert generated_per_trained(mix, [2, 4, 8], 2, 8) / resample == pytest.approx(2.154, abs=1e-3)
    # give up after 4, top informative groups up to 8: (0.88·4 + 0.12·7.5) / (0.12·7) / 8.40 = 0.63
    assert generated_per_trained(mix, [2, 4, 8], 8, 4) / resample == pytest.approx(0.6267, abs=1e-3)
    # but where the prompts without spread are nearly always right (p = 0.9), giving up at 4 loses more than it saves
    assert generated_per_trained({0.9: 1.0}, [2, 4, 8], 8, 4) == pytest.approx(1.9543, abs=1e-4)
    assert resample_generated_per_trained({0.9: 1.0}, 8) == pytest.approx(1.7558, abs=1e-4)


# ---------------------------------------------------------------------------------------------------- the sampler
def test_one_batch_by_hand():
    session = ScriptedSession("abcz")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a full batch fills nothing
        sampled = run(session, budget_args())
    # round 1: a0 b0 c0 z0 a1 b1 c1 z1 × 2 (a stop); round 2: b0 c0 z0 b1 c1 z1 to 4, a2 b2 × 2 (b0, b1, a2 stop);
    # round 3: c0 z0 c1 z1 to 8 (c stop, z given up), b2 waits; a0 a1 b0 b1 a2 = 14 rows, c0 cut to its rows 0, 7
    assert len(session.rounds) == 3
    names = sampled.batch["names"]
    assert names == ["a0"] * 2 + ["a1"] * 2 + ["b0"] * 4 + ["b1"] * 4 + ["a2"] * 2 + ["c0"] * 2
    assert sampled.batch["order"][4:8] == [(0, 2), (0, 3), (1, 0), (1, 1)]  # b0: 2 in round 1, 2 in round 2
    assert sampled.batch["order"][-2:] == [(0, 4), (2, 3)]  # c0: its first and its eighth completion
    regrouped = sampled.regrouped
    assert regrouped.group_sizes.tolist() == [2, 2, 4, 4, 2, 2]
    assert regrouped.trained.all()
    task = [0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0, 1]
    assert regrouped.rewards.tolist() == [reward + SHAPING for reward in task]
    metrics = sampled.metrics
    assert metrics["dynamic_sampling/generation_rounds"] == 3
    assert metrics["dynamic_sampling/generated_per_trained"] == 48 / 16
    assert metrics["dynamic_sampling/prompts_opened"] == 10
    assert metrics["dynamic_sampling/informative_share"] == 7 / 10  # a0 a1 b0 b1 a2 c0 c1
    assert metrics["dynamic_sampling/given_up"] == 2
    assert metrics["dynamic_sampling/mean_group_size"] == 16 / 6
    assert metrics["dynamic_sampling/filled_rows"] == 0


def test_give_up_early_and_top_up():
    # n_give = 4, n_stop = 8: z is given up after 4; a prompt with spread goes straight to 8
    session = ScriptedSession("abz", num_groups=2)
    sampled = run(session, budget_args(adaptive_budget_min_size=8, adaptive_budget_give_up_size=4))
    # round 1: a0 b0 z0 a1 b1 z1 a2 b2 × 2 (a has spread); round 2: a0 +6 (to 8), b0 +2, z0 +2, a1 +6 = 16 rows,
    # b1 z1 a2 b2 wait; a0 and a1 stop at 8, z0 is given up at 4, b0 (spread at 4) would go on to 8
    assert len(session.rounds) == 2
    assert sampled.regrouped.group_sizes.tolist() == [8, 8]
    assert sampled.batch["names"] == ["a0"] * 8 + ["a1"] * 8
    assert sampled.batch["order"][:8] == [(0, 0), (0, 1)] + [(1, row) for row in range(6)]
    assert sampled.metrics["dynamic_sampling/given_up"] == 1
    assert sampled.metrics["dynamic_sampling/generated_per_trained"] == 32 / 16


def test_the_next_decision_skips_grid_points_where_the_rule_cannot_act():
    from trl_zoo.samplers.adaptive_budget import next_decision

    grid = [2, 4, 8, 16]
    assert next_decision(grid, [0.0, 1.0], 2, 16) == 4  # defaults: every point can stop or give up
    assert next_decision(grid, [0.0, 1.0], 8, 16) == 8  # spread: straight to n_stop
    assert next_decision(grid, [0.0, 0.0], 8, 4) == 4  # no spread: next point ≥ min(n_stop, n_give)
    assert next_decision(grid, [0.0, 0.0], 16, 8) == 8
    assert next_decision(grid, [0.0, 1.0], 5, 16) == 8  # n_stop off the grid: the first point above it
    assert next_decision(grid, [0.0], 2, 16) == 2  # a prompt started with one completion (the last slot)


def test_exhausted_fills_with_zero_weight_rows_or_raises():
    session = ScriptedSession("zzza")
    with pytest.warns(UserWarning, match="dynamic_sampling_max_rounds") as caught:
        sampled = run(session, budget_args(dynamic_sampling_max_rounds=1))
    assert str(caught[0].message) == FILL_WARNING
    # one round: z0 z1 z2 a0 z3 z4 z5 a1 × 2; a0, a1 trained, 12 fillers from the open prompts
    assert sampled.regrouped.group_sizes.tolist() == [2, 2]
    assert sampled.regrouped.trained.tolist() == [True] * 4 + [False] * 12
    assert sampled.metrics["dynamic_sampling/filled_rows"] == 12
    assert sampled.batch["names"][:4] == ["a0", "a0", "a1", "a1"]
    assert set(sampled.batch["names"][4:]) <= {"z0", "z1", "z2", "z3", "z4", "z5"}
    with pytest.raises(DynamicSamplingExhausted, match="dynamic_sampling_max_rounds: after 1 generation rounds"):
        run(ScriptedSession("zzza"), budget_args(dynamic_sampling_max_rounds=1, dynamic_sampling_on_exhausted="raise"))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(adaptive_budget_first_size=16), "adaptive_budget_first_size: must be ≤ G_max = 8"),
        (dict(adaptive_budget_max_size=32), "adaptive_budget_max_size: G_max = 32 must be ≤ generation_batch_size"),
        (dict(adaptive_budget_min_size=16), "adaptive_budget_min_size: must be in [adaptive_budget_first_size"),
        (dict(adaptive_budget_give_up_size=1), "adaptive_budget_give_up_size: must be in"),
        (dict(kl_placement="reward"), "per-round state of kl_placement='reward'"),
        (dict(teacher_model="x"), "per-round state of teacher_model"),
        (dict(multi_objective_aggregation="normalize_then_sum"), "normalize_then_sum"),
        (dict(advantage_estimator="optimal_baseline"), "advantage_estimator='optimal_baseline'"),
        (dict(advantage_estimator="gae"), "advantage_estimator='gae'"),
    ],
)
def test_settings_it_cannot_use_are_one_line_errors(overrides, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")) as error:
        validate_adaptive_budget(budget_args(**overrides))
    assert "\n" not in str(error.value)


def test_pass_at_k_needs_groups_larger_than_k():
    """Groups of n ≤ k have one k-subset or none: Â = 0, so every step of the defaults' groups of 2 would be void."""
    with pytest.raises(ValueError) as error:
        trl_zoo.GRPOConfig(**config_kwargs(dynamic_sampling="adaptive_budget", advantage_estimator="passk",
                                           num_generations=8, per_device_train_batch_size=16, passk_k=4))
    assert str(error.value) == (
        "passk_k: 4 is not below 2, the smallest group dynamic_sampling='adaptive_budget' trains (the first grid "
        "point ≥ adaptive_budget_min_size, else adaptive_budget_first_size), and a group of n ≤ k completions has one "
        "k-subset or none, so all its advantages are 0; set adaptive_budget_min_size ≥ 5, or set passk_k below 2."
    )
    for sizes in (dict(adaptive_budget_min_size=5), dict(adaptive_budget_first_size=3, passk_k=2)):  # 8; 3 > 2
        validate_adaptive_budget(budget_args(**{"advantage_estimator": "passk", "passk_k": 4, **sizes}))
    with pytest.raises(ValueError, match=r"^passk_k: 3 is not below 2, .*; raise adaptive_budget_max_size above 3, "):
        validate_adaptive_budget(budget_args(advantage_estimator="passk", passk_k=3, adaptive_budget_max_size=3))
    validate_adaptive_budget(budget_args(advantage_estimator="grpo_passk"))  # k = each group's size: its best gets Â


def test_config_refuses_in_one_line_naming_the_field():
    with pytest.raises(ValueError) as error:
        trl_zoo.GRPOConfig(output_dir="unused", dynamic_sampling="adaptive_budget", num_generations=4,
                           per_device_train_batch_size=8, adaptive_budget_first_size=8, use_cpu=True, bf16=False,
                           report_to="none")
    assert str(error.value).startswith("adaptive_budget_first_size: must be ≤ G_max = 4")
    assert "\n" not in str(error.value)


# ---------------------------------------------------------------------------------------------------- the trainer
def staged_reward(prompts, completions, trainer_state=None, **kwargs):
    """By the first operand a: a % 4 = 0 always 0; else the k-th completion of the prompt in this step scores by
    the pattern of class a % 4 (1: spread at 2, 2: at 4, 3: at 8), as `SEQUENCES`."""
    counts = staged_reward.counts
    rewards = []
    for prompt in prompts:
        key = (trainer_state.global_step, prompt)
        count = counts.get(key, 0)
        counts[key] = count + 1
        kind = "zabc"[int(prompt.split("+")[0]) % 4]
        rewards.append(SEQUENCES[kind][count % 8])
    return rewards


class Recording(RecordsTrainedBatches, trl_zoo.GRPOTrainer):
    """Keeps every trained generation batch and the group structure its advantages were computed over."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        sampling = self.pipeline.get("dynamic_sampling")
        regrouped_advantages = sampling.regrouped_advantages

        def recorded(batch, regrouped):
            self.regroupings.append(regrouped)
            return regrouped_advantages(batch, regrouped)

        sampling.regrouped_advantages = recorded


def grpo_by_hand(rewards: list[float]) -> list[float]:
    """TRL's advantages of one group: (R − mean) / (unbiased std + 1e-4)."""
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [(r - mean) / (std + 1e-4) for r in rewards]


def test_trainer_trains_groups_of_unequal_sizes_with_their_own_advantages():
    staged_reward.counts = {}
    trainer = make_trainer(
        Recording, trl_zoo.GRPOConfig, reward_funcs=staged_reward, dynamic_sampling="adaptive_budget",
        num_generations=8, per_device_train_batch_size=16, max_steps=3, max_completion_length=4,
        dynamic_sampling_max_rounds=20,
    )
    trainer.recorded, trainer.regroupings = [], []
    trainer.train()

    assert len(trainer.recorded) == len(trainer.regroupings) == 3
    seen_sizes = set()
    for batch, regrouped in zip(trainer.recorded, trainer.regroupings):
        assert len(batch["prompts"]) == 16  # exactly TRL's generation batch
        assert regrouped.trained.all()
        sizes = regrouped.group_sizes.tolist()
        assert sum(sizes) == 16
        start = 0
        for size in sizes:
            rows = slice(start, start + size)
            assert len(set(batch["prompts"][rows])) == 1  # a group is one prompt's completions
            rewards = regrouped.rewards[rows].tolist()
            assert max(rewards) > min(rewards)  # informative
            assert batch["advantages"][rows] == pytest.approx(grpo_by_hand(rewards), abs=1e-5)
            seen_sizes.add(size)
            start += size
        assert batch["num_items_in_batch"] == batch["mask_tokens"]
    assert {2, 4} <= seen_sizes  # groups of 2 and 4 in one run (8 when a class-3 prompt stops uncut)
    logged = [row for row in trainer.state.log_history if "dynamic_sampling/generation_rounds" in row]
    assert len(logged) == 3
    for row in logged:
        assert row["dynamic_sampling/generated_per_trained"] == row["dynamic_sampling/generation_rounds"]
        assert row["dynamic_sampling/filled_rows"] == 0


def test_the_last_allowed_round_opens_new_prompts_where_their_spread_can_be_trained():
    # n_1 = 4, n_stop = 8, n_give = 4, 2 rounds. Round 1: z0 b0 c0 z1 × 4 (b0 spread at 4; the others given up).
    # Round 2, the last: b0 + 4 (stops at 8), then new prompts open with 8, not 4: b1 × 8 (spread, trained), c1 × 4
    # (the last slots). Opened with 4, b1's spread would show but could not be topped up: 8 filler rows.
    session = ScriptedSession("zbc")
    sampled = run(session, budget_args(adaptive_budget_first_size=4, adaptive_budget_min_size=8,
                                       adaptive_budget_give_up_size=4, dynamic_sampling_max_rounds=2))
    assert len(session.rounds) == 2
    assert sampled.batch["names"] == ["b0"] * 8 + ["b1"] * 8
    assert sampled.batch["order"][8:] == [(1, row) for row in range(4, 12)]
    assert sampled.regrouped.group_sizes.tolist() == [8, 8]
    assert sampled.metrics["dynamic_sampling/filled_rows"] == 0
    assert sampled.metrics["dynamic_sampling/given_up"] == 4  # z0 c0 z1 after 4, c1 after its 4


def test_the_last_round_changes_nothing_when_a_prompt_stops_at_its_first_size():
    from trl_zoo.samplers.adaptive_budget import PromptSource, plan_round

    session = ScriptedSession("ab")
    plan, _ = plan_round([], PromptSource(session), [2, 4, 8], 16, 2, 8, last=True)
    assert [k for _, k in plan] == [2] * 8
    plan, _ = plan_round([], PromptSource(ScriptedSession("ab")), [2, 4, 8], 16, 8, 4, last=True)
    assert [k for _, k in plan] == [8, 8]
