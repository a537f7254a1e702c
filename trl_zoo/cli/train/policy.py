"""The policy a `trl-zoo train` run trains: its path, resolved once, and how the trainer loads it.

    resolve_policy(task, ...)           ->  the path every later step loads from (the tokenizer, the model's config,
                                            the trainer)
    prepare_policy_loading(...)         ->  the LoRA config; sets the model's init kwargs and DDP's unused-parameter
                                            search on the training arguments

The path is `model_name_or_path`; without one, a built-in task's default (a packaged model for chat_arithmetic) or
its bootstrapped tiny policy. A GGUF checkpoint (a packaged model's short name, a .gguf file, `gguf_file`) becomes its
dense folder through `io/gguf_checkpoint.py`'s `policy_path`, the same function the trainer calls for a policy given
to it from Python (the folder the CLI hands it names no GGUF file, so it passes unchanged). Bad input raises
`ConfigError` (one line naming the field).

Tests: tests/test_presets_builtin.py (an MoE loss on the built-in policy, the built-in default models),
tests/test_quickstart.py (QLoRA's needs), tests/test_real_model.py (a packaged GGUF model),
tests/test_run_folders.py (DDP's search).
"""

from __future__ import annotations

import importlib

import torch
from transformers import AutoTokenizer
from trl import get_peft_config

from ...io.gguf_checkpoint import GGUFError, policy_path
from ...registry import LOSSES
from ...tasks.bootstrap import BootstrapRecipe, bootstrap_policy
from ...tasks.chat_arithmetic import ChatArithmeticTask
from ...tasks.scratchpad import ScratchpadAdditionTask
from ...tasks.scratchpad_bootstrap import bootstrap_scratchpad_policy, scratchpad_recipe
from ..environment.ddp_unused_parameters import find_unused_parameters
from ..errors import ConfigError, one_line


def check_quantization(model_args):
    """QLoRA (`load_in_4bit`, `load_in_8bit`) needs bitsandbytes, a CUDA GPU and an adapter."""
    if not (model_args.load_in_4bit or model_args.load_in_8bit):
        return
    flag = "load_in_4bit" if model_args.load_in_4bit else "load_in_8bit"
    try:
        importlib.import_module("bitsandbytes")
    except ImportError:
        raise ConfigError(f"{flag}: QLoRA needs bitsandbytes; pip install bitsandbytes.") from None
    if not torch.cuda.is_available():
        raise ConfigError(f"{flag}: QLoRA needs a CUDA GPU; drop --{flag} to train with plain LoRA here.")
    if not model_args.use_peft:
        raise ConfigError(f"{flag}: a quantized model can only be fine-tuned with an adapter; set use_peft true.")


def resolve_policy(task, task_args, training_args, model_args, log=print) -> str:
    """The path the run loads its policy from (module docstring); `task` is the built-in task, None for a dataset."""
    model_path = model_args.model_name_or_path
    if model_path is None and task is not None:
        model_path = _builtin_policy(task, task_args, training_args, log)
    try:
        return policy_path(model_path, task_args.gguf_file, log)
    except GGUFError as error:
        raise ConfigError(str(error)) from None


def _builtin_policy(task, task_args, training_args, log) -> str:
    """A built-in task's policy when no model is named: its default model, else its bootstrapped tiny policy."""
    if isinstance(task, ChatArithmeticTask):
        return task.default_model
    if LOSSES.get(training_args.loss_type).spec.requires_moe:
        raise ConfigError(
            f"loss_type: {training_args.loss_type!r} needs a Mixture-of-Experts model and the built-in task's "
            "policy is dense; give --model_name_or_path of an MoE model (Qwen2-MoE, Qwen3-MoE, Mixtral, ...) or "
            "use a dense loss such as 'gmpo'."
        )
    if isinstance(task, ScratchpadAdditionTask):
        return str(bootstrap_scratchpad_policy(task, scratchpad_recipe(task, training_args.seed), log=log))
    recipe = BootstrapRecipe(
        hidden_size=task_args.bootstrap_hidden_size,
        num_layers=task_args.bootstrap_num_layers,
        target_accuracy=task_args.bootstrap_target_accuracy,
        carry_slip_rate=task_args.bootstrap_carry_slip_rate,
        max_steps=task_args.bootstrap_max_steps,
        check_every=min(50, task_args.bootstrap_max_steps),
        seed=training_args.seed,
    )
    return str(bootstrap_policy(task, recipe, log=log))


def load_tokenizer(model_path: str, model_args, training_args):
    """The policy's tokenizer, padding with its end-of-sequence token when it has no pad token."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            model_path, revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code
        )
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"model_name_or_path: cannot load a tokenizer from {model_path!r} ({one_line(error)})."
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def prepare_policy_loading(training_args, model_args, model_path: str):
    """How the trainer loads the policy: `model_init_kwargs` from the model arguments (a quantized model's weights
    on this GPU), DDP's `find_unused_parameters` as the model needs it; returns the LoRA config (None: full
    fine-tuning)."""
    model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
        **(training_args.model_init_kwargs or {}),
    }
    if model_args.load_in_4bit or model_args.load_in_8bit:
        model_init_kwargs["device_map"] = {"": torch.cuda.current_device()}  # quantized weights live on this GPU
    training_args.model_init_kwargs = model_init_kwargs
    training_args.ddp_find_unused_parameters = find_unused_parameters(training_args, model_args, model_path)
    peft_config = get_peft_config(model_args)
    if peft_config is not None and peft_config.target_modules == {"all-linear"}:
        peft_config.target_modules = "all-linear"  # peft's shorthand must be a string, not a one-item list
    return peft_config

