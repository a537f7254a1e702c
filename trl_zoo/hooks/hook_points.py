"""The step as one call tree: every hook point of the pipeline, the components taking part in it in their order, where
the trainer calls it, and the hook points called while it runs (`inside`). `STEP` is that table, the one place it is
written (docs/architecture.md and hooks/generation.py point here); tests/test_pipeline.py records a real run with
the components it can turn on and holds every hook point's recorded parent to its place here.

Three kinds of hook point (hooks/pipeline.py calls them):

    EVENT  component.hook(*args)          each taking component in the order listed; returns nothing
    WRAP   component.hook(inner, *args)   the first listed is outermost: each calls `inner(*args)` (the next one's,
                                          the innermost being TRL's or the trainer's own) and may change what goes in
                                          and what comes out (the critic's, during value pre-training, does not
                                          call it: no policy loss); a component not taking part passes straight
                                          through
    CHAIN  component.hook(value) -> value each in the order listed, on what the one before returned

A private method `_x` in `called_from` is TRL's (or transformers'), overridden in the door (hooks/trl_access.py) to
call its hook point directly.

Tests: tests/test_pipeline.py (a recorded run against the nesting; each component's hook methods against its rows).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

EVENT, WRAP, CHAIN = "event", "wrap", "chain"


@dataclass(frozen=True)
class HookPoint:
    """One hook point: its name (a taking component's method of that name), kind, the components taking part in
    order, where the trainer calls it, and the hook points called while it runs."""

    name: str
    kind: str
    taking_part: tuple[str, ...]
    called_from: str
    inside: tuple[HookPoint, ...] = ()


# TRL's log-prob pass, the one hook point called inside several (a round's old and reference log-probs, the teacher's,
# CHORD's expert answers, the loss's policy forward; also old_logps' deferred ones in `new_buffer` and the ‖s‖² pass
# of `replace_advantages`): listed inside each hook point a recorded run calls it in, the same hook point
LOG_PROB_PASS = HookPoint(
    "log_prob_pass",
    WRAP,
    ("prompt_once",),
    "TRL's `_get_per_token_logps_and_entropies`: every log-prob pass",
)
TOKENIZE_PROMPTS = HookPoint(
    "tokenize_prompts",
    WRAP,
    ("prompt_length",),
    "TRL's `_tokenize_prompts` (also from the teacher's `after_advantages`, for its template's prompts)",
)
GENERATE_SINGLE_TURN = HookPoint(
    "generate_single_turn", WRAP, ("generation_speed",), "TRL's `_generate_single_turn` (decoding)"
)
GENERATE = HookPoint(
    "generate",
    WRAP,
    ("critic", "luffy"),
    "TRL's `_generate` (vLLM's weight sync inside)",
    (TOKENIZE_PROMPTS, GENERATE_SINGLE_TURN),
)
SCORED_REWARDS = HookPoint(
    "scored_rewards", WRAP, ("rewards",), "TRL's `_calculate_rewards`, (N, K) rewards over every process"
)
GENERATED_ROUND = HookPoint(
    "generated_round",
    WRAP,
    ("old_logps", "luffy"),
    "per round: TRL's `_generate_and_score_completions` itself",
    (GENERATE, SCORED_REWARDS, LOG_PROB_PASS),
)
BEFORE_ADVANTAGES = HookPoint(
    "before_advantages", EVENT, ("critic", "old_logps"), "per round, TRL's advantages in the batch"
)
REPLACE_ADVANTAGES = HookPoint("replace_advantages", EVENT, ("advantages",), "per round: the estimator's Â")
AFTER_ADVANTAGES = HookPoint(
    "after_advantages",
    EVENT,
    ("teacher", "critic", "expert_sft"),
    "per round, its advantages final",
    (LOG_PROB_PASS,),
)
GENERATION_BATCH = HookPoint(
    "generation_batch",
    WRAP,
    ("dynamic_sampling",),
    "TRL's `_generate_and_score_completions` (from its `_prepare_inputs`); innermost one round, a `ScoredRound`",
    (GENERATED_ROUND, BEFORE_ADVANTAGES, REPLACE_ADVANTAGES, AFTER_ADVANTAGES),
)
ON_GENERATION_BATCH = HookPoint("on_generation_batch", EVENT, ("router",), "the generation batch, assembled")
NEW_BUFFER = HookPoint(
    "new_buffer",
    CHAIN,
    ("length_bucketing", "prompt_once", "old_logps"),
    "TRL's `_prepare_inputs`, once it built a new buffer of micro-batches (training)",
)
POLICY_FORWARD = HookPoint(
    "policy_forward",
    WRAP,
    ("router", "skip_zero_advantage", "critic"),
    "the loss step's one policy forward",
    (LOG_PROB_PASS,),
)
MICRO_BATCH_LOSS = HookPoint(
    "micro_batch_loss",
    WRAP,
    ("expert_sft", "critic"),
    "TRL's `_compute_loss`; innermost the policy loss, (loss, `PolicyForward`)",
    (POLICY_FORWARD, LOG_PROB_PASS),
)
ON_OPTIMIZER_STEP = HookPoint(
    "on_optimizer_step", EVENT, ("kl_control", "critic"), "each optimizer-step point, after the loss step's own"
)
CREATE_OPTIMIZER = HookPoint("create_optimizer", WRAP, ("critic",), "`Trainer.create_optimizer`")
LOAD_OPTIMIZER_AND_SCHEDULER = HookPoint(
    "load_optimizer_and_scheduler",
    WRAP,
    ("resume", "critic"),
    "transformers' `_load_optimizer_and_scheduler` (resuming)",
)
SAVE_MODEL = HookPoint("save_model", WRAP, ("critic",), "`Trainer.save_model`")
SAVE_CHECKPOINT = HookPoint("save_checkpoint", WRAP, ("resume",), "TRL's `_save_checkpoint`", (SAVE_MODEL,))
TRAIN = HookPoint(
    "train",
    WRAP,
    ("resume",),
    "`Trainer.train`",
    (
        CREATE_OPTIMIZER,
        LOAD_OPTIMIZER_AND_SCHEDULER,
        GENERATION_BATCH,
        ON_GENERATION_BATCH,
        NEW_BUFFER,
        MICRO_BATCH_LOSS,
        ON_OPTIMIZER_STEP,
        SAVE_CHECKPOINT,
    ),
)

STEP: tuple[HookPoint, ...] = (TRAIN,)  # the table: hook points nested as they call each other


def walk(points: tuple[HookPoint, ...] = STEP, parent: HookPoint | None = None) -> Iterator[tuple[HookPoint, Any]]:
    """(hook point, the hook point it is called inside, None at the top) of the table, parents first."""
    for point in points:
        yield point, parent
        yield from walk(point.inside, point)


def rows(points: tuple[HookPoint, ...] = STEP, depth: int = 0) -> Iterator[str]:
    """The table as indented text lines: name, kind, taking part, where the trainer calls it."""
    for point in points:
        name = "  " * depth + point.name
        yield f"{name:<34}{point.kind.upper():<7}{', '.join(point.taking_part):<38}{point.called_from}"
        yield from rows(point.inside, depth + 1)


HOOKS: dict[str, HookPoint] = {point.name: point for point, _ in walk()}
