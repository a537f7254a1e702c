"""The door: the one module of trl_zoo that reads or writes TRL's and transformers' private names, overrides or calls
their private methods, or swaps one of their attributes (and the one place that calls a private method of torch's:
`ignored_by_ddp`). Every other module reaches TRL through what is defined here
(tests/test_trl_access.py walks the package's syntax trees and keeps it so), so the next TRL is a change of this file.

What trl_zoo relies on is listed here once and checked against the installed TRL when a trainer is built
(`check_installed_trl`): a missing or changed name stops with one line naming it, the installed TRL version and the
tested one (`TESTED_TRL`); a TRL of another minor version that has them all gets one warning (`untested_trl_warned`).
TRL's vLLM module is imported, and its names checked, only for a run that uses vLLM. Before any of that, at import,
`trl.GRPOTrainer` must be TRL's own class (`check_trainer_class`): `import unsloth` before trl_zoo replaces it with a
rewritten copy whose loss is Unsloth's, and trl_zoo refuses it in one line rather than train with a loss it ignores.

Methods. `TRLSeams`, the base of every layer, alone overrides TRL's private methods that trl_zoo hooks: each calls
its hook point (hooks/hook_points.py, `STEP`) around TRL's own method, so the first component is one frame away;
three hand over to a layer above: `_generate_and_score_completions` and `_calculate_rewards` to the generation seam
(`_generation_batch`, `_round_rewards_of`, hooks/generation.py, whose rounds are `trl_generated_round`),
`_get_grad_norm` to the loss step's CLIPPED point (`_on_optimizer_step`, hooks/loss_step.py); `_compute_loss` is the
`micro_batch_loss` hook point around the loss step's `_policy_loss`; `_prepare_inputs` hands a new buffer of
micro-batches through `new_buffer`; `_get_per_token_logps_and_entropies` is the `log_prob_pass` hook point. TRL's
private methods the components call are functions here (`per_token_logps`, `tokenized_prompts`, `run_output_dir`,
`without_unused_columns`). `RELIED_METHODS` holds each one's parameters.

State. `log_metric` (TRL's `_metrics`, which TRL averages and logs at each logging step), `replace_logged_advantages`
(`_logs["advantages"]`, the completions table), `generation_buffer` / `micro_step` / `set_generation_buffer` (TRL's
micro-batches of one generation batch, `_buffered_inputs`, and its micro-step counter `_step`), `pad_token_id`
(`_tokenizer`), `EntropyController` (TRL's adaptive entropy coefficient's state), `set_training_method` /
`training_method_of` (the model card's `_name` and `_paper`), `switch_on_compiled_decoding` (TRL's generation
config, built with compilation off).

Rules. TRL's rules that trl_zoo follows, which TRL writes inline: when its `_prepare_inputs` generates rather than
trains on its buffer (`generation_due`), which buffered micro-batch a micro-step trains on (`buffered_micro_batch`),
and when its `_generate_and_score_completions` computes old log-probs (`trl_computes_old_logps`). Each applies to a
trainer's TRL state the rule written once in config/generation_buffer.py in the config's numbers alone, where the
config's checks read it too (the config layer imports no hook).

Results. `generate_result` / `as_generate_result`: TRL's `_generate` result by field name (`GENERATE_RESULT`, its
order), a one-line drift error when the installed TRL returns another layout.

Swaps, for the duration of one call of TRL's, undone however the call ends (an exception included): `swapped(owner,
name, value)`, or `restored(owner, name)` around code of TRL's that sets the attribute itself. TRL 1.16 offers no
public or overridable method for the five trl_zoo makes (`trainer.reward_funcs`, the LM head's `forward`,
`create_model_from_path`, `vllm_generation._iter_named_params`, the old-log-prob pass with its importance-sampling
flag); each, and why: docs/architecture.md, "Where trl_zoo still writes TRL's objects".
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
import trl
import trl.trainer.grpo_trainer as trl_grpo_trainer
from torch.nn.parallel import DistributedDataParallel
from transformers import CompileConfig
from trl import GRPOTrainer as TRLGRPOTrainer

from ..config.generation_buffer import buffer_entry, inside_generation_cycle, old_logps_pass_runs
from . import hook_points
from .optimizer_step import OptimizerStep, StepPhase

TESTED_TRL = "1.16"  # the TRL minor version trl_zoo is tested with (pyproject.toml's `test` extra pins it)

# TRL's trainer methods trl_zoo overrides (in `TRLSeams`) or calls, with the parameters it relies on
RELIED_METHODS = {
    "_generate_and_score_completions": "(self, inputs)",
    "_calculate_rewards": "(self, inputs, prompts, completions, completion_ids_list)",
    "_prepare_inputs": "(self, generation_batch)",
    "_generate": "(self, prompts)",
    "_generate_single_turn": "(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images)",
    "_tokenize_prompts": "(self, prompts)",
    "_compute_loss": "(self, model, inputs)",
    "_get_grad_norm": "(self, model, grad_norm)",
    "_save_checkpoint": "(self, model, trial)",
    "_load_optimizer_and_scheduler": "(self, checkpoint)",
    "_get_per_token_logps_and_entropies": (
        "(self, model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss, "
        "pixel_values, image_grid_thw, num_images, pixel_attention_mask, spatial_shapes, num_tiles, image_sizes, "
        "token_type_ids, mm_token_type_ids, image_position_ids)"
    ),
    "_get_output_dir": "(self, trial)",
    "_remove_unused_columns": "(self, dataset, description)",
}
# the order of TRL's calls inside its methods that trl_zoo relies on: (method, callee, (call, ...)): the calls appear
# in this order in the method's source, and the first is the method's first call of `callee`
# (`old_logps_pass_skipped`: the old-log-prob pass comes before the reference's)
RELIED_CALLS = (
    ("_generate_and_score_completions", "self._get_per_token_logps_and_entropies(", (
        "old_per_token_logps, _, _ = self._get_per_token_logps_and_entropies(",
        "ref_per_token_logps, _, _ = self._get_per_token_logps_and_entropies(",
    )),
)
# TRL's trainer class attributes trl_zoo reads or sets
RELIED_CLASS_ATTRIBUTES = ("_name", "_paper", "_tag_names")
# TRL's trainer attributes its constructor sets, which trl_zoo reads or writes
RELIED_STATE = (
    "_metrics", "_logs", "_buffered_inputs", "_step", "_tokenizer",
    "_entropy_bonus_enabled", "_entropy_window_stats", "_last_world_entropy",
    "eos_token_ids",  # public: the truncation penalty reads it (components/rewards.py)
    "vllm_importance_sampling_correction",  # public: off while a round skips the old-log-prob pass
)
# elsewhere in TRL and transformers: (owner, name, parameters or None for an attribute)
RELIED_ELSEWHERE = (
    (trl_grpo_trainer, "create_model_from_path", "(model_id, architecture, **kwargs)"),
    (CompileConfig, "_compile_all_devices", None),
)
# the same, checked (and TRL's vLLM module imported) only when the run generates with vLLM
RELIED_WITH_VLLM = (("trl.generation.vllm_generation.VLLMGeneration", "_iter_named_params", "(self)"),)


class TRLDriftError(RuntimeError):
    """The installed TRL lacks or changed a name trl_zoo relies on."""


TRL_TRAINER_MODULE = "trl.trainer.grpo_trainer"  # where TRL defines its GRPOTrainer


def replaced_trainer(trainer_class) -> str | None:
    """One line when `trainer_class`, the class `trl.GRPOTrainer` names, is not TRL's own GRPOTrainer (its module and
    qualified name), else None. `import unsloth` rewrites TRL's trainers from their source and rebinds
    `trl.GRPOTrainer` to its `UnslothGRPOTrainer`, whose `compute_loss` is Unsloth's own compiled loss and never calls
    TRL's `_compute_loss`: trl_zoo's GRPOTrainer would subclass it, and none of trl_zoo's losses would run."""
    module, name = trainer_class.__module__, trainer_class.__qualname__
    if (module, name) == (TRL_TRAINER_MODULE, "GRPOTrainer"):
        return None
    unsloth = "unsloth" in sys.modules
    cause = "unsloth, imported before trl_zoo, rebinds it" if unsloth else "another library rebound it"
    return (
        f"trl.GRPOTrainer is not TRL's own class but {module}.{name} ({cause}): trl_zoo's GRPOTrainer subclasses "
        f"TRL's and runs its losses in TRL's _compute_loss, which that class's compute_loss never calls, so trl_zoo's "
        f"loss_type would be ignored; import trl_zoo before unsloth, or do not import unsloth in a trl_zoo run."
    )


