"""The tests' one route to TRL's private names (and transformers'): what a test reads, calls or replaces inside TRL's
trainer goes through a function here named for what it does, so a TRL that renames one is a change of this file (and
of the package's door, trl_zoo/hooks/trl_access.py, whose accessors this module uses where the door has one).

tests/test_trl_access.py keeps the other test files off TRL's private names (`TESTS_TOUCHING_TRL` there: this file,
the door's own test, and tests/test_block_times.py's stand-in for TRL's profiled methods, named as TRL's).
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import trl
import trl.trainer.grpo_trainer as trl_grpo_trainer
from trl import GRPOTrainer as TRLGRPOTrainer

from trl_zoo.hooks.trl_access import (
    EntropyController,
    generation_buffer,
    micro_step,
    pad_token_id,
    set_generation_buffer,
    training_method_of,
)

__all__ = [
    "AfterGenerationBatch", "BeforeGradientNorm", "buffered_micro_batches", "compiles_on_all_devices",
    "completions_log", "drop_generation_buffer", "generate_and_score", "last_world_entropy", "mark_vllm_weights",
    "metric_values", "metrics_stand_in", "micro_step", "pad_token_id", "policy_loss", "prepare_micro_batch",
    "replace_decoding",
    "replace_every_trainers_decoding", "replace_generate_and_score", "replace_model_loading", "set_micro_step",
    "token_logps_and_entropies", "training_method",
]


# ---------------------------------------------------------------------- TRL's methods, called
def generate_and_score(trainer, inputs) -> dict:
    """TRL's generation and scoring of the generation batch `inputs`, every trl_zoo layer's hook points included: the
    batch dict TRL then shuffles and buffers."""
    return trainer._generate_and_score_completions(inputs)


def prepare_micro_batch(trainer, generation_batch) -> dict:
    """The micro-batch TRL trains on at the current micro-step; in training it generates and buffers a generation
    batch from `generation_batch` first when one is due (in eval, it generates every batch)."""
    return trainer._prepare_inputs(generation_batch)


def token_logps_and_entropies(trainer, model, input_ids, attention_mask, logits_to_keep, **options):
    """TRL's log π(y_t), entropies and MoE auxiliary loss of the last `logits_to_keep` tokens under `model`."""
    return trainer._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, **options)


def trl_own_token_logps_and_entropies(trainer, model, input_ids, attention_mask, logits_to_keep, **options):
    """The same by TRL's own method, past trl_zoo's `log_prob_pass` hook point."""
    return TRLGRPOTrainer._get_per_token_logps_and_entropies(
        trainer, model, input_ids, attention_mask, logits_to_keep, **options
    )


def policy_loss(trainer, model, inputs):
    """The policy loss of one micro-batch (the loss table's, without a critic's loss, which the `micro_batch_loss`
    hook point adds around it)."""
    return trainer._policy_loss(model, inputs)[0]


# ---------------------------------------------------------------------- TRL's state, read and set
def mark_vllm_weights(trainer, synced: bool) -> None:
    """Tell TRL's vLLM generation whether vLLM holds the current weights (`synced`: no sync before the next
    generation) or not (a sync is due)."""
    trainer._last_loaded_step = trainer.state.global_step if synced else -1


def metric_values(trainer, mode: str = "train") -> dict[str, list[float]]:
    """The values TRL has collected per metric name for `mode` since it last logged (it logs their mean)."""
    return trainer._metrics[mode]


def metrics_stand_in(accelerator) -> SimpleNamespace:
    """A stand-in trainer with an empty metric store as TRL's (`metric_values` reads it) and `accelerator`."""
    return SimpleNamespace(accelerator=accelerator, _metrics=defaultdict(lambda: defaultdict(list)))


def completions_log(trainer) -> dict:
    """TRL's completions table so far: prompts, completions, rewards per function, advantages."""
    return trainer._logs


def buffered_micro_batches(trainer) -> list[dict] | None:
    """TRL's buffered micro-batches of the current generation batch (None before the first one)."""
    return generation_buffer(trainer)


def set_micro_step(trainer, step: int) -> None:
    """TRL's micro-step counter set to `step` (its buffer kept)."""
    set_generation_buffer(trainer, generation_buffer(trainer), step=step)


def drop_generation_buffer(trainer) -> None:
    """TRL holds no buffered generation batch (as after a resume): its next training micro-step generates."""
    set_generation_buffer(trainer, None)


def last_world_entropy(trainer) -> float:
    """The last optimizer step's token-mean entropy over every process, which TRL's adaptive entropy coefficient
    follows."""
    return EntropyController(trainer).last_world_entropy


def training_method(trainer) -> tuple[str, dict]:
    """The training method TRL's model card names and its citation entry."""
    return training_method_of(trainer)


def compiles_on_all_devices(compile_config) -> bool:
    """Whether transformers compiles decoding with `compile_config` on any device (on a CPU only then)."""
    return compile_config._compile_all_devices


# ---------------------------------------------------------------------- TRL's methods, replaced
def replace_generate_and_score(trainer, replacement):
    """`trainer`'s generation and scoring of a generation batch (`generate_and_score`) is `replacement(inputs)` from
    now on; returns what it replaces."""
    replaced = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = replacement
    return replaced


def replace_decoding(trainer, replacement):
    """`trainer`'s one decoding of a batch of prompts (TRL's, below every trl_zoo layer's hook) is
    `replacement(*args, **kwargs)` from now on; returns what it replaces."""
    replaced = trainer._generate_single_turn
    trainer._generate_single_turn = replacement
    return replaced


def replace_every_trainers_decoding(monkeypatch, replacement) -> None:
    """Every TRL trainer's one decoding of a batch of prompts is `replacement` for the test."""
    monkeypatch.setattr(trl.GRPOTrainer, "_generate_single_turn", replacement)


def replace_model_loading(monkeypatch, replacement) -> None:
    """TRL's loading of a model from its name or path (the policy's and the reference's) is `replacement` for the
    test."""
    monkeypatch.setattr(trl_grpo_trainer, "create_model_from_path", replacement)


# ---------------------------------------------------------------------- trainer mixins (before the trainer class)
class AfterGenerationBatch:
    """`after_generation_batch(batch)` sees every generation batch TRL generates and scores (training and eval),
    after every trl_zoo layer, before TRL shuffles and buffers it."""

    def after_generation_batch(self, batch: dict) -> None:
        pass

    def _generate_and_score_completions(self, inputs):
        batch = super()._generate_and_score_completions(inputs)
        self.after_generation_batch(batch)
        return batch


class BeforeGradientNorm:
    """`before_gradient_norm()` runs once per optimizer step, on the step's gradients, right before transformers
    takes their norm (and before every trl_zoo layer's step hook)."""

    def before_gradient_norm(self) -> None:
        pass

    def _get_grad_norm(self, model, grad_norm=None):
        self.before_gradient_norm()
        return super()._get_grad_norm(model, grad_norm=grad_norm)
