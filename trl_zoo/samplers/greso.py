"""greso — pre-rollout prompt filtering (GRESO, arXiv:2506.02177).

A prompt whose group had no reward spread on its recent visits is likely to have none again, so it is skipped
*before* generation instead of being generated and then dropped (resample). Per prompt (keyed by `prompt_identity`,
the same on every process and after a resume) the history keeps

    z     the number of consecutive most recent visits without spread (0 after a visit with spread: not stored)
    kind  of the last zero-spread visit: "easy" or "hard"

and the prompt is generated with the exploration probability

    P(explore) = 1                       z = 0
    P(explore) = max(p_kind^z, p_floor)  z > 0          p_floor = greso_min_explore

so no prompt is banned forever. Easy or hard: a zero-spread group's common reward r is compared with the mean
reward m of all scorable completions of its generation batch; r > m is "easy", r < m "hard", and when the whole
batch scored the same (r = m) r > 0 is "easy", else "hard". With binary rewards "easy" means all right.

After each trained batch (all its generation rounds together) the exploration probabilities adapt to the shares of
easy and hard zero-spread groups among the groups generated (the GRESO authors' reference code):

    p_easy ← max(p_easy − Δ, p_floor)  if easy share ≥ t_easy,  else min(p_easy + Δ, 0.95)
    p_hard ← max(p_hard − Δ, p_floor)  if hard share ≥ t_hard,  else min(p_hard + Δ, 0.95)
    t_easy = T/3, t_hard = 2T/3                  T = greso_target_zero_spread, Δ = greso_step

(T = 0.25 split 1/3 easy, 2/3 hard, p starting at 0.5, Δ = 0.01 and the upper bound 0.95 are our reading of
the public reproduction scripts. Their lower bound is 0.05; ours, p_floor, defaults to 0.01: why, docs/formulas.md,
"GRESO pre-rollout filtering".)

The batch is filled like resample's: every generation round generates exactly one generation batch of explored
prompts (candidates come from the inputs TRL handed over, then the sampler's own prompt stream; skipped ones are
replaced by further candidates), until `num_groups` groups with spread are collected or the round cap is hit
(`dynamic_sampling_max_rounds`, `dynamic_sampling_on_exhausted`). Explored candidates left over when the batch is
full are not generated; they come round again with the stream. The skip decisions of a candidate batch are drawn
from a generator seeded with (seed, decision counter), so every process and a resumed run take the same ones.
The history, p_easy, p_hard and the counter live in the trainer's saved state. Metrics: `prompts_skipped`
(prompts skipped before generation for this batch), `p_easy`, `p_hard`, plus resample's.
"""

from __future__ import annotations

import hashlib
import json

import torch

from ..registry import SAMPLERS
from ..specs import PluginField
from .base import MAX_ROUNDS, ON_EXHAUSTED, SampledBatch, SamplingSession, fill_batch, informative_groups

MAX_EXPLORE = 0.95  # upper bound of p_easy and p_hard
EASY_SHARE_OF_TARGET = 1 / 3  # t_easy = T/3, t_hard = 2T/3

# keys of the trainer's saved state
HISTORY = "greso/history"  # prompt identity -> (z, kind), only prompts with z > 0
EXPLORE = {"easy": "greso/p_easy", "hard": "greso/p_hard"}
DECISIONS = "greso/decision_batches"  # candidate batches decided so far: seeds the next decisions