def check_trainer_class(trainer_class) -> None:
    """Raise `TRLDriftError` (`replaced_trainer`'s line) when `trainer_class` is not TRL's own GRPOTrainer."""
    replaced = replaced_trainer(trainer_class)
    if replaced:
        raise TRLDriftError(replaced)


check_trainer_class(TRLGRPOTrainer)  # at import: the class trl_zoo's trainer layers are built on


def parameters(function) -> str:
    """A callable's parameter names as written in `RELIED_METHODS`: "(a, b, *args, c, **kwargs)"."""
    names, starred = [], False
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind is parameter.VAR_POSITIONAL:
            names.append(f"*{parameter.name}")
            starred = True
        elif parameter.kind is parameter.VAR_KEYWORD:
            names.append(f"**{parameter.name}")
        else:
            if parameter.kind is parameter.KEYWORD_ONLY and not starred:
                names.append("*")
                starred = True
            names.append(parameter.name)
    return f"({', '.join(names)})"


def _owner_name(owner) -> str:
    return getattr(owner, "__qualname__", None) or owner.__name__


def _resolve(owner):
    """`owner`, or the object its dotted name names; None when the installed TRL lacks that module or name."""
    if isinstance(owner, str):
        module, _, name = owner.rpartition(".")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            return None
    return owner


