"""Component: KL in the reward, adaptive KL coefficient and reference resets.

- ``kl_placement="reward"`` (classic RLHF, RLOO): per completion R' = R − β Σ_t KL_t, with KL_t the configured
  estimator (`kl_estimator`) of log π_old(y_t) − log π_ref(y_t) at generation time. ``reward_kl_penalty`` gives
  the per-token β·KL_t; the advantages component subtracts it from the rewards before the estimator, so the penalty
  passes through the baseline, and the trainer adds no KL term to the loss. TRL computes the reference log-probs
  because β ≠ 0.
- ``kl_target`` (adaptive β): after each optimizer step, with KL the token mean of the KL the loss step measured over
  that step's micro-batches and processes (`StepMeans`), the rule ``kl_controller`` names:
  "doubling" β ← 2β if KL > 1.5·target, β ← β/2 if KL < target/1.5; "proportional" β ← β·(1 + K·clip(KL/target
  − 1, ±0.2)).
  β is this component's (`KLControl.beta`, saved as its state "kl_coef"), read by the loss (placement "loss") and by
  the reward penalty (placement "reward").
- ``ref_reset_steps`` (ProRL, arXiv:2505.24864): every N optimizer steps the reference becomes the current policy.
  With a separate reference model its weights are copied (TRL's `SyncRefModelCallback.sync_target_model` with
  α = 1). With PEFT and no reference model, the active adapter is copied into a frozen adapter named "ref" (created
  on the first reset), which TRL's `use_adapter(model, adapter_name="ref")` then uses for the reference log-probs.
  ``ref_reset_optimizer=True`` also clears the optimizer state, as ProRL does. A generation batch already sampled
  keeps the reference log-probs it was scored with: the new reference takes effect from the next generation.

Per-step work runs at the pipeline's `on_optimizer_step` hook point, its UPDATED point (once after
every optimizer step, after the loss entry's own rule, before that step's log), so its result is logged with the
step.

Tests: tests/test_kl.py (KL in the reward, adaptive β, reference resets), tests/test_resume.py (β and the "ref" adapter
across a resume).
"""

from __future__ import annotations

import torch
from accelerate.state import AcceleratorState
from accelerate.utils import is_peft_model
from torch.distributed.tensor import DTensor
from trl.trainer.callbacks import SyncRefModelCallback

from ..hooks.component import Component
from ..hooks.model_inputs import loss_mask
from ..hooks.optimizer_step import OptimizerStep, StepPhase
from ..hooks.trl_access import log_metric
from ..kl import adaptive_kl_coefficient, proportional_kl_coefficient

REF_ADAPTER = "ref"  # the adapter name TRL's reference pass looks for


def reward_kl_penalty(trainer, output: dict, policy_logps: torch.Tensor) -> torch.Tensor | None:
    """β·KL_t per completion token (zero elsewhere), (B, T), for kl_placement="reward"; None otherwise."""
    ref_logps = output.get("ref_per_token_logps")
    if trainer.args.kl_placement != "reward" or ref_logps is None:
        return None
    per_token_kl = trainer.plan.kl_estimator(policy_logps, ref_logps)
    return trainer.kl_coefficient * per_token_kl * loss_mask(output)


class KLControl(Component):
    """Adaptive β and ProRL reference resets (see the module docstring); the KL in the reward is
    `reward_kl_penalty`, which the advantages read."""

    name = "kl_control"
    STATE_KEYS = ("kl_coef", "ref_resets")  # its saved state: the adaptive β and the reset count

    def __init__(self, trainer):
        super().__init__(trainer)
        args = trainer.args
        self.active = args.kl_target is not None or args.ref_reset_steps is not None
        if args.ref_reset_steps is not None:
            check_reference_resets(trainer)
        if args.kl_target is not None:
            self.state["kl_coef"] = float(trainer.beta)

    def owns_state(self, key: str) -> bool:
        return key in self.STATE_KEYS

    @property
    def beta(self) -> float:
        """β now: the adaptive controller's value, else the configured `beta`."""
        return self.state.get("kl_coef", self.trainer.beta)

    @property
    def reference_resets(self) -> int:
        """How many times `ref_reset_steps` has made the reference the current policy."""
        return self.state.get("ref_resets", 0)

    # ------------------------------------------------------------------ after each optimizer step
    def on_optimizer_step(self, step: OptimizerStep):
        if step.phase is not StepPhase.UPDATED:
            return
        trainer, args = self.trainer, self.trainer.args
        state, global_step, step_means = self.state, step.global_step, step.means
        if args.kl_target is not None:
            if "kl" in step_means:  # the loss step's KL(π_θ ‖ π_ref), token mean over the step
                beta, kl, target = state["kl_coef"], step_means["kl"], args.kl_target
                if args.kl_controller == "proportional":
                    beta = proportional_kl_coefficient(beta, kl, target, args.kl_controller_gain)
                else:
                    beta = adaptive_kl_coefficient(beta, kl, target)
                state["kl_coef"] = beta
            log_metric(trainer, "kl_coef", state["kl_coef"])
        if args.ref_reset_steps is not None and global_step % args.ref_reset_steps == 0:
            reset_reference(trainer)
            state["ref_resets"] = self.reference_resets + 1
            log_metric(trainer, "ref_resets", float(state["ref_resets"]))


def check_reference_resets(trainer) -> None:
    """What needs the launch: a PEFT reference adapter under ZeRO-3 (the config's own contradictions, such as beta = 0
    with a KL option, are refused when the GRPOConfig is built)."""
    deepspeed_plugin = AcceleratorState().deepspeed_plugin
    if trainer.ref_model is None and deepspeed_plugin is not None and deepspeed_plugin.zero_stage == 3:
        raise NotImplementedError(
            "ref_reset_steps: the PEFT reference adapter cannot be created and copied under DeepSpeed ZeRO-3, "
            "which partitions it across processes; use ZeRO-2, FSDP2 (configs/accelerate/fsdp2.yaml) or DDP."
        )


def reset_reference(trainer):
    """Make the reference the current policy (and clear the optimizer state if `ref_reset_optimizer`)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    if trainer.ref_model is not None:
        SyncRefModelCallback.sync_target_model(model, trainer.ref_model, alpha=1.0)
    elif is_peft_model(model):
        _copy_active_adapter_to_ref(model)
    else:
        raise RuntimeError("reset_reference: no reference model and no PEFT adapter to reset (is beta = 0?).")
    if trainer.args.ref_reset_optimizer and trainer.optimizer is not None:
        getattr(trainer.optimizer, "optimizer", trainer.optimizer).state.clear()


def _copy_active_adapter_to_ref(model):
    """Create (first time) or refresh the frozen adapter "ref" as an exact copy of the active adapter."""
    active = model.active_adapter
    if active == REF_ADAPTER:
        raise RuntimeError("reset_reference: the active adapter is the reference adapter 'ref'.")
    if REF_ADAPTER not in model.peft_config:
        model.add_adapter(REF_ADAPTER, model.peft_config[active])  # stays inactive; its weights are set below
    with torch.no_grad():
        for name, param in model.named_parameters():
            if f".{active}." in name:
                reference = model.get_parameter(name.replace(f".{active}.", f".{REF_ADAPTER}."))
                # under FSDP2 the policy adapter is sharded (a DTensor) while "ref", added after the sharding, is
                # whole on every process: gathered (a collective; every process resets at the same step)
                reference.copy_(param.full_tensor() if isinstance(param, DTensor) else param)
                reference.requires_grad_(False)
