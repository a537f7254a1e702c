"""The order of a step, in one place: trl_zoo's features as components (`Component`, hooks/component.py), the hook
points each takes part in, and the order in which they run there.

Two kinds of hook point:

    EVENT  component.hook(*args)          each taking component in the order listed; returns nothing
    WRAP   component.hook(inner, *args)   the first listed is outermost: each calls `inner(*args)` (the next one's,
                                          the innermost being TRL's or the trainer's own) and may change what goes in
                                          and what comes out; a component not taking part passes straight through

The trainer calls the hook points (trainer.py: TRL's seams; hooks/generation.py: a round and a generation batch;
hooks/loss_step.py: the loss step); nothing else calls a component's hook method. A component that is off (`active`
False once built) takes part in none.

    hook point                        kind   taking part, in order        where the trainer calls it
    ---- a generation batch (TRL's `_generate_and_score_completions`)
    generation_batch                  WRAP   dynamic_sampling             rounds → one batch (innermost: one round)
      generated_round                 WRAP   old_logps, luffy             per round: TRL's generation and scoring
        generate                      WRAP   critic, luffy                TRL's `_generate` (vLLM's weight sync)
          tokenize_prompts            WRAP   prompt_length                TRL's `_tokenize_prompts`
          generate_single_turn        WRAP   generation_speed             TRL's `_generate_single_turn` (decoding)
        scored_rewards                WRAP   rewards                      TRL's reward call, inside its round
      before_advantages               EVENT  critic, old_logps            per round, TRL's advantages in the batch
      replace_advantages              EVENT  advantages                   the estimator's Â in place of TRL's
      after_advantages                EVENT  teacher, critic, expert_sft  the round's advantages are final
    on_generation_batch               EVENT  router                       the whole batch is assembled
    ---- a micro-step (TRL's `_prepare_inputs`, `compute_loss`)
    prepare_inputs                    WRAP   old_logps, length_bucketing  TRL's buffer of micro-batches
    compute_loss                      WRAP   expert_sft, critic           innermost: the policy loss (loss_step.py)
      policy_forward                  WRAP   router, zero_advantage_skip, critic
    on_optimizer_step                 EVENT  kl_control, critic           after the loss step's own (`StepPhase`)
    ---- the run
    train                             WRAP   resume                       `Trainer.train`
    create_optimizer                  WRAP   critic                       `Trainer.create_optimizer`
    save_checkpoint                   WRAP   resume                       TRL's `_save_checkpoint`
    save_model                        WRAP   critic                       `Trainer.save_model`
    load_optimizer_and_scheduler      WRAP   resume, critic               resuming: transformers' load

`COMPONENTS` is the order in which they are built, after TRL's constructor (the features that need the model and
TRL's state); `HOOKS` is the table above, which tests/test_pipeline.py holds against this docstring, and every
component's hook methods against it.

Tests: tests/test_pipeline.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from .advantages import Advantages
from .component import Component
from .critic import CriticHooks
from .expert_sft import ExpertSFT
from .generation_speed import GenerationSpeed
from .kl_control import KLControl
from .length_bucketing import LengthBucketing
from .luffy import OffPolicyTraces
from .old_logps import OldLogps
from .prompt_length import PromptLength
from .resume import ResumableState
from .rewards import RewardChecks
from .router import RouterStats
from .sampling import DynamicSampling
from .skip_zero_advantage import ZeroAdvantageSkip
from .teacher import TeacherSignal

EVENT, WRAP = "event", "wrap"

COMPONENTS: tuple[type[Component], ...] = (
    GenerationSpeed,  # merged, autocast, compiled decoding (generation_speed.py)
    RewardChecks,  # reward shaping and NaN/±inf checks of the reward call (rewards.py)
    KLControl,  # KL in the reward, adaptive β, reference resets (kl_control.py)
    Advantages,  # the estimator table's Â (advantages.py)
    TeacherSignal,  # a teacher's λ·(log π_T − log π_old) added to Â (teacher.py)
    CriticHooks,  # the critic: values, value targets, value loss (critic.py, critic_component.py)
    ExpertSFT,  # CHORD: (1 − μ)·L_RL + μ·L_SFT on expert answers (expert_sft.py)
    OffPolicyTraces,  # LUFFY: expert traces as off-policy rollouts of each group (luffy.py)
    ZeroAdvantageSkip,  # the loss forward over rows with Â ≠ 0 (skip_zero_advantage.py)
    DynamicSampling,  # generation rounds and regrouping (sampling.py)
    RouterStats,  # MoE router statistics (router.py)
    LengthBucketing,  # micro-batches re-cut by length (length_bucketing.py)
    OldLogps,  # old log-probs only where an optimizer step needs them (old_logps.py)
    ResumableState,  # checkpoints carry trl_zoo's state (resume.py)
    PromptLength,  # prompts within the model's positions (prompt_length.py)
)

HOOKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "generation_batch": (WRAP, ("dynamic_sampling",)),
    "generated_round": (WRAP, ("old_logps", "luffy")),
    "generate": (WRAP, ("critic", "luffy")),
    "tokenize_prompts": (WRAP, ("prompt_length",)),
    "generate_single_turn": (WRAP, ("generation_speed",)),
    "scored_rewards": (WRAP, ("rewards",)),
    "before_advantages": (EVENT, ("critic", "old_logps")),
    "replace_advantages": (EVENT, ("advantages",)),
    "after_advantages": (EVENT, ("teacher", "critic", "expert_sft")),
    "on_generation_batch": (EVENT, ("router",)),
    "prepare_inputs": (WRAP, ("old_logps", "length_bucketing")),
    "compute_loss": (WRAP, ("expert_sft", "critic")),
    "policy_forward": (WRAP, ("router", "zero_advantage_skip", "critic")),
    "on_optimizer_step": (EVENT, ("kl_control", "critic")),
    "train": (WRAP, ("resume",)),
    "create_optimizer": (WRAP, ("critic",)),
    "save_checkpoint": (WRAP, ("resume",)),
    "save_model": (WRAP, ("critic",)),
    "load_optimizer_and_scheduler": (WRAP, ("resume", "critic")),
}


class Pipeline:
    """The trainer's components, built in `COMPONENTS` order, and the calls of the hook points (`HOOKS`)."""

    def __init__(self, trainer=None, components: tuple[type[Component], ...] = COMPONENTS):
        self._components: dict[str, Component] = {}
        for component_class in components if trainer is not None else ():
            self._components[component_class.name] = component_class(trainer)

    def get(self, name: str) -> Component | None:
        """The component `name` (on or off), None before the trainer is built."""
        return self._components.get(name)

    def active(self) -> list[str]:
        """The names of the components that take part in this run, in build order."""
        return [name for name, component in self._components.items() if component.active]

    def _taking_part(self, hook: str, kind: str) -> list[Callable]:
        declared_kind, names = HOOKS[hook]
        if declared_kind != kind:
            raise TypeError(f"hook point {hook!r} is an {declared_kind} hook point, called as {kind}")
        taking = [self._components.get(name) for name in names]
        return [getattr(component, hook) for component in taking if component is not None and component.active]

    def event(self, hook: str, *args) -> None:
        """Call the EVENT hook point `hook` on each taking component, in the declared order."""
        for method in self._taking_part(hook, EVENT):
            method(*args)

    def wrap(self, hook: str, innermost: Callable) -> Callable:
        """The WRAP hook point `hook` around `innermost`: the first declared component is outermost."""
        call = innermost
        for method in reversed(self._taking_part(hook, WRAP)):
            call = functools.partial(method, call)
        return call


EMPTY = Pipeline()  # the trainer's pipeline while TRL's constructor runs: every hook point passes straight through