def _drift(owner, name: str, expected: str | None) -> str | None:
    """What differs in `owner.name` (`owner` an object or its dotted name) from what trl_zoo relies on, in words,
    or None."""
    resolved = _resolve(owner)
    where = f"{owner if resolved is None else _owner_name(resolved)}.{name}{expected or ''}"
    if resolved is None:
        return f"trl_zoo relies on TRL's {where}, which the installed TRL lacks"
    owner = resolved
    if not hasattr(owner, name):
        return f"trl_zoo relies on TRL's {where}, which the installed TRL lacks"
    found = getattr(owner, name)
    if expected is not None and (not callable(found) or parameters(found) != expected):
        actual = parameters(found) if callable(found) else " (not callable)"
        return f"trl_zoo relies on TRL's {where}, which the installed TRL has as {name}{actual}"
    return None


def _call_order_drift(owner, method: str, callee: str, calls: tuple[str, ...]) -> str | None:
    """What differs in the order of `calls` inside `owner.method`'s source from what trl_zoo relies on, or None."""
    where = f"{_owner_name(owner)}.{method}"
    try:
        source = inspect.getsource(getattr(owner, method))
    except (AttributeError, OSError, TypeError):
        return f"trl_zoo relies on reading TRL's {where}, which the installed TRL lacks"
    positions = [source.find(call) for call in calls]
    in_order = all(position >= 0 for position in positions) and positions == sorted(positions)
    if not in_order or source.find(callee) != positions[0] + calls[0].find(callee):
        return (
            f"trl_zoo relies on TRL's {where} calling {' then '.join(call.rstrip('(') for call in calls)} (the first "
            f"its first {callee.rstrip('(')}), which the installed TRL does not"
        )
    return None


