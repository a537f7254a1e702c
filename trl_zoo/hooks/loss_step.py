"""The loss step: one micro-batch's policy forward, loss term, masks, KL, aggregation and metrics.

`PolicyLossStep`, a base of `trl_zoo.GRPOTrainer`, takes TRL's loss of a micro-batch: the door
(`hooks/trl_access.py`) overrides TRL's `_compute_loss` to call the `micro_batch_loss` hook point around
`_policy_loss`. It calls TRL's own methods (the log-prob pass `per_token_logps`, `get_high_entropy_mask`,
`get_off_policy_mask`) and then, in TRL's order:

    term   = LOSSES[loss_type](PolicyBatch, args)          per-token (B, T) or per-sequence (B, 1)
    term  *= off-policy mask · entropy mask · vLLM IS ratio (when enabled)
    term  += β · KL_estimator(log π_θ, log π_ref)           (kl_placement="loss", β ≠ 0)
    loss   = AGGREGATIONS[aggregation](term, mask)  − entropy bonus  + MoE aux loss

It calls two of the pipeline's hook points (hooks/pipeline.py): `policy_forward` around `_log_prob_forward`, the one
policy forward of the loss (`_policy_forward(model, inputs) -> PolicyForward`, a typed result that components extend:
router statistics, zero-advantage skipping and the critic's hidden states; none writes into `inputs`), and
`on_optimizer_step(step: OptimizerStep)` after its own work at each of three points of every optimizer step, in this
order. `_policy_loss(model, inputs) -> (loss, PolicyForward)` is the policy loss with the forward it came from, the
innermost of `micro_batch_loss` (the critic adds its terms from that forward).

    GRADIENTS   the step's gradients are accumulated, before clipping      the critic averages its gradients (DDP)
    CLIPPED     after clipping, before optimizer.step()                     the non-finite guard (may drop the update)
    UPDATED     after optimizer.step(), the scheduler and global_step += 1, before the step's log and checkpoint:
                TRL's adaptive entropy coefficient, the loss entry's own `on_optimizer_step` (ppo_kl's β), then the
                adaptive KL coefficient β (kl_target) and reference resets (components/kl_control.py)

UPDATED carries the step's token-mean metrics (`StepMeans`, the one window the adaptive-β controllers read their
measured KL from).

Tests: tests/test_parity.py (TRL's loss and gradients per micro-batch), tests/test_metrics.py (metric reductions),
tests/test_nonfinite_guard.py, tests/test_kl.py (the optimizer-step seam's order).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import torch
from torch.distributed.tensor import DTensor
from transformers import TrainerCallback
from transformers.utils import logging

from ..aggregation import AggregationContext
from ..losses.base import PolicyBatch, importance_log_weights, importance_ratio
from . import hook_points
from .model_inputs import forward_inputs, loss_mask
from .optimizer_step import OptimizerStep, StepPhase
from .trl_access import EntropyController, log_metric, per_token_logps

logger = logging.get_logger(__name__)


@dataclass(frozen=True)
class PolicyForward:
    """What the loss's one policy forward produced for a micro-batch of B rows and T completion tokens.

    `logps` (B, T) log π_θ(y_t) with grad, `entropies` (B, T) or None, `aux_loss` the MoE router loss or None: TRL's
    log-prob pass (`trl_access.per_token_logps`). Hooks extend it (`dataclasses.replace`):
    `router_logps` (B, T, L, K) the current routers' log-probs of the old top-K experts (RSPO, `components/router.py`);
    `hidden_states` (R, T, H) the backbone's last hidden states at the positions predicting the completion tokens,
    detached (the critic's head, `value_model.py`); `computed_rows` the R row indices the forward ran on (None:
    every row; `skip_zero_advantage` fills the other rows' log-probs and entropies and leaves their hidden states
    out).
    """

    logps: torch.Tensor
    entropies: torch.Tensor | None = None
    aux_loss: torch.Tensor | None = None
    router_logps: torch.Tensor | None = None
    hidden_states: torch.Tensor | None = None
    computed_rows: torch.Tensor | None = None


class PolicyLossStep:
    """The loss of one micro-batch from the loss table (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.step_means = StepMeans()
        self._step_health: dict[str, torch.Tensor] = {}  # this optimizer step's loss sum and non-finite term counts
        self.entropy_controller = EntropyController(self)
        self.add_callback(_OptimizerStepCallback(self))

    # ------------------------------------------------------------------ the per-optimizer-step seam
    def _on_optimizer_step(self, step: OptimizerStep) -> None:
        """Once at each point of every optimizer step (`StepPhase`; the order is in the module docstring): the loss
        step's own work, then the pipeline's `on_optimizer_step` hook point, whose components act on `step.phase`.
        Here: the non-finite guard (CLIPPED); TRL's adaptive entropy coefficient and the loss entry's own
        `on_optimizer_step(state, args, means) -> metrics`, whose numbers are logged with the step (UPDATED)."""
        if step.phase is StepPhase.CLIPPED:
            self._guard_nonfinite_step(step.model, step.grad_norm)
        elif step.phase is StepPhase.UPDATED:
            self._update_entropy_coefficient()
            on_optimizer_step = self.plan.loss_entry.spec.on_optimizer_step
            if on_optimizer_step is not None:
                for name, value in (on_optimizer_step(self.loss_state, self.args, step.means) or {}).items():
                    log_metric(self, name, value)
        self.pipeline.event(hook_points.ON_OPTIMIZER_STEP, step)

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.accelerator.sync_gradients:  # the last micro-batch of the optimizer step
            self._on_optimizer_step(OptimizerStep(StepPhase.GRADIENTS, self.state.global_step, model))
        return loss

    # ------------------------------------------------------------------ non-finite guard
    def _record_step_health(self, loss, terms: dict[str, torch.Tensor]):
        """Add the micro-batch's loss, and per term whether it was non-finite, to the optimizer step's window, on the
        device (no host sync: `_get_grad_norm` reads the window once per optimizer step)."""
        health = self._step_health
        health["loss"] = health.get("loss", 0.0) + loss.detach()
        for name, value in terms.items():
            health[name] = health.get(name, 0.0) + (~torch.isfinite(value.detach())).any().float()

    def _guard_nonfinite_step(self, model, grad_norm):
        """The non-finite guard (`nonfinite_policy`): the step's loss, its non-finite terms and the gradient norm,
        with one reduce and one host sync per step; a NaN or ±inf raises or drops the update."""
        health, self._step_health = self._step_health, {}
        if not health:
            return
        # fp16's loss scaler overflows on purpose and skips those steps itself: only the loss is checked then.
        if torch.is_tensor(grad_norm) and self.accelerator.scaler is None:
            norm = grad_norm.detach()
            if isinstance(norm, DTensor):  # FSDP2 clips to the global norm and returns it as a replicated DTensor
                norm = norm.full_tensor()
            health["gradient norm"] = norm.float().reshape(())
        names = list(health)
        stats = torch.stack([health[name].float().reshape(()) for name in names])
        values = dict(zip(names, self.accelerator.reduce(stats, reduction="sum").tolist()))
        loss = values.pop("loss") / self.accelerator.num_processes
        norm = values.pop("gradient norm", 0.0) / self.accelerator.num_processes
        bad_terms = [name for name, count in values.items() if count != 0]
        if not bad_terms and math.isfinite(loss) and math.isfinite(norm):
            return
        message = (
            f"step {self.state.global_step + 1}: loss {loss:.6g}, gradient norm {norm:.6g}, non-finite term: "
            f"{', '.join(bad_terms) or 'unknown'} (loss_type={self.args.loss_type})"
        )
        if self.args.nonfinite_policy == "raise":
            raise FloatingPointError(
                f"Non-finite optimizer step at {message}; set nonfinite_policy='skip' to drop such updates, or lower "
                "learning_rate and check the rewards."
            )
        logger.warning(f"Skipped the optimizer update at {message} (nonfinite_policy='skip').")
        model.zero_grad(set_to_none=True)  # no gradient: the optimizer leaves every parameter as it is
        log_metric(self, "nonfinite_skipped_steps", 1.0)

    # ------------------------------------------------------------------ loss
    def _policy_forward(self, model, inputs, compute_entropy: bool = True) -> PolicyForward:
        """The policy forward of the micro-batch `inputs` (the loss's, which `_policy_loss` runs itself): the
        pipeline's `policy_forward` hook point around TRL's log-prob pass (`_log_prob_forward`). A component there may
        slice the rows, or return what else the forward produced in the result (`PolicyForward`); `inputs` is never
        written."""
        return self.pipeline.wrap(hook_points.POLICY_FORWARD, self._log_prob_forward)(model, inputs, compute_entropy)

    def _log_prob_forward(self, model, inputs, compute_entropy: bool = True) -> PolicyForward:
        """TRL's log-prob pass over the micro-batch `inputs`."""
        input_ids, attention_mask, logits_to_keep, multimodal = forward_inputs(inputs)
        logps, entropies, aux_loss = per_token_logps(
            self,
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            compute_entropy=compute_entropy,
            compute_aux_loss=self.aux_loss_enabled,
            **multimodal,
        )
        return PolicyForward(logps, entropies, aux_loss)

    def _policy_batch(self, inputs, forward: PolicyForward) -> PolicyBatch:
        mask = loss_mask(inputs)
        advantages = inputs["advantages"]
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        old_logps = inputs.get("old_per_token_logps")
        sampling_ratio = None
        logps = forward.logps
        if self.use_vllm and self.vllm_importance_sampling_correction:
            sampling_ratio = inputs.get("importance_sampling_ratio")
            if sampling_ratio is None:  # deferred by skip_on_policy_old_logps: π_old = π_θ
                sampling_ratio = self.pipeline.get("old_logps").deferred_sampling_ratio(inputs, logps)
        extras = inputs if forward.router_logps is None else {**inputs, "router_logps": forward.router_logps}
        return PolicyBatch(
            logps=logps,
            old_logps=logps.detach() if old_logps is None else old_logps,
            advantages=advantages,
            mask=mask,
            ref_logps=inputs.get("ref_per_token_logps"),
            entropies=forward.entropies,
            sampling_ratio=sampling_ratio,
            extras=extras,
            state=self.loss_state,
        )

    @property
    def kl_coefficient(self) -> float:
        """β now, KL control's (`KLControl.beta`: the adaptive controller's value, else the configured `beta`)."""
        return self.pipeline.get("kl_control").beta

    @property
    def zoo_state(self) -> Mapping:
        """What a checkpoint saves of trl_zoo's algorithm state, read-only: every component's own (`Component.state`)
        and the loss entry's (`loss_state`), in one dict of distinct keys."""
        return MappingProxyType({**self.pipeline.saved_state(), **self.loss_state})

    def restore_zoo_state(self, saved: Mapping) -> None:
        """Each saved key back to its owner: the component that `owns_state` it, else the loss entry's state."""
        self.loss_state.update(self.pipeline.restore_state(saved))

    def _policy_loss(self, model, inputs) -> tuple[torch.Tensor, PolicyForward]:
        """The policy loss of the micro-batch (module docstring) and the policy forward it was computed from."""
        mode = "train" if self.model.training else "eval"
        forward = self.pipeline.wrap(hook_points.POLICY_FORWARD, self._log_prob_forward)(model, inputs, True)
        logps, entropies, aux_loss = forward.logps, forward.entropies, forward.aux_loss
        batch = self._policy_batch(inputs, forward)
        mask = batch.mask

        entropy_mask = None
        if self.top_entropy_quantile < 1.0:
            entropy_mask = self.get_high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile)

        term = self.plan.loss_entry.fn(batch, self.args)
        per_token_loss = term.loss
        if self.off_policy_mask_threshold is not None:
            sampling_logps = inputs.get("sampling_per_token_logps", batch.old_logps)
            per_token_loss = per_token_loss * self.get_off_policy_mask(
                batch.advantages, logps, sampling_logps, mask, self.off_policy_mask_threshold
            )
        if entropy_mask is not None:
            per_token_loss = per_token_loss * entropy_mask
        if batch.sampling_ratio is not None and not self.plan.loss_entry.spec.applies_sampling_ratio:
            per_token_loss = per_token_loss * batch.sampling_ratio

        per_token_kl = None
        if self.beta != 0.0 and batch.ref_logps is not None:
            per_token_kl = self.plan.kl_estimator(logps, batch.ref_logps)
            if self.args.use_bias_correction_kl:
                log_weights = importance_log_weights(batch, self.importance_sampling_level)
                per_token_kl = per_token_kl * importance_ratio(log_weights)
            if self.args.kl_placement == "loss" and not self.plan.loss_entry.spec.applies_kl:
                per_token_loss = per_token_loss + self.kl_coefficient * per_token_kl

        context = AggregationContext(
            accumulation_steps=self.current_gradient_accumulation_steps if mode == "train" else 1.0,
            steps_per_generation=self.args.steps_per_generation,
            num_processes=self.accelerator.num_processes,
            num_items_in_batch=inputs.get("num_items_in_batch"),
            max_completion_length=self.max_completion_length,
            training=mode == "train",
        )
        loss, policy_loss = self.plan.aggregate(per_token_loss, mask, context)
        terms = {"policy loss": loss}
        if per_token_kl is not None:
            terms["kl"] = torch.where(mask > 0, per_token_kl, 0.0).sum()

        if self.entropy_controller.bonus_enabled:
            effective_mask = mask if entropy_mask is None else mask * entropy_mask
            terms["entropy bonus"] = self._entropy_bonus(entropies, effective_mask, mode, context.accumulation_steps)
            loss = loss - terms["entropy bonus"]
            log_metric(self, "policy_loss", self.accelerator.gather(policy_loss).nanmean().item(), mode)
        if self.aux_loss_enabled:
            terms["aux loss"] = aux_loss
            loss = loss + self.router_aux_loss_coef * aux_loss / context.accumulation_steps
            log_metric(self, "aux_loss", self.accelerator.gather_for_metrics(aux_loss).mean().item(), mode)
        if mode == "train":
            self._record_step_health(loss, terms)

        metrics = {} if per_token_kl is None else {"kl": per_token_kl}
        metrics["entropy"] = entropies
        world_totals = self._log_term_metrics({**metrics, **term.metrics}, mask, mode)
        if mode == "train":
            for name, (total, count) in world_totals.items():
                self.step_means.add(name, total, count)
        return loss, forward

    def _entropy_bonus(self, entropies, effective_mask, mode: str, accumulation_steps: float):
        """TRL's entropy bonus: coef · mean entropy over the effective mask; in adaptive mode the micro-batch's
        (Σ m·H, Σ m) join the optimizer step's window, which `_update_entropy_coefficient` reads."""
        entropy = (entropies * effective_mask).sum() / effective_mask.sum().clamp(min=1.0) / accumulation_steps
        controller = self.entropy_controller
        if self.use_adaptive_entropy:
            coef = self.entropy_coef if controller.last_world_entropy <= self.args.entropy_target else 0.0
        else:
            coef = self.entropy_coef
        if self.use_adaptive_entropy and mode == "train":
            stats = torch.stack([(entropies * effective_mask).sum(), effective_mask.sum()]).detach()
            controller.window = stats if controller.window is None else controller.window + stats
        return coef * entropy

    def _update_entropy_coefficient(self):
        """TRL's adaptive entropy controller, once per optimizer step (UPDATED): with H̄ the step's token-mean
        entropy over every process, coef ← clip(coef ± entropy_coef_delta, entropy_coef_min, entropy_coef_max), up
        when H̄ ≤ entropy_target; the coefficient is logged with the step (also a fixed one)."""
        controller = self.entropy_controller
        if not controller.bonus_enabled:
            return
        if self.use_adaptive_entropy and controller.window is not None:
            totals = self.accelerator.reduce(controller.window, reduction="sum")
            world_entropy = (totals[0] / totals[1].clamp(min=1.0)).item()
            target, delta = self.args.entropy_target, self.args.entropy_coef_delta
            coef = self.entropy_coef + (delta if world_entropy <= target else -delta)
            self.entropy_coef = min(max(coef, self.args.entropy_coef_min), self.args.entropy_coef_max)
            controller.last_world_entropy = world_entropy
            controller.window = None
        log_metric(self, "entropy_coef", self.entropy_coef)

    # ------------------------------------------------------------------ metrics
    def _log_term_metrics(self, metrics: dict, mask: torch.Tensor, mode: str) -> dict[str, tuple[float, float]]:
        """Log each metric over every process with one reduce for the means and one gather for the extremes; return
        the world (Σ m·x, Σ m) of each mean.

        A metric is a (B, T) per-token or (B, 1) per-sequence tensor, optionally tagged `(reduction, tensor)`:
        "mean" (default: token mean over the mask; a (B, 1) value counts once per sequence), "min"/"max" (over
        unmasked tokens), "min_seq"/"max_seq" (per-sequence token mean first, then the extreme over sequences).
        """
        means, extremes, world_totals = {}, {}, {}
        for name, value in metrics.items():
            reduction, value = value if isinstance(value, tuple) else ("mean", value)
            value = value.detach().float()
            if reduction == "mean":
                means[name] = _masked_sum_and_count(value, mask)
            else:
                extremes[name] = (reduction, _local_extreme(reduction, value, mask))
        if means:
            totals = self.accelerator.reduce(torch.stack(list(means.values())), reduction="sum")
            rows = torch.cat([(totals[:, 0] / totals[:, 1].clamp(min=1.0)).unsqueeze(1), totals], dim=1).tolist()
            for name, (mean, total, count) in zip(means, rows):
                log_metric(self, name, mean, mode)
                world_totals[name] = (total, count)
        if extremes:
            # Every extreme as a maximum (minima negated), so one gather and one amax cover them all.
            signs = torch.tensor([-1.0 if reduction.startswith("min") else 1.0 for reduction, _ in extremes.values()])
            local = torch.stack([extreme for _, extreme in extremes.values()]) * signs.to(mask.device)
            world = self.accelerator.gather(local.unsqueeze(0)).amax(dim=0).cpu() * signs
            for name, value in zip(extremes, world.tolist()):
                log_metric(self, name, value if abs(value) != float("inf") else float("nan"), mode)
        return world_totals