def prompt_identity(prompt) -> str:
    """sha1 of the prompt's JSON (text or chat messages)."""
    return hashlib.sha1(json.dumps(prompt, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def explore_probability(z: int, p: float, floor: float) -> float:
    """1 for z = 0, else max(p^z, floor)."""
    return 1.0 if z == 0 else max(p**z, floor)


def zero_spread_kind(common_reward: float, mean_reward: float) -> str:
    """'easy' if the group's common reward beats the batch mean, 'hard' if below; a tie (the whole batch scored the
    same) is 'easy' when the reward is positive."""
    if common_reward != mean_reward:
        return "easy" if common_reward > mean_reward else "hard"
    return "easy" if common_reward > 0 else "hard"


def updated_explore(p: float, share: float, target: float, step: float, floor: float) -> float:
    """Skip more (p − Δ, at least floor) when the zero-spread share reached its target, else less (p + Δ, at most
    0.95)."""
    return max(p - step, floor) if share >= target else min(p + step, MAX_EXPLORE)


def decision_generator(seed: int, counter: int) -> torch.Generator:
    """The generator of the `counter`-th candidate batch's skip draws: the same on every process and after a resume."""
    digest = hashlib.sha1(f"{seed}:{counter}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


class CandidatePrompts:
    """Explored prompt groups in stream order: draws candidate batches, skips per the history, queues the rest."""

    def __init__(self, session: SamplingSession, args, history: dict, explore: dict):
        self.session, self.args, self.history, self.explore = session, args, history, explore
        self.queue: list[tuple[str, list]] = []
        self.skipped = 0

    def take(self) -> tuple[str, list]:
        while not self.queue:
            self.decide(self.session.draw_prompts())
        return self.queue.pop(0)

    def decide(self, rows: list):
        """Skip or queue each prompt group of one candidate batch (all processes' rows, G consecutive per prompt)."""
        size = self.session.group_size
        groups = [rows[start : start + size] for start in range(0, len(rows), size)]
        state = self.session.state
        counter = state.get(DECISIONS, 0)
        state[DECISIONS] = counter + 1
        draws = torch.rand(len(groups), generator=decision_generator(self.args.seed, counter)).tolist()
        for group, draw in zip(groups, draws):
            identity = prompt_identity(group[0]["prompt"])
            z, kind = self.history.get(identity, (0, "hard"))
            if draw < explore_probability(z, self.explore[kind], self.args.greso_min_explore):
                self.queue.append((identity, group))
            else:
                self.skipped += 1


TARGET_ZERO_SPREAD = PluginField(
    "greso_target_zero_spread", float, 0.25,
    "greso: target share of zero-spread groups among those generated (1/3 easy, 2/3 hard); above it prompts are "
    "skipped more",
    low=0, high=1, low_open=True, high_open=True,
)
STEP = PluginField("greso_step", float, 0.01,
                   "greso: Δ by which the exploration probabilities p_easy and p_hard move per batch",
                   low=0, high=1, low_open=True, high_open=True)
INITIAL_EXPLORE = PluginField(
    "greso_initial_explore", float, 0.5, "greso: p_easy and p_hard at the start of training (≥ greso_min_explore)",
    low=0, high=MAX_EXPLORE, low_open=True,
)
MIN_EXPLORE = PluginField(
    "greso_min_explore", float, 0.01,
    "greso: the least probability with which any prompt is generated (lower bound of p_easy, p_hard and p^z). The "
    "GRESO authors' code bounds p at 0.05; 0.01 generated a third less per trained completion in benchmarks/"
    "rollout_efficiency.py at equal accuracy",
    low=0, high=MAX_EXPLORE, low_open=True,
)


def validate_greso(args) -> None:
    """p_easy and p_hard start at or above their floor (each field's own range is its declaration's)."""
    if not args.greso_min_explore <= args.greso_initial_explore:
        raise ValueError(
            f"greso_initial_explore: must be in [greso_min_explore, {MAX_EXPLORE}] = [{args.greso_min_explore}, "
            f"{MAX_EXPLORE}], got {args.greso_initial_explore}; e.g. 0.5."
        )


@SAMPLERS.register(
    "greso",
    description="skip prompts whose recent groups had no reward spread before generating, then fill like resample",
    source="GRESO, arXiv:2506.02177",
    validate=validate_greso,
    fields=(MAX_ROUNDS, ON_EXHAUSTED, TARGET_ZERO_SPREAD, STEP, INITIAL_EXPLORE, MIN_EXPLORE),
)
def greso(session: SamplingSession, args) -> SampledBatch:
    state = session.state
    history = state.setdefault(HISTORY, {})
    explore = {kind: state.get(key, args.greso_initial_explore) for kind, key in EXPLORE.items()}
    candidates = CandidatePrompts(session, args, history, explore)
    informative: list[tuple[int, int]] = []
    zero_spread = {"easy": 0, "hard": 0}
    generated = 0
    while len(informative) < session.num_groups and generated < args.dynamic_sampling_max_rounds:
        identities, rows = [], []
        for _ in range(session.num_groups):
            identity, group = candidates.take()
            identities.append(identity)
            rows += [dict(row) for row in group]
        scored = session.generate_round(rows)
        generated += 1
        common = scored.group_reward.tolist()
        for identity, spread, reward in zip(identities, scored.group_spread.tolist(), common):
            if spread:
                history.pop(identity, None)
                continue
            kind = zero_spread_kind(reward, scored.mean_reward)
            history[identity] = (history.get(identity, (0, kind))[0] + 1, kind)
            zero_spread[kind] += 1
        informative += informative_groups(session, len(session.rounds) - 1)

    sampled = fill_batch(session, args, informative)
    groups = generated * session.num_groups
    targets = {
        "easy": args.greso_target_zero_spread * EASY_SHARE_OF_TARGET,
        "hard": args.greso_target_zero_spread * (1 - EASY_SHARE_OF_TARGET),
    }
    for kind, key in EXPLORE.items():
        share = zero_spread[kind] / groups
        state[key] = updated_explore(explore[kind], share, targets[kind], args.greso_step, args.greso_min_explore)
        sampled.metrics[f"dynamic_sampling/p_{kind}"] = state[key]
    sampled.metrics["dynamic_sampling/prompts_skipped"] = float(candidates.skipped)
    return sampled