def trl_drift(trainer_class=TRLGRPOTrainer, use_vllm: bool = False) -> str | None:
    """The first name trl_zoo relies on that `trainer_class` (TRL's trainer) or the installed TRL lacks or changed
    (with `use_vllm`, TRL's vLLM generation's too), as one line with the installed and the tested TRL versions; None
    when all match."""
    checks = [(trainer_class, name, expected) for name, expected in RELIED_METHODS.items()]
    checks += [(trainer_class, name, None) for name in RELIED_CLASS_ATTRIBUTES]
    checks += [*RELIED_ELSEWHERE, *(RELIED_WITH_VLLM if use_vllm else ())]
    found = next(filter(None, (_drift(owner, name, expected) for owner, name, expected in checks)), None)
    if found is None:
        found = next(filter(None, (_call_order_drift(trainer_class, *relied) for relied in RELIED_CALLS)), None)
    if found:
        return f"{found} (installed TRL {trl.__version__}; trl_zoo is tested with TRL {TESTED_TRL}.x)."
    return None


@functools.cache
def check_installed_trl(use_vllm: bool = False) -> None:
    """Raise `TRLDriftError` (one line) when the installed TRL lacks or changed a name trl_zoo relies on (with
    `use_vllm`, for vLLM generation too); once."""
    drift = trl_drift(use_vllm=use_vllm)
    if drift:
        raise TRLDriftError(drift)
    untested_trl_warned()


@functools.cache
def untested_trl_warned() -> None:
    """One warning, once a process, when the installed TRL is not of the tested minor version (`TESTED_TRL`)."""
    installed = trl.__version__
    if ".".join(installed.split(".")[:2]) != TESTED_TRL:
        warnings.warn(
            f"TRL {installed} is installed and trl_zoo is tested with TRL {TESTED_TRL}.x: the TRL names trl_zoo "
            f"relies on are checked, TRL's behaviour on this version is not; if something breaks or differs, report "
            f"it as an issue of trl_zoo.",
            stacklevel=4,
        )


def check_trainer_state(trainer) -> None:
    """Raise `TRLDriftError` when TRL's constructor did not set an attribute trl_zoo reads or writes."""
    for name in RELIED_STATE:
        if not hasattr(trainer, name):
            raise TRLDriftError(
                f"trl_zoo relies on TRL's GRPOTrainer setting self.{name} in its constructor, which the installed TRL "
                f"does not (installed TRL {trl.__version__}; trl_zoo is tested with TRL {TESTED_TRL}.x)."
            )


