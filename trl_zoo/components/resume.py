"""Component: checkpoints carry trl_zoo's state, so a resumed run continues exactly where the saved one stopped.

transformers saves the model (every PEFT adapter, the frozen reference adapter "ref" included, and loads them all
back), the optimizer, the scheduler and the RNG states; TRL adds its entropy controller. What neither saves, and
this component does, in the checkpoint folder:

- ``trl_zoo_state.pt``: ``zoo_state``, every component's own state and the loss entry's, in one dict (KL control's
  adaptive ``kl_coef`` and reference-reset count, ppo_kl's β, the dynamic-sampling prompt-stream position, greso's
  prompt history, exploration probabilities and decision counter), handed back key by key to its owner, TRL's
  micro-step counter ``_step``, which decides when the next generation batch is sampled, and the settings the
  checkpoint's files are laid out by (``components/checkpoint_settings.py``);
- ``trl_zoo_buffer_{process}.pt``, one per process, only when the checkpoint falls inside a generation cycle
  (``steps_per_generation × num_iterations`` > 1 micro-steps): TRL's buffered generation batch, which the next
  steps reuse. Without it, TRL samples a fresh batch on resume and the run diverges from the uninterrupted one;
- ``trl_zoo_reference.pt``, only when a separate reference model has moved (ProRL resets or TRL's
  ``sync_ref_model``): its weights, since transformers saves only the policy.

They are written before transformers' own files (in the seam of its ``_save_checkpoint``), so a checkpoint pushed to
the Hub includes them, and read back in the seam of ``_load_optimizer_and_scheduler``, the hook transformers calls on
every resume (TRL restores its entropy controller
there too). A checkpoint without ``trl_zoo_state.pt`` (written by TRL itself) resumes with a warning: the state
starts from its initial values.

Resuming from "the last checkpoint" (``train(resume_from_checkpoint=True)``, the CLI's ``--resume_from_checkpoint
true``) takes the newest *complete* ``checkpoint-N`` folder: transformers' ``_save_checkpoint`` writes
``trainer_state.json`` last (after the model, optimizer, scheduler and RNG states; this component's files come before
them all), so a folder without it is a save that was interrupted; it is skipped with a one-line warning.

Before transformers loads anything, the checkpoint is checked for ``trainer_state.json`` and the weights, its files
for truncation, for the optimizer's and the scheduler's state, which transformers would silently start afresh
without (``components/checkpoint_integrity.py``), ``trl_zoo_state.pt`` for NaN or ±inf, and the saved settings against
the run's (``components/checkpoint_settings.py``); once it has loaded them, the weights and the optimizer state are
checked to be finite, and so are the buffered batch and the moved reference as this component loads them. Each refusal
is one line (`CheckpointError`, `CorruptCheckpointError`) naming the file or the setting and the fix, instead of an
error deep in torch or safetensors, or in generation, or at the first step.

Ctrl-C: a ``KeyboardInterrupt`` during ``train()`` propagates unchanged, after one line on stderr with the step
reached and the last complete checkpoint (``interrupt_notice = False`` turns the line off for callers that print
their own, like ``trl-zoo train``).
"""

from __future__ import annotations

import os
import re
import sys
import warnings

import torch
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..config.generation_buffer import inside_generation_cycle
from ..hooks.component import Component
from ..hooks.trl_access import generation_buffer, generation_due, micro_step, run_output_dir, set_generation_buffer
from ..run_files import torch_save
from .checkpoint_integrity import (
    CheckpointError,
    check_checkpoint,
    check_finite_file,
    check_finite_state,
    check_resumable,
    check_training_state,
    missing_rng_state,
)
from .checkpoint_settings import check_same_settings, layout_settings

STATE_FILE = "trl_zoo_state.pt"
BUFFER_FILE = "trl_zoo_buffer_{process}.pt"
REFERENCE_FILE = "trl_zoo_reference.pt"


def last_complete_checkpoint(output_dir: str, report=None) -> str | None:
    """The newest `checkpoint-N` folder of output_dir that holds `trainer_state.json` (written last by transformers'
    `_save_checkpoint`), None if there is none; newer folders without it (a save that did not finish) are skipped
    and `report` gets one line naming them."""
    if not os.path.isdir(output_dir):
        return None
    steps = {}
    for name in os.listdir(output_dir):
        match = re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)", name)
        if match and os.path.isdir(os.path.join(output_dir, name)):
            steps[name] = int(match.group(1))
    skipped = []
    for name in sorted(steps, key=steps.get, reverse=True):
        if os.path.isfile(os.path.join(output_dir, name, TRAINER_STATE_NAME)):
            if skipped and report is not None:
                report(
                    f"resume_from_checkpoint: skipped {', '.join(skipped)} (no {TRAINER_STATE_NAME}: the save did not "
                    f"finish); resuming from the last complete checkpoint, {name}."
                )
            return os.path.join(output_dir, name)
        skipped.append(name)
    return None


def interrupted_message(step: int, output_dir: str, resume_with: str = "train(resume_from_checkpoint=True)") -> str:
    """One line for Ctrl-C: the step reached and the last complete checkpoint, or that none was saved."""
    last = last_complete_checkpoint(output_dir)
    if last is None:
        return f"interrupted at step {step}; no checkpoint saved, so a new run starts from the beginning."
    return f"interrupted at step {step}; last checkpoint: {last}; resume with {resume_with}."