def _masked_sum_and_count(value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if value.shape[1] == 1:
        return torch.stack([value.sum(), torch.tensor(float(value.shape[0]), device=value.device)])
    return torch.stack([(value * mask).sum(), mask.sum().float()])


def _local_extreme(reduction: str, value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """This process's min or max (±inf when it has nothing to offer, so other processes win the reduction)."""
    is_min = reduction.startswith("min")
    empty = float("inf") if is_min else float("-inf")
    if reduction.endswith("_seq"):
        per_seq = value.squeeze(1) if value.shape[1] == 1 else (value * mask).sum(-1) / mask.sum(-1)
        candidates = per_seq.nan_to_num(nan=empty, posinf=empty, neginf=empty)
    else:
        candidates = value.expand_as(mask).masked_fill(mask == 0, empty)
        candidates = candidates.masked_fill(~torch.isfinite(candidates), empty)
    if candidates.numel() == 0:
        return torch.tensor(empty, device=value.device)
    return candidates.amin() if is_min else candidates.amax()


class StepMeans:
    """The window of one optimizer step: each training metric's mean over the step's micro-batches and processes,

        x̄ = Σ_{micro-batches} Σ_{i,t} m·x / Σ_{micro-batches} Σ_{i,t} m       (a (B, 1) metric counts per sequence)

    fed by the loss step with the sums it already reduced for logging (no extra sync). The measured KL of the
    adaptive-β controllers (`kl`, `ppo_kl/kl`) is read from it."""

    def __init__(self):
        self._totals: dict[str, list[float]] = {}

    def add(self, name: str, total: float, count: float):
        totals = self._totals.setdefault(name, [0.0, 0.0])
        totals[0] += total
        totals[1] += count

    def pop(self) -> dict[str, float]:
        """The step's means (metrics with a count), and an empty window for the next step."""
        means = {name: total / count for name, (total, count) in self._totals.items() if count > 0}
        self._totals = {}
        return means


class _OptimizerStepCallback(TrainerCallback):
    """transformers calls `on_step_end` once after every optimizer step, before that step's log and checkpoint."""

    def __init__(self, trainer):
        self._trainer = weakref.ref(trainer)

    def on_train_begin(self, args, state, control, **kwargs):
        trainer = self._trainer()
        if trainer is not None:
            trainer.step_means.pop()  # loss calls made outside training (tests, evaluation) belong to no step
            trainer._step_health = {}
            trainer.entropy_controller.window = None

    def on_step_end(self, args, state, control, **kwargs):
        trainer = self._trainer()
        if trainer is not None:
            step = OptimizerStep(StepPhase.UPDATED, state.global_step, means=trainer.step_means.pop())
            trainer._on_optimizer_step(step)