class TRLSeams(TRLGRPOTrainer):
    """TRL's trainer with each private method trl_zoo hooks calling its hook point (hooks/hook_points.py) around
    TRL's own (module docstring); the generation seam, the loss and the CLIPPED point call the layers above."""

    _tag_names = ["trl", "grpo", "trl-zoo"]  # the tags TRL adds to the model and its card

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        check_trainer_state(self)

    # ------------------------------------------------------------------ TRL's methods, overridden here only
    def _generate_and_score_completions(self, inputs):
        return self._generation_batch(inputs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        return self._round_rewards_of(super()._calculate_rewards, inputs, prompts, completions, completion_ids_list)

    def _prepare_inputs(self, generation_batch):
        new_buffer = self.model.training and generation_due(self)
        inputs = super()._prepare_inputs(generation_batch)
        if not new_buffer:
            return inputs
        set_generation_buffer(self, self.pipeline.chain(hook_points.NEW_BUFFER, generation_buffer(self)))
        return buffered_micro_batch(self)

    def _generate(self, prompts):
        return self.pipeline.wrap(hook_points.GENERATE, super()._generate)(prompts)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        decode = self.pipeline.wrap(hook_points.GENERATE_SINGLE_TURN, super()._generate_single_turn)
        return decode(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)

    def _tokenize_prompts(self, prompts):
        return self.pipeline.wrap(hook_points.TOKENIZE_PROMPTS, super()._tokenize_prompts)(prompts)

    def _compute_loss(self, model, inputs):
        return self.pipeline.wrap(hook_points.MICRO_BATCH_LOSS, self._policy_loss)(model, inputs)[0]

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False,
        compute_aux_loss=False, pixel_values=None, image_grid_thw=None, num_images=None, pixel_attention_mask=None,
        spatial_shapes=None, num_tiles=None, image_sizes=None, token_type_ids=None, mm_token_type_ids=None,
        image_position_ids=None,
    ):
        compute = self.pipeline.wrap(hook_points.LOG_PROB_PASS, super()._get_per_token_logps_and_entropies)
        return compute(
            model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
            pixel_values=pixel_values, image_grid_thw=image_grid_thw, num_images=num_images,
            pixel_attention_mask=pixel_attention_mask, spatial_shapes=spatial_shapes, num_tiles=num_tiles,
            image_sizes=image_sizes, token_type_ids=token_type_ids, mm_token_type_ids=mm_token_type_ids,
            image_position_ids=image_position_ids,
        )

    def _get_grad_norm(self, model, grad_norm=None):
        grad_norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        self._on_optimizer_step(OptimizerStep(StepPhase.CLIPPED, self.state.global_step, model, grad_norm))
        return grad_norm

    def _save_checkpoint(self, model, trial):
        return self.pipeline.wrap(hook_points.SAVE_CHECKPOINT, super()._save_checkpoint)(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        load = self.pipeline.wrap(hook_points.LOAD_OPTIMIZER_AND_SCHEDULER, super()._load_optimizer_and_scheduler)
        return load(checkpoint)


# ---------------------------------------------------------------------- TRL's methods the layers call
def trl_generated_round(trainer, inputs) -> dict:
    """TRL's own generation and scoring of `inputs` (one round; its reward call is still `trainer`'s)."""
    return TRLGRPOTrainer._generate_and_score_completions(trainer, inputs)


def per_token_logps(trainer, model, input_ids, attention_mask, logits_to_keep, **kwargs):
    """TRL's log π(y_t) (and entropies, MoE auxiliary loss) of the completion tokens, through its fused LM head
    (`_get_per_token_logps_and_entropies`, as `old_logps_pass_skipped` may have swapped it)."""
    return trainer._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, **kwargs)


def tokenized_prompts(trainer, prompts):
    """TRL's prompt token ids (and images, multimodal fields) of `prompts`, through the `tokenize_prompts` hook
    point."""
    return trainer._tokenize_prompts(prompts)


def run_output_dir(trainer, trial=None) -> str:
    """transformers' output folder of a run (of a hyperparameter-search trial)."""
    return trainer._get_output_dir(trial=trial)


def without_unused_columns(trainer, dataset, description=None):
    """transformers' copy of `dataset` without the columns the trainer does not read."""
    return trainer._remove_unused_columns(dataset, description=description)


# ---------------------------------------------------------------------- TRL's state
def log_metric(trainer, name: str, value: float, mode: str = "train") -> None:
    """One value of metric `name` for `mode` ("train" or "eval"); TRL averages a metric's values at each logging step
    and logs the mean under `name` (the eval ones prefixed "eval_")."""
    trainer._metrics[mode][name].append(value)


def replace_logged_advantages(trainer, per_completion: list[float]) -> None:
    """The last `len(per_completion)` entries of TRL's completions-table advantages become `per_completion` (TRL
    appended its own for the same rows inside `_generate_and_score_completions`)."""
    logged = trainer._logs["advantages"]
    for _ in range(min(len(per_completion), len(logged))):
        logged.pop()
    logged.extend(per_completion)


def generation_buffer(trainer) -> list[dict] | None:
    """TRL's micro-batches of the current generation batch (None before the first one and after a resume)."""
    return trainer._buffered_inputs


def micro_step(trainer) -> int:
    """TRL's micro-step counter (training micro-steps so far; config/generation_buffer.py says what TRL does at it)."""
    return trainer._step


