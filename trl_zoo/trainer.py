"""`GRPOTrainer`: TRL's trainer with the policy term taken from the loss table.

Everything but the loss is TRL's: generation, rewards, PEFT, accelerate, logging, checkpoints. trl_zoo's features are
components (hooks/component.py) of one pipeline (hooks/pipeline.py); the table of hooks/hook_points.py says which hook
points each takes part in, in what order, and how they nest; the trainer builds them once TRL's constructor has run and
calls the hook points. Its classes,
outermost first:

    GRPOTrainer              construction; Trainer's public methods to hook points      trainer.py
    PolicyLossStep           the loss step: `_policy_forward`, loss table, metrics,     hooks/loss_step.py
                             the optimizer-step points
    GenerationSeam           the generation seam: a generation batch of rounds,         hooks/generation.py
                             each a typed `ScoredRound` through the round's hook points
    TRLSeams                 the door: TRL's private methods calling hook points;       hooks/trl_access.py
                             what trl_zoo relies on, checked against the installed TRL
    trl.GRPOTrainer

Construction, in order: the config made trl_zoo's and the loss, aggregation and KL entries looked up; the training
set checked; the reward functions checked and reward shaping's added (components/rewards.py); TRL's constructor, in the
context a policy object with no loadable name needs (hooks/model_object.py); the pipeline's components, in their
declared order; the weights checked finite; a PEFT adapter at a full fine-tuning learning rate warned. See
docs/architecture.md for the pipeline of one step.

Tests: tests/test_trainer_layers.py (the class table is the real MRO), tests/test_pipeline.py, tests/test_parity.py (a
drop-in for TRL's), tests/test_model_card.py (`training_method`), tests/test_dataset_values.py
(`check_train_dataset`), tests/test_bad_input_more.py (non-finite weights, an adapter's learning rate).
"""

from __future__ import annotations

import inspect
import itertools
import re
import warnings

from accelerate.utils import is_peft_model
from trl import GRPOTrainer as TRLGRPOTrainer
from trl.trainer.utils import get_config_model_id

from .components import COMPONENTS
from .components.rewards import shaped_reward_funcs
from .config import GRPOConfig, to_zoo_config
from .config.run_plan import RunPlan
from .config.vllm_engine import check_vllm_engine, vllm_engine_errors
from .dataset_values import REFERENCE_REWARDS, check_one_format, check_prompts, check_read_columns
from .hooks import hook_points, pipeline
from .hooks.generation import GenerationSeam
from .hooks.loss_step import PolicyLossStep
from .hooks.model_object import reference_for_model_object
from .hooks.trl_access import TRLSeams, check_installed_trl, set_training_method
from .io.gguf_checkpoint import policy_path
from .numerics import nonfinite_names
from .registry import ADVANTAGES, LOSSES, SAMPLERS

_TRL_INIT = inspect.signature(TRLGRPOTrainer.__init__)  # to read a constructor argument given by position or name
ADAPTER_LEARNING_RATE = 1e-5  # below it a learning rate is one of full fine-tuning (TRL's default: 1e-6)


def training_method(args) -> tuple[str, dict]:
    """The model card's method (TRL's `_name`, `_paper`): the loss, advantage estimator and sampler used, cited."""
    loss = LOSSES.get(args.loss_type)
    parts = [f"loss `{loss.name}` ({loss.source or 'no paper'})"]
    if args.advantage_estimator is None:
        parts.append("TRL's group-normalised advantages (DeepSeekMath, arXiv:2402.03300)")
    else:
        estimator = ADVANTAGES.get(args.advantage_estimator)
        parts.append(f"advantage estimator `{estimator.name}` ({estimator.source or 'no paper'})")
    if args.dynamic_sampling is not None:
        sampler = SAMPLERS.get(args.dynamic_sampling)
        parts.append(f"dynamic sampler `{sampler.name}` ({sampler.source or 'no paper'})")
    name = "trl_zoo's GRPOTrainer with " + ", ".join(parts[:-1]) + " and " + parts[-1]
    arxiv_ids = dict.fromkeys(re.findall(r"arXiv:(\d{4}\.\d{4,5})", name))
    citation = "\n\n".join(
        f"@misc{{arxiv{arxiv_id},\n    eprint        = {{{arxiv_id}}},\n    archivePrefix = {{arXiv}},\n}}"
        for arxiv_id in arxiv_ids
    )
    return name, {"citation": citation} if citation else {}


