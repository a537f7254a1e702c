"""Trainer hook: a learned critic V(s_t) for PPO with GAE and VAPO, at the trainer's hook points.

Active when the advantage estimator declares ``needs=("values",)`` (``advantage_estimator="gae"``): the constructor
then builds the critic, `trl_zoo.hooks.critic_component.Critic` (its own LoRA adapter and head, or a head, on the
policy's shared frozen base; its weights, passes, loss and optimizer group are described there), as
``self.critic``; without such an estimator ``self.critic`` is None and every hook point is the trainer's.
The formulas are in `trl_zoo/critic.py`. The hook points:

Generation side (the generation seam's hook points around the advantage hook's `_replace_advantages`): before it
(`_before_advantages`), a no-grad value pass (`_generation_pass("critic_values")`) stores ``old_values`` (B, T) in the
batch; the advantage hook hands them to the estimator as ``AdvantageInputs.values`` over the global batch; after it
(`_after_advantages`, from the estimator's inputs in `scored.advantage_inputs`), the value targets
(``value_targets``, Monte-Carlo λ = 1 during value pre-training) and, for VAPO's positive-example loss,
``positive_example`` (task reward > threshold) are added per row. They travel with the batch through TRL's shuffling
and splitting and through dynamic sampling's regrouping.

Loss side (`compute_loss`): the policy loss as the trainer computes it (skipped while
``state.global_step < vapo_value_warmup_steps``), plus the critic's loss from the same policy forward: ``value_coef``
× the clipped value loss, plus ``vapo_positive_nll_coef`` × the positive-example NLL, each a micro-batch token mean
divided by the gradient-accumulation steps like the trainer's other auxiliary terms. In head mode `_policy_forward`
returns the backbone's last hidden states in its `PolicyForward` (``hidden_states``, detached), which the head reads
instead of a pass of its own.

Optimizer step: `create_optimizer` builds the trainer's optimizer without the critic's parameters, then adds them as
their own group; with several processes (DDP) the critic's gradients are averaged at each optimizer step
(`_on_optimizer_step`, GRADIENTS: before clipping). Checkpoints: `save_model` writes ``critic.pt`` next to the model
(each checkpoint included), `_zoo_load_optimizer_and_scheduler` loads it back when training resumes from a
checkpoint.

vLLM: `_zoo_generate` (TRL's `_generate`) keeps the value head out of TRL's weight sync, which happens inside it (the
served model has no value head).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import torch

from ..registry import ADVANTAGES
from .critic_component import VALUE_HEAD, Critic, check_saved_mode
from .generation import ScoredRound
from .loss_step import OptimizerStep, StepPhase
from .trl_access import log_metric, weight_sync_without


class CriticMixin:
    """The critic's hook points (module docstring); the critic itself is ``self.critic`` (`Critic`), None without."""

    critic: Critic | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        name = self.args.advantage_estimator
        if name is not None and "values" in ADVANTAGES.get(name).spec.needs:
            self.critic = Critic(self.model, self.accelerator, self.args, partial(log_metric, self))

    # ------------------------------------------------------------------ the critic's public names on the trainer
    @property
    def critic_mode(self) -> str | None:
        """The critic's form, "adapter" or "head"; None without a critic."""
        return None if self.critic is None else self.critic.mode

    @property
    def value_head(self) -> torch.nn.Module | None:
        return None if self.critic is None else self.critic.value_head

    @property
    def critic_parameters(self) -> list[torch.nn.Parameter]:
        """The value adapter's and the head's parameters (none without a critic)."""
        return [] if self.critic is None else self.critic.parameters

    def critic_values(self, batch: dict, grad: bool = True, hidden_states: torch.Tensor | None = None) -> torch.Tensor:
        return self.critic.values(batch, grad, hidden_states)

    def value_loss(self, inputs: dict, hidden_states: torch.Tensor | None = None, mode: str = "train") -> torch.Tensor:
        return self.critic.value_loss(inputs, hidden_states, mode)

    def critic_state_dict(self) -> dict:
        return self.critic.state_dict()

    def load_critic_state_dict(self, state: dict):
        if self.critic is None:
            check_saved_mode(state, None)
        self.critic.load_state_dict(state)

    # ------------------------------------------------------------------ generation
    def _zoo_generate(self, prompts):
        """TRL's generation, whose weight sync (inside it) pushes the policy's tensors only: vLLM serves the policy's
        architecture, which has no value head, and TRL's `sync_weights` pushes every name its vLLM generation's
        parameter iterator yields (vLLM rejects unknown ones), so, for this call, the head's are dropped there
        (`weight_sync_without`, `hooks/trl_access.py`). The value adapter is already left out by TRL's PEFT path,
        which pushes the merged policy adapter only."""
        generation = getattr(self, "vllm_generation", None)
        if generation is None or self.critic is None:
            return super()._zoo_generate(prompts)
        with weight_sync_without(generation, lambda name: f".{VALUE_HEAD}." in f".{name}"):
            return super()._zoo_generate(prompts)

    def _before_advantages(self, scored: ScoredRound) -> None:
        super()._before_advantages(scored)
        if self.critic is not None:
            with self._generation_pass("critic_values") as chunk:
                scored.batch["old_values"] = self.critic.old_values(scored.batch, chunk)

    def _after_advantages(self, scored: ScoredRound) -> None:
        super()._after_advantages(scored)
        if self.critic is not None:
            mode = "train" if self.model.training else "eval"
            self.critic.add_value_targets(scored, mode, self.critic.value_warmup(mode, self.state.global_step))

    # ------------------------------------------------------------------ loss
    def _policy_forward(self, model, inputs, compute_entropy: bool = True):
        """The loss step's policy forward; in head mode its result also carries the backbone's last hidden states
        (`PolicyForward.hidden_states`, detached), which the value head reads instead of a pass of its own."""
        if self.critic is None or self.critic.mode != "head":
            return super()._policy_forward(model, inputs, compute_entropy)
        with self.critic.keeping_hidden_states(inputs["completion_ids"].size(1)) as captured:
            forward = super()._policy_forward(model, inputs, compute_entropy)
        return replace(forward, hidden_states=torch.cat(captured)) if captured else forward

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The policy loss (none during value pre-training) plus the critic's terms, from the same policy forward."""
        if self.critic is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if return_outputs:
            raise ValueError("The GRPOTrainer does not support returning outputs")
        mode = "train" if self.model.training else "eval"
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1
        if self.critic.value_warmup(mode, self.state.global_step):
            return self.critic.loss(inputs, None, mode, accumulation)
        policy_loss, forward = self._policy_loss(model, inputs)
        return policy_loss + self.critic.loss(inputs, forward, mode, accumulation)

    # ------------------------------------------------------------------ optimizer step
    def create_optimizer(self, *args, **kwargs):
        if self.critic is None:
            return super().create_optimizer(*args, **kwargs)
        with self.critic.left_out():  # of the policy's groups
            optimizer = super().create_optimizer(*args, **kwargs)
        self.critic.add_param_groups(optimizer)
        return optimizer

    def _on_optimizer_step(self, step: OptimizerStep):
        super()._on_optimizer_step(step)
        if step.phase is StepPhase.GRADIENTS and self.critic is not None and self.accelerator.num_processes > 1:
            self.critic.average_gradients()

    # ------------------------------------------------------------------ saving and resuming
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call)
        if self.critic is not None and self.args.should_save:
            self.critic.save(output_dir or self.args.output_dir)

    def _zoo_load_optimizer_and_scheduler(self, checkpoint):
        super()._zoo_load_optimizer_and_scheduler(checkpoint)
        if self.critic is not None and checkpoint is not None:
            self.critic.load(checkpoint)