def generation_due(trainer) -> bool:
    """Whether TRL generates a new generation batch at its current micro-step (the one `_prepare_inputs` serves; at a
    checkpoint, the next) rather than training on its buffer: at the start of a generation cycle, or when it holds no
    buffer (after a resume). TRL decides it inline in `_prepare_inputs`, in training only (in eval it generates every
    batch and buffers none)."""
    return not inside_generation_cycle(trainer.args, micro_step(trainer)) or generation_buffer(trainer) is None


def buffered_micro_batch(trainer) -> dict:
    """The buffered micro-batch TRL trains on at this micro-step (`_prepare_inputs` returns it)."""
    return generation_buffer(trainer)[buffer_entry(trainer.args, micro_step(trainer))]


def trl_computes_old_logps(trainer) -> bool:
    """Whether TRL's `_generate_and_score_completions` runs its old-log-prob pass (its inline condition,
    `old_logps_pass_runs`)."""
    return old_logps_pass_runs(trainer.args)


def set_generation_buffer(trainer, buffer: list[dict] | None, step: int | None = None) -> None:
    """TRL's buffer of micro-batches of the current generation batch (and its micro-step counter): re-cut by
    `components/length_bucketing.py` right after TRL's `_prepare_inputs` built it, restored from a checkpoint by
    `components/resume.py`; TRL builds and indexes the buffer inline in `_prepare_inputs`."""
    trainer._buffered_inputs = buffer
    if step is not None:
        trainer._step = step


def pad_token_id(trainer) -> int | None:
    """The pad token id of the tokenizer TRL pads prompts and completions with."""
    return trainer._tokenizer.pad_token_id


class EntropyController:
    """TRL's adaptive entropy coefficient's state on `trainer`: whether the entropy bonus is on, the optimizer step's
    window (Σ m·H, Σ m) or None, and the last step's token-mean entropy over every process H̄ (TRL saves it in its
    checkpoints)."""

    def __init__(self, trainer):
        self.trainer = trainer

    @property
    def bonus_enabled(self) -> bool:
        return self.trainer._entropy_bonus_enabled

    @property
    def window(self):
        return self.trainer._entropy_window_stats

    @window.setter
    def window(self, stats) -> None:
        self.trainer._entropy_window_stats = stats

    @property
    def last_world_entropy(self) -> float:
        return self.trainer._last_world_entropy

    @last_world_entropy.setter
    def last_world_entropy(self, value: float) -> None:
        self.trainer._last_world_entropy = value


def set_training_method(trainer, name: str, paper: dict) -> None:
    """What TRL's model card names as the training method and cites (`_name`, `_paper`)."""
    trainer._name, trainer._paper = name, paper


def training_method_of(trainer) -> tuple[str, dict]:
    """The model card's training method and its citation entry (`_name`, `_paper`)."""
    return trainer._name, trainer._paper


def switch_on_compiled_decoding(trainer, compile_config: CompileConfig) -> None:
    """transformers' compiled decoding on in the generation config TRL built with it off (`disable_compile=True`):
    `disable_compile=False`, `cache_implementation="static"` when unset, `compile_config` when it has none; on a CPU
    transformers compiles only with the config's `_compile_all_devices`, set there too."""
    config = trainer.generation_config
    config.disable_compile = False
    config.cache_implementation = config.cache_implementation or "static"
    if config.compile_config is None:
        config.compile_config = compile_config
    if trainer.accelerator.device.type == "cpu":
        config.compile_config._compile_all_devices = True


def ignored_by_ddp(model, names: list[str]) -> None:
    """Mark `model`'s parameters `names` as ignored by any DistributedDataParallel that later wraps it (torch's own
    mark, `DistributedDataParallel._set_params_and_buffers_to_ignore_for_model`, which accelerate and DeepSpeed use
    too; torch offers no public one). Inert without DDP."""
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, names)


# ---------------------------------------------------------------------- TRL's results
# what TRL's `_generate` returns, in its order (a layout, not a name: checked where it is read)
GENERATE_RESULT = (
    "prompt_ids", "completion_ids", "tool_mask", "completions", "logprobs", "extra_fields", "images", "tool_images",
)