def check_train_dataset(dataset, args, environment_factory=None) -> None:
    """Raise a one-line ValueError for a training set TRL would train on for 0 steps or crash on deep inside:
    no rows, no `prompt` column, or fewer prompts than one generation batch (TRL's sampler drops an incomplete
    batch, so such a set yields no step at all; of a streamed set only that many rows are read), a prompt that is
    None, blank or not text, or prompts mixing text and chat messages (`dataset_values.py`), no column the run reads
    (an estimator's `reference_rewards`, the `expert_column`) or a value of one it cannot use (every row of a
    map-style set; a stream's first rows, whose keys are its columns when it declares none). With an
    `environment_factory` the environments' `reset()` supply the prompts, so, as in TRL, the set needs no `prompt`
    column (a dict of environments routes rows by their `environment` column)."""
    if dataset is None:
        return
    columns = getattr(dataset, "column_names", None)
    prompts_per_batch = args.generation_batch_size // args.num_generations
    head = None  # a stream's first rows: read only as far as one generation batch needs
    try:
        rows = len(dataset)
    except TypeError:  # an IterableDataset
        head = list(itertools.islice(dataset, prompts_per_batch))
        rows = len(head)
        if columns is None and head and isinstance(head[0], dict):
            columns = list(head[0])
    if columns is not None and "prompt" not in columns and environment_factory is None:
        raise ValueError(
            f"train_dataset: no 'prompt' column (its columns: {', '.join(map(str, columns)) or 'none'}); rename the "
            f"prompt column to 'prompt', e.g. dataset.rename_column('question', 'prompt')."
        )
    if head is None and environment_factory is None and "prompt" in (columns or ()):
        check_prompts(dataset)
        check_one_format(dataset["prompt"])
    reference = reads_reference_rewards(args)
    if reference and columns is not None and REFERENCE_REWARDS not in columns:
        raise ValueError(
            f"train_dataset: no '{REFERENCE_REWARDS}' column, which advantage_estimator="
            f"'{args.advantage_estimator}' reads; add it with trl_zoo.sample_reference_rewards(model, tokenizer, "
            f"dataset, reward_funcs)."
        )
    expert = getattr(args, "expert_column", None)
    if expert is not None and columns is not None and expert not in columns:
        raise ValueError(
            f"expert_column: the training set has no column {expert!r} (its columns: {', '.join(columns)}); add the "
            f"expert answers (CHORD's demonstrations, LUFFY's traces) as that column or name the one that holds them."
        )
    if rows == 0:
        raise ValueError("train_dataset: 0 rows, so there is nothing to train on; give a dataset with prompts.")
    if rows < prompts_per_batch:
        who = f"dynamic_sampling={args.dynamic_sampling!r}: the" if args.dynamic_sampling else "train_dataset: the"
        raise ValueError(
            f"{who} training set holds {rows} prompts, fewer than the {prompts_per_batch} one generation batch needs "
            f"(generation_batch_size {args.generation_batch_size} / num_generations {args.num_generations}), so no "
            f"step would run; add prompts or lower per_device_train_batch_size or steps_per_generation."
        )
    if columns is not None:
        check_read_columns(dataset if head is None else head, reference, expert)


def reads_reference_rewards(args) -> bool:
    """Whether the run's advantage estimator reads the dataset column `reference_rewards` (A*-PO's)."""
    estimator = ADVANTAGES.get(args.advantage_estimator) if args.advantage_estimator else None
    return estimator is not None and "reference_rewards" in estimator.spec.needs


