"""The critic component: a learned critic V(s_t) for PPO with GAE and VAPO, at the pipeline's hook points.

Active when the advantage estimator declares ``needs=("values",)`` (``advantage_estimator="gae"``): it then builds the
critic, `trl_zoo.components.value_model.ValueModel` (its own LoRA adapter and head, or a head, on the policy's shared
frozen base; its weights, passes, loss and optimizer group are described there), as ``self.critic`` (the trainer's
``critic``); off otherwise. The formulas are in `trl_zoo/value_function.py`. The hook points:

Generation side, around the advantages component's `replace_advantages`: before it (`before_advantages`), a no-grad
value pass (`extra_pass("critic_values")`) stores ``old_values`` (B, T) in the batch; the advantages component
hands them to the estimator as ``AdvantageInputs.values`` over the global batch; after it (`after_advantages`, from
the estimator's inputs in `scored.advantage_inputs`), the value targets (``value_targets``, Monte-Carlo λ = 1 during
value pre-training) and, for VAPO's positive-example loss, ``positive_example`` (task reward > threshold) are added
per row. They travel with the batch through TRL's shuffling and splitting and through dynamic sampling's regrouping.

Loss side (`micro_batch_loss`): the loss inside it (the policy loss, from the trainer) (skipped while
``state.global_step < vapo_value_warmup_steps``), plus the critic's loss from the same policy forward: ``value_coef``
× the clipped value loss, plus ``vapo_positive_nll_coef`` × the positive-example NLL, each a micro-batch token mean
divided by the gradient-accumulation steps like the trainer's other auxiliary terms. In head mode `policy_forward`
returns the backbone's last hidden states in its `PolicyForward` (``hidden_states``, detached), which the head reads
instead of a pass of its own.

Optimizer step: `create_optimizer` builds the trainer's optimizer without the critic's parameters, then adds them as
their own group; with several processes (DDP) the critic's gradients are averaged at each optimizer step
(`on_optimizer_step`, GRADIENTS: before clipping). Checkpoints: `save_model` writes ``critic.pt`` next to the model
(each checkpoint included), `load_optimizer_and_scheduler` loads it back when training resumes from a checkpoint.

vLLM: `generate` (TRL's `_generate`) keeps the value head out of TRL's weight sync, which happens inside it (the
served model has no value head).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import torch

from ..hooks.component import Component
from ..hooks.generation import ScoredRound
from ..hooks.optimizer_step import OptimizerStep, StepPhase
from ..hooks.trl_access import log_metric, weight_sync_without
from .value_model import VALUE_HEAD, ValueModel


class Critic(Component):
    """The critic at the hook points (module docstring); the critic itself is `self.critic` (`ValueModel`), built when
    the advantage estimator reads values (off otherwise)."""

    name = "critic"

    def __init__(self, trainer):
        super().__init__(trainer)
        self.active = self.plan.has_critic
        self.critic = None
        if self.active:
            self.critic = ValueModel(trainer.model, trainer.accelerator, trainer.args, partial(log_metric, trainer))

    # ------------------------------------------------------------------ generation
    def generate(self, inner, prompts):
        """TRL's generation, whose weight sync (inside it) pushes the policy's tensors only: vLLM serves the policy's
        architecture, which has no value head, and TRL's `sync_weights` pushes every name its vLLM generation's
        parameter iterator yields (vLLM rejects unknown ones), so, for this call, the head's are dropped there
        (`weight_sync_without`, `hooks/trl_access.py`). The value adapter is already left out by TRL's PEFT path,
        which pushes the merged policy adapter only."""
        generation = getattr(self.trainer, "vllm_generation", None)
        if generation is None:
            return inner(prompts)
        with weight_sync_without(generation, lambda name: f".{VALUE_HEAD}." in f".{name}"):
            return inner(prompts)

    def before_advantages(self, scored: ScoredRound) -> None:
        with self.trainer.extra_pass("critic_values") as chunk:
            scored.batch["old_values"] = self.critic.old_values(scored.batch, chunk)

    def after_advantages(self, scored: ScoredRound) -> None:
        trainer = self.trainer
        mode = "train" if trainer.model.training else "eval"
        self.critic.add_value_targets(scored, mode, self.critic.value_warmup(mode, trainer.state.global_step))

    # ------------------------------------------------------------------ loss
    def policy_forward(self, inner, model, inputs, compute_entropy: bool = True):
        """The loss step's policy forward; in head mode its result also carries the backbone's last hidden states
        (`PolicyForward.hidden_states`, detached), which the value head reads instead of a pass of its own."""
        if self.critic.mode != "head":
            return inner(model, inputs, compute_entropy)
        with self.critic.keeping_hidden_states(inputs["completion_ids"].size(1)) as captured:
            forward = inner(model, inputs, compute_entropy)
        return replace(forward, hidden_states=torch.cat(captured)) if captured else forward

    def micro_batch_loss(self, inner, model, inputs):
        """The loss inside (the policy loss; not computed during value pre-training) plus the critic's terms, from
        the same policy forward."""
        trainer = self.trainer
        mode = "train" if trainer.model.training else "eval"
        accumulation = trainer.current_gradient_accumulation_steps if mode == "train" else 1
        if self.critic.value_warmup(mode, trainer.state.global_step):
            return self.critic.loss(inputs, None, mode, accumulation), None
        loss, forward = inner(model, inputs)
        return loss + self.critic.loss(inputs, forward, mode, accumulation), forward

    # ------------------------------------------------------------------ optimizer step
    def create_optimizer(self, inner, *args, **kwargs):
        with self.critic.left_out():  # of the policy's groups
            optimizer = inner(*args, **kwargs)
        self.critic.add_param_groups(optimizer)
        return optimizer

    def on_optimizer_step(self, step: OptimizerStep):
        if step.phase is StepPhase.GRADIENTS and self.trainer.accelerator.num_processes > 1:
            self.critic.average_gradients()

    # ------------------------------------------------------------------ saving and resuming
    def save_model(self, inner, output_dir: str | None = None, _internal_call: bool = False):
        inner(output_dir, _internal_call)
        if self.trainer.args.should_save:
            self.critic.save(output_dir or self.trainer.args.output_dir)

    def load_optimizer_and_scheduler(self, inner, checkpoint):
        inner(checkpoint)
        if checkpoint is not None:
            self.critic.load(checkpoint)