def generate_result(output) -> dict:
    """TRL's `_generate` result by field name; `TRLDriftError` when it is not the tuple `GENERATE_RESULT` names."""
    if not isinstance(output, tuple) or len(output) != len(GENERATE_RESULT):
        raise TRLDriftError(
            f"trl_zoo reads TRL's GRPOTrainer._generate as returning ({', '.join(GENERATE_RESULT)}), which the "
            f"installed TRL does not (installed TRL {trl.__version__}; trl_zoo is tested with TRL {TESTED_TRL}.x)."
        )
    return dict(zip(GENERATE_RESULT, output))


def as_generate_result(fields: dict) -> tuple:
    """`fields` back into the tuple TRL's `_generate` returns."""
    return tuple(fields[name] for name in GENERATE_RESULT)


# ---------------------------------------------------------------------- swaps for one call of TRL's
_ABSENT = object()


@contextlib.contextmanager
def restored(owner: Any, name: str):
    """`owner.name` as it was before the block, after it, however it ends: an attribute set on the instance is put
    back, one the instance did not have (a method of its class) is removed again."""
    before = vars(owner).get(name, _ABSENT)
    try:
        yield
    finally:
        if before is _ABSENT:
            if name in vars(owner):
                delattr(owner, name)
        else:
            setattr(owner, name, before)


@contextlib.contextmanager
def swapped(owner: Any, name: str, value: Any):
    """`owner.name` is `value` inside the block, and what it was after it, however the block ends."""
    with restored(owner, name):
        setattr(owner, name, value)
        yield value


def reference_loaded_from(name: str, reference):
    """While TRL's constructor runs, its `create_model_from_path(name, ...)` returns `reference`; other names load."""
    load = trl_grpo_trainer.create_model_from_path

    @functools.wraps(load)
    def create_model_from_path(model_id, *args, **kwargs):
        return reference if model_id == name else load(model_id, *args, **kwargs)

    return swapped(trl_grpo_trainer, "create_model_from_path", create_model_from_path)


_LOGPS_OPTIONS = ("batch_size", "compute_entropy", "compute_aux_loss")  # the rest are multimodal inputs


@contextlib.contextmanager
def old_logps_pass_skipped(trainer):
    """While TRL's `_generate_and_score_completions` runs inside the block, its old-log-prob pass returns (None, None,
    None), so TRL returns no `old_per_token_logps`: the block's first call of `_get_per_token_logps_and_entropies`
    (`RELIED_CALLS`: TRL's old-log-prob pass comes first, the reference's after it), when it is on `trainer.model`,
    under no_grad and without multimodal inputs. Every other call, that one included when it is not so, is TRL's.
    vLLM's importance-sampling correction, which reads those old log-probs, is off inside the block (module
    docstring): the caller applies it."""
    compute = trainer._get_per_token_logps_and_entropies
    armed = [True]

    def get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        first, armed[0] = armed[0], False
        text_only = not args and all(value is None for name, value in kwargs.items() if name not in _LOGPS_OPTIONS)
        if first and model is trainer.model and not torch.is_grad_enabled() and text_only:
            return None, None, None
        return compute(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)

    with contextlib.ExitStack() as stack:
        stack.enter_context(swapped(trainer, "_get_per_token_logps_and_entropies", get_per_token_logps_and_entropies))
        if trainer.vllm_importance_sampling_correction:
            stack.enter_context(swapped(trainer, "vllm_importance_sampling_correction", False))
        yield


def weight_sync_without(vllm_generation, dropped: Callable[[str], bool]):
    """While TRL's `_generate` runs, TRL's vLLM weight sync pushes only the tensors whose names `dropped` rejects (the
    iteration itself stays TRL's, so its gathers stay collective)."""
    named_params = vllm_generation._iter_named_params

    def kept_named_params():
        for name, param in named_params():
            if not dropped(name):
                yield name, param

    return swapped(vllm_generation, "_iter_named_params", kept_named_params)