def check_finite_parameters(model) -> None:
    """Raise a one-line ValueError naming the first parameter that holds NaN or ±inf (generation would sample from
    NaN logits and fail inside torch); one host sync, at construction."""
    named = [(name, p) for name, p in model.named_parameters() if p.numel() and p.is_floating_point()]
    bad = nonfinite_names(named)
    if bad:
        raise ValueError(
            f"model: {len(bad)} of {len(named)} parameter tensors hold NaN or ±inf (first: {bad[0]}); generation "
            f"cannot sample from such a model; load an intact checkpoint."
        )


def warn_adapter_learning_rate(model, args) -> None:
    """Warn where a PEFT adapter (LoRA) trains at a full fine-tuning learning rate, below `ADAPTER_LEARNING_RATE`:
    TRL's default 1e-6 moves an adapter too little to change what the policy answers in a short run."""
    if is_peft_model(model) and args.learning_rate < ADAPTER_LEARNING_RATE:
        warnings.warn(
            f"learning_rate: {args.learning_rate:g} trains the PEFT adapter (LoRA) at a full fine-tuning rate (TRL's "
            f"default is 1e-6), at which an adapter barely moves; LoRA usually takes 1e-5 to 2e-4 (the chat tasks' "
            f"preset: 2e-4), so set learning_rate, e.g. 2e-4.",
            stacklevel=3,
        )


def dense_policy(model, args):
    """A policy named by path with `model_init_kwargs={"gguf_file": ...}` (or a packaged model's short name) is
    loaded from its dequantized checkpoint (gguf_checkpoint.py), which `Trainer` can train; anything else as given."""
    if not isinstance(model, str):
        return model
    init_kwargs = dict(args.model_init_kwargs or {})
    path = policy_path(model, init_kwargs.pop("gguf_file", None))
    if path != model:
        args.model_init_kwargs = init_kwargs
    return path


class GRPOTrainer(PolicyLossStep, GenerationSeam, TRLSeams):
    """Drop-in `trl.GRPOTrainer`: same constructor, `loss_type` from the plugin table (see `trl-zoo list`)."""

    pipeline = pipeline.EMPTY  # while TRL's constructor runs; the trainer's own once it has
    interrupt_notice = True  # Ctrl-C during train() writes one line to stderr before the KeyboardInterrupt goes on

    def __init__(self, model, reward_funcs=None, args: GRPOConfig | None = None, *positional, **kwargs):
        check_installed_trl(use_vllm=bool(getattr(args, "use_vllm", False)))
        if args is None:
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = GRPOConfig(f"{model_name.split('/')[-1]}-GRPO")
        args = to_zoo_config(args)
        model = dense_policy(model, args)
        self.plan = RunPlan.of(args)
        given = _TRL_INIT.bind_partial(self, model, reward_funcs, args, *positional, **kwargs).arguments
        check_train_dataset(given.get("train_dataset"), args, given.get("environment_factory"))
        self.loss_state: dict = {}  # the loss entry's own state (`LossSpec.on_optimizer_step`), saved with checkpoints
        reward_funcs, args, positional, kwargs = shaped_reward_funcs(reward_funcs, args, positional, kwargs)
        check_vllm_engine(args)
        with reference_for_model_object(model, args, given), vllm_engine_errors(args):
            super().__init__(model, reward_funcs, args, *positional, **kwargs)
        self.pipeline = pipeline.Pipeline(self, COMPONENTS)
        check_finite_parameters(self.model)
        warn_adapter_learning_rate(self.model, self.args)
        set_training_method(self, *training_method(self.args))  # what TRL's model card names and cites

    @property
    def critic(self):
        """The critic (`components/value_model.ValueModel`: value adapter or head, passes, loss), None without one."""
        component = self.pipeline.get("critic")
        return None if component is None else component.critic

    # ------------------------------------------------------------------ Trainer's public methods → hook points
    def train(self, *args, **kwargs):
        return self.pipeline.wrap(hook_points.TRAIN, super().train)(*args, **kwargs)

    def create_optimizer(self, *args, **kwargs):
        return self.pipeline.wrap(hook_points.CREATE_OPTIMIZER, super().create_optimizer)(*args, **kwargs)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        return self.pipeline.wrap(hook_points.SAVE_MODEL, super().save_model)(output_dir, _internal_call)