class Resume(Component):
    """Saves and restores trl_zoo's state with every checkpoint (see the module docstring)."""

    name = "resume"

    def train(self, inner, resume_from_checkpoint=None, *args, **kwargs):
        trainer = self.trainer
        if resume_from_checkpoint is True:  # transformers would take the highest checkpoint-N, finished or not
            resume_from_checkpoint = last_complete_checkpoint(
                trainer.args.output_dir, lambda line: warnings.warn(line, stacklevel=3)
            )
            if resume_from_checkpoint is None:
                raise ValueError(
                    f"resume_from_checkpoint: no complete checkpoint-N folder (one with {TRAINER_STATE_NAME}) in "
                    f"{trainer.args.output_dir}; train without resume_from_checkpoint or point it at a checkpoint."
                )
        if isinstance(resume_from_checkpoint, str):
            self._check_checkpoint(resume_from_checkpoint)
        try:
            return inner(resume_from_checkpoint, *args, **kwargs)
        except KeyboardInterrupt:
            if trainer.interrupt_notice:
                print(f"trl_zoo: {interrupted_message(trainer.state.global_step, trainer.args.output_dir)}",
                      file=sys.stderr)
            raise

    def save_checkpoint(self, inner, model, trial):
        trainer = self.trainer
        checkpoint_name = f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}"
        folder = os.path.join(run_output_dir(trainer, trial), checkpoint_name)
        os.makedirs(folder, exist_ok=True)
        if trainer.args.should_save:
            state = {
                "zoo_state": dict(trainer.zoo_state),
                "trl_step": micro_step(trainer),
                "settings": layout_settings(trainer),
            }
            torch_save(state, os.path.join(folder, STATE_FILE))
            if self._reference_has_moved():
                reference = trainer.accelerator.unwrap_model(trainer.ref_model)
                torch_save(reference.state_dict(), os.path.join(folder, REFERENCE_FILE))
        if not generation_due(trainer):  # the next micro-steps train on TRL's buffer
            buffer_path = os.path.join(folder, BUFFER_FILE.format(process=trainer.accelerator.process_index))
            torch_save(generation_buffer(trainer), buffer_path)
        inner(model, trial)

    def _check_checkpoint(self, checkpoint: str) -> None:
        """The checks that need no loaded state: trainer_state.json and the weights, truncated files, the optimizer's
        and scheduler's files (DeepSpeed keeps its own), trl_zoo's state finite, the layout settings."""
        trainer = self.trainer
        adapter = layout_settings(trainer)["peft_config"] is not None
        check_resumable(checkpoint, adapter, weights=not trainer.is_deepspeed_enabled)
        check_checkpoint(checkpoint)
        if not trainer.is_deepspeed_enabled:
            check_training_state(checkpoint)
        rng_state = missing_rng_state(checkpoint, trainer.args.process_index, trainer.args.world_size)
        if rng_state is not None:
            warnings.warn(
                f"resume_from_checkpoint: {rng_state} is missing (the process that wrote it may have been on another "
                f"machine), so this process resumes with other random numbers than the run would have drawn; copy "
                f"it into the checkpoint for an exact continuation.",
                stacklevel=2,
            )
        state_path = os.path.join(checkpoint, STATE_FILE)
        if os.path.isfile(state_path):
            state = torch.load(state_path, map_location="cpu", weights_only=True)
            check_finite_file(state_path, state, checkpoint)
            settings = state.get("settings", {})
            check_same_settings(checkpoint, settings, layout_settings(trainer), trainer.args.speed_recipe)

    def load_optimizer_and_scheduler(self, inner, checkpoint):
        trainer = self.trainer
        inner(checkpoint)
        if checkpoint is None:
            return
        if not trainer.is_deepspeed_enabled:
            check_finite_state(checkpoint, trainer.accelerator.unwrap_model(trainer.model), trainer.optimizer)
        state_path = os.path.join(checkpoint, STATE_FILE)
        if not os.path.isfile(state_path):
            warnings.warn(
                f"resume_from_checkpoint: {checkpoint} has no {STATE_FILE} (not written by trl_zoo); adaptive "
                f"coefficients, reference resets and the dynamic-sampling stream start from their initial values.",
                stacklevel=2,
            )
            return
        saved = torch.load(state_path, map_location=trainer.accelerator.device, weights_only=True)
        trainer.restore_zoo_state(saved["zoo_state"])
        set_generation_buffer(trainer, generation_buffer(trainer), step=saved["trl_step"])
        buffer_path = os.path.join(checkpoint, BUFFER_FILE.format(process=trainer.accelerator.process_index))
        if inside_generation_cycle(trainer.args, micro_step(trainer)):
            if not os.path.isfile(buffer_path):
                raise CheckpointError(
                    f"resume_from_checkpoint: {checkpoint} was saved inside a generation cycle but has no "
                    f"{os.path.basename(buffer_path)} for this process; resume with the same number of processes, "
                    f"and copy the file in if the process that wrote it ran on another machine."
                )
            buffer = torch.load(buffer_path, map_location=trainer.accelerator.device, weights_only=True)
            check_finite_file(buffer_path, buffer, checkpoint)
            set_generation_buffer(trainer, buffer)
        reference_path = os.path.join(checkpoint, REFERENCE_FILE)
        if trainer.ref_model is not None and os.path.isfile(reference_path):
            weights = torch.load(reference_path, map_location=trainer.accelerator.device, weights_only=True)
            check_finite_file(reference_path, weights, checkpoint)
            trainer.accelerator.unwrap_model(trainer.ref_model).load_state_dict(weights)

    def _reference_has_moved(self) -> bool:
        trainer = self.trainer
        moved = trainer.pipeline.get("kl_control").reference_resets > 0 or trainer.args.sync_ref_model
        return moved and trainer.ref_model is not None
