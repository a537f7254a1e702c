"""Trainer hook: a learned critic V(s_t) for PPO with GAE and VAPO (formulas in `trl_zoo/critic.py`).

Active when the advantage estimator declares ``needs=("values",)`` (``advantage_estimator="gae"``).

The critic shares the frozen base model with the policy, in one of two forms (``critic_model``):

- ``"adapter"`` (default for a PEFT policy): a second LoRA adapter, ``"value"``, with the policy adapter's
  configuration, plus a scalar head V = w·h + b on the backbone's last hidden state. The value pass switches the
  active adapter with peft's ``set_adapter`` (no weights are copied) and runs the backbone only, never the LM head.
  peft's ``set_adapter`` also freezes every inactive adapter; the trainable flags of the policy and the critic are
  restored after each switch. Gradient checkpointing is turned off for the value pass: its recomputation would run
  in the backward, when the policy adapter is active again.
- ``"head"`` (the fallback for a model without PEFT): an MLP head (one hidden layer) on the policy's own last hidden
  states, *detached*: the value regression never moves the policy, so the policy objective stays PPO's and the
  trust region is not bypassed by a critic gradient. The hidden states are read from the loss's policy forward
  (`_policy_forward`, returned in its `PolicyForward`) by a forward hook on the backbone (no extra forward); the rows
  that forward skipped (``skip_zero_advantage``) get theirs from a no-grad backbone pass over those rows only, and
  value pre-training, which runs no policy forward, from a no-grad pass over the micro-batch.

Why the adapter is the default for PEFT policies: it is a critic with a representation of its own, as PPO's and
VAPO's separate value model is, while a head on detached policy features is a probe whose inputs drift as the
policy trains. Its price, measured with benchmarks/critic_overhead.py (CPU, one thread, tiny Qwen2 hidden 64 ×
2 layers, LoRA r 8 on all linear layers, 8 completions of 32 tokens, medians of 7 interleaved repeats; GRPO = 1):
train step 1.24× (head 1.16×), generation + scoring 1.13× (head 1.14×: both add one no-grad backbone pass), loss
forward + backward 2.07× (head 1.24×), trainable parameters and their optimizer state 2.00× (head 1.26×),
activations kept for the backward 2.0× (head 1.08×). With real LLMs the autoregressive generation dominates a step,
so the adapter's extra backbone forward and backward per micro-batch weighs less than on the tiny model.

Either way the value loss reaches only the critic's parameters (the value adapter and head, or the head), and the
policy loss only the policy's: the critic adds no gradient to the policy and the policy none to the critic.

Generation side (the generation seam's hook points around the advantage hook's `_replace_advantages`): before it
(`_before_advantages`), a no-grad value pass stores ``old_values`` (B, T) in the batch; the advantage hook hands
them to the estimator as ``AdvantageInputs.values`` over the global batch; after it (`_after_advantages`, from the
estimator's inputs in `scored.advantage_inputs`), the value targets (``value_targets``, Monte-Carlo λ = 1 during
value pre-training) and, for VAPO's positive-example loss, ``positive_example`` (task reward > threshold) are added
per row. They travel with the batch through TRL's shuffling and splitting and through dynamic sampling's regrouping.

Loss side (`compute_loss`): the policy loss as the trainer computes it (skipped while
``state.global_step < vapo_value_warmup_steps``), plus ``value_coef`` × the clipped value loss, plus
``vapo_positive_nll_coef`` × the positive-example NLL (on the log-probs of the loss's policy forward), each a
micro-batch token mean divided by the gradient-accumulation steps like the trainer's other auxiliary terms.

The head is registered as a submodule of the model (``trl_zoo_value_head``), so gradient clipping and the logged
grad norm cover it (the clip norm is global over policy and critic, as in PPO implementations with one optimizer).
The critic's parameters form their own optimizer group (``value_learning_rate``, or learning_rate), added to the
trainer's optimizer and scheduled with it. Its weights are saved as ``critic.pt`` next to the model (each
checkpoint included) and loaded back when training resumes from a checkpoint. Several processes: DDP only; the
critic's parameters are kept out of DDP (the value passes run outside the wrapped forward) and their gradients are
averaged by the hook at each optimizer step (`_on_optimizer_step`, GRADIENTS), before clipping. DeepSpeed and FSDP
shard the parameters and are refused.

Logged: ``critic/value_loss``, ``critic/clip_fraction``, ``critic/value_mean`` (training), and per generation
batch ``critic/explained_variance`` (1 − Var(R̂ − V_old)/Var(R̂), the critic before this batch against its new
targets), ``critic/return_mean``, ``critic/gae_mean`` and ``critic/gae_std`` (token advantages before whitening;
the advantage hook logs them after), ``critic/value_warmup`` (1 during value pre-training), and
``vapo/positive_nll``, ``vapo/positive_fraction`` with the positive-example loss.
"""

from __future__ import annotations

import copy
import os
from contextlib import contextmanager, nullcontext
from dataclasses import replace

import torch
from accelerate.utils import DistributedType, is_peft_model
from torch.nn.parallel import DistributedDataParallel
from trl.models.utils import disable_gradient_checkpointing

from ..critic import (
    ValueHead,
    clipped_value_loss,
    explained_variance,
    policy_gae,
    positive_example_nll,
    value_targets,
)
from ..loss_step import OptimizerStep, PolicyForward, StepPhase
from .generation import ScoredRound, row_chunks
from .trl_access import swapped
from ..model_inputs import forward_inputs, is_multimodal, loss_mask
from ..registry import ADVANTAGES

VALUE_ADAPTER = "value"
VALUE_HEAD = "trl_zoo_value_head"
CRITIC_FILE = "critic.pt"
# distributed setups that shard parameters: the critic's own gradient averaging does not apply there
_SHARDED = (DistributedType.DEEPSPEED, DistributedType.FSDP, DistributedType.MEGATRON_LM)


class CriticMixin:
    """A value function sharing the policy's frozen base: its own LoRA adapter + head, or a head (module docstring)."""

    critic_mode: str | None = None  # "adapter" | "head" | None (no critic)
    value_head: torch.nn.Module | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        name = self.args.advantage_estimator
        if name is None or "values" not in ADVANTAGES.get(name).spec.needs:
            return
        check_critic_distribution(self.accelerator, name)
        model = self._unwrapped()
        mode = self.args.critic_model or ("adapter" if is_peft_model(model) else "head")
        if mode == "adapter" and not is_peft_model(model):
            raise ValueError(
                "critic_model: 'adapter' needs a PEFT policy (pass peft_config=...); use critic_model='head' for a "
                "model without adapters."
            )
        hidden_size = model.config.get_text_config().hidden_size
        marker = f".{VALUE_ADAPTER}."
        # taken before the value adapter exists: peft's add_adapter / set_adapter reset trainable flags
        self._policy_parameters = [p for n, p in model.named_parameters() if p.requires_grad and marker not in n]
        adapter_parameters = []
        if mode == "adapter":
            if VALUE_ADAPTER not in model.peft_config:
                value_config = copy.deepcopy(model.peft_config[model.active_adapter])
                value_config.inference_mode = False
                if hasattr(value_config, "modules_to_save"):
                    value_config.modules_to_save = None  # the critic never uses the LM head or embeddings
                model.add_adapter(VALUE_ADAPTER, value_config)
            adapter_parameters = [p for n, p in model.named_parameters() if marker in n]
        self.critic_mode = mode
        self.value_head = ValueHead(hidden_size, hidden_layers=0 if mode == "adapter" else 1).to(
            self.accelerator.device
        )
        # a submodule of the model: gradient clipping, the logged grad norm and device moves include it
        (model.get_base_model() if is_peft_model(model) else model).add_module(VALUE_HEAD, self.value_head)
        self.critic_parameters = adapter_parameters + list(self.value_head.parameters())
        self._restore_trainable()
        self._keep_critic_out_of_ddp()
        if self.accelerator.num_processes > 1:
            self._share_critic_weights_across_processes()

    def _generate(self, prompts):
        """TRL's generation, whose weight sync (inside it) pushes the policy's tensors only: vLLM serves the policy's
        architecture, which has no value head, and TRL's `sync_weights` pushes every name that
        `VLLMGeneration._iter_named_params` yields (vLLM rejects unknown ones), so, for this call, the head's are
        dropped there (`hooks/trl_access.py`). The iteration itself is TRL's (gathers stay collective); the value
        adapter is already left out by TRL's PEFT path, which pushes the merged policy adapter only."""
        generation = getattr(self, "vllm_generation", None)
        if generation is None or self.value_head is None:
            return super()._generate(prompts)
        named_params = generation._iter_named_params

        def policy_named_params():
            for name, param in named_params():
                if f".{VALUE_HEAD}." not in f".{name}":
                    yield name, param

        with swapped(generation, "_iter_named_params", policy_named_params):
            return super()._generate(prompts)

    # ------------------------------------------------------------------ several processes (DDP)
    def _keep_critic_out_of_ddp(self):
        """Mark the critic's parameters as ignored by any DistributedDataParallel that later wraps the model: its
        value passes run outside the wrapped forward, so DDP's reducer would miss or wait for their gradients. The
        mark is inert without DDP, and is set whatever the process count: accelerate wraps the model in DDP on a
        one-process distributed launch too (torchrun --nproc_per_node 1 on CPU)."""
        critic_ids = {id(parameter) for parameter in self.critic_parameters}
        names = [name for name, parameter in self.model.named_parameters() if id(parameter) in critic_ids]
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(self.model, names)

    def _share_critic_weights_across_processes(self):
        """Start every process from rank 0's critic weights; their gradients are averaged at each optimizer step
        (`_on_optimizer_step`, GRADIENTS: before clipping)."""
        with torch.no_grad():
            for parameter in self.critic_parameters:
                torch.distributed.broadcast(parameter.data, src=0)

    def _on_optimizer_step(self, step: OptimizerStep):
        super()._on_optimizer_step(step)
        if step.phase is StepPhase.GRADIENTS and self.critic_mode is not None and self.accelerator.num_processes > 1:
            self._average_critic_gradients()

    def _average_critic_gradients(self):
        """All-reduce (mean) the critic's accumulated gradients in one flat tensor, before clipping and the step."""
        parameters = self.critic_parameters
        flat = torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().reshape(-1) for p in parameters]
        )
        flat = self.accelerator.reduce(flat, reduction="mean")
        for parameter, piece in zip(parameters, flat.split([p.numel() for p in parameters])):
            parameter.grad = piece.view_as(parameter).to(parameter.dtype)

    # ------------------------------------------------------------------ parameters and optimizer
    def _unwrapped(self):
        return self.accelerator.unwrap_model(self.model)

    def _restore_trainable(self):
        for parameter in self._policy_parameters + self.critic_parameters:
            parameter.requires_grad_(True)

    def create_optimizer(self, *args, **kwargs):
        if self.critic_mode is None:
            return super().create_optimizer(*args, **kwargs)
        for parameter in self.critic_parameters:  # keep them out of the policy's groups
            parameter.requires_grad_(False)
        try:
            optimizer = super().create_optimizer(*args, **kwargs)
        finally:
            self._restore_trainable()
        grouped = {id(p) for group in optimizer.param_groups for p in group["params"]}
        missing = [p for p in self.critic_parameters if id(p) not in grouped]
        if missing:
            learning_rate = self.args.value_learning_rate or self.args.learning_rate
            decay = [p for p in missing if p.dim() > 1]
            no_decay = [p for p in missing if p.dim() <= 1]  # biases
            for params, weight_decay in ((decay, self.args.weight_decay), (no_decay, 0.0)):
                if params:
                    optimizer.add_param_group({"params": params, "lr": learning_rate, "weight_decay": weight_decay})
        return optimizer

    # ------------------------------------------------------------------ value passes
    def _backbone(self):
        """The transformer without its LM head (PreTrainedModel.base_model), inside any PEFT wrapper."""
        model = self._unwrapped()
        return (model.get_base_model() if is_peft_model(model) else model).base_model

    @contextmanager
    def _critic_active(self):
        """The value adapter active for the duration (adapter mode); every trainable flag kept as it was."""
        if self.critic_mode != "adapter":
            yield
            return
        model = self._unwrapped()
        policy_adapter = model.active_adapter
        model.set_adapter(VALUE_ADAPTER)
        self._restore_trainable()
        try:
            yield
        finally:
            model.set_adapter(policy_adapter)
            self._restore_trainable()

    def _hidden_states(self, batch: dict, rows: slice | torch.Tensor | None = None) -> torch.Tensor:
        """Last hidden states at the positions that predict the completion tokens, (B, T, H) (of `rows` only, a
        slice or indices, when given), with the active adapter; gradient as the caller's grad mode."""
        if is_multimodal(batch):
            raise NotImplementedError("advantage_estimator='gae': the critic supports text-only models.")
        rows = slice(None) if rows is None else rows
        input_ids, attention_mask, length, _ = forward_inputs(batch)
        with self.accelerator.autocast():
            output = self._backbone()(input_ids=input_ids[rows], attention_mask=attention_mask[rows], use_cache=False)
        return output.last_hidden_state[:, -length - 1 : -1]

    def critic_values(self, batch: dict, grad: bool = True, hidden_states: torch.Tensor | None = None) -> torch.Tensor:
        """V(s_t) for every completion token of `batch`, (B, T), float32. In head mode the hidden states are detached
        (``hidden_states`` from the policy forward, or a no-grad pass)."""
        if self.critic_mode == "head":
            if hidden_states is None:
                with torch.no_grad():
                    hidden_states = self._hidden_states(batch)
            return self.value_head(hidden_states.detach().float())
        with (
            nullcontext() if grad else torch.no_grad(),
            self._critic_active(),
            disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs),
        ):
            return self.value_head(self._hidden_states(batch).float())

    def _generation_values(self, output: dict) -> torch.Tensor:
        """V_old(s_t) of a freshly generated batch, no grad (the generation seam's `_generation_pass`)."""
        rows = output["completion_ids"].size(0)
        with self._generation_pass("critic_values") as chunk, self._critic_active():
            values = [self.value_head(self._hidden_states(output, part).float()) for part in row_chunks(rows, chunk)]
        return torch.cat(values)

    # ------------------------------------------------------------------ generation side
    def _before_advantages(self, scored: ScoredRound) -> None:
        super()._before_advantages(scored)
        if self.critic_mode is not None:
            scored.batch["old_values"] = self._generation_values(scored.batch)

    def _after_advantages(self, scored: ScoredRound) -> None:
        super()._after_advantages(scored)
        if self.critic_mode is None:
            return
        output = scored.batch
        mode = "train" if self.model.training else "eval"
        inputs = scored.advantage_inputs  # the global batch the estimator saw
        warmup = self._value_warmup(mode)
        targets = value_targets(inputs, self.args, lam=1.0 if warmup else None)
        rows, length = output["completion_mask"].shape
        start = self.accelerator.process_index * rows
        output["value_targets"] = targets[start : start + rows, :length].to(output["old_values"].dtype)

        metrics = self._metrics[mode]
        metrics["critic/explained_variance"].append(explained_variance(inputs.values, targets, inputs.mask))
        selected = inputs.mask.bool() & torch.isfinite(targets)
        metrics["critic/return_mean"].append(targets[selected].mean().item() if selected.any() else float("nan"))
        raw = policy_gae(inputs, self.args)[selected]
        if raw.numel():
            metrics["critic/gae_mean"].append(raw.mean().item())
            metrics["critic/gae_std"].append(raw.std(unbiased=False).item())
        if mode == "train":
            metrics["critic/value_warmup"].append(float(warmup))

        if self.args.vapo_positive_nll_coef > 0:
            task_rewards = scored.task_rewards()  # weighted task rewards, NaN = unscorable (the reward seam)
            positive = (task_rewards > self.args.vapo_positive_reward_threshold).to(output["old_values"].dtype)
            output["positive_example"] = positive[start : start + rows]

    def _value_warmup(self, mode: str) -> bool:
        return mode == "train" and self.state.global_step < self.args.vapo_value_warmup_steps

    # ------------------------------------------------------------------ loss side
    def _policy_forward(self, model, inputs, compute_entropy: bool = True):
        """The loss step's policy forward; in head mode its result also carries the backbone's last hidden states
        (`PolicyForward.hidden_states`, detached), which the value head reads instead of a pass of its own."""
        if self.critic_mode != "head":
            return super()._policy_forward(model, inputs, compute_entropy)
        captured = []
        length = inputs["completion_ids"].size(1)

        def keep_hidden_states(module, module_args, module_output):
            captured.append(module_output.last_hidden_state[:, -length - 1 : -1].detach())

        handle = self._backbone().register_forward_hook(keep_hidden_states)
        try:
            forward = super()._policy_forward(model, inputs, compute_entropy)
        finally:
            handle.remove()
        return replace(forward, hidden_states=torch.cat(captured)) if captured else forward

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The policy loss (none during value pre-training) plus the critic's terms, from the same policy forward."""
        if self.critic_mode is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if return_outputs:
            raise ValueError("The GRPOTrainer does not support returning outputs")
        mode = "train" if self.model.training else "eval"
        if self._value_warmup(mode):
            return self._critic_loss(inputs, None, mode)
        policy_loss, forward = self._policy_loss(model, inputs)
        return policy_loss + self._critic_loss(inputs, forward, mode)

    def _critic_loss(self, inputs: dict, forward: PolicyForward | None, mode: str) -> torch.Tensor:
        """value_coef × the value loss (+ vapo_positive_nll_coef × the positive-example NLL when the policy forward
        ran), each divided by the gradient-accumulation steps."""
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1
        hidden_states = self._policy_hidden_states(inputs, forward)
        auxiliary = self.args.value_coef * self.value_loss(inputs, hidden_states, mode) / accumulation
        if self.args.vapo_positive_nll_coef > 0 and forward is not None:
            if forward.computed_rows is not None:
                raise RuntimeError(
                    "vapo_positive_nll_coef: the policy forward of this micro-batch did not run on every row."
                )
            nll = self._positive_nll(inputs, forward.logps, mode)
            auxiliary = auxiliary + self.args.vapo_positive_nll_coef * nll / accumulation
        return auxiliary

    def _policy_hidden_states(self, inputs: dict, forward: PolicyForward | None) -> torch.Tensor | None:
        """Head mode: the policy forward's hidden states of every row, (B, T, H), detached; the rows it skipped
        (`skip_zero_advantage`) from one no-grad backbone pass over those rows only. None without them."""
        if self.critic_mode != "head" or forward is None or forward.hidden_states is None:
            return None
        if forward.computed_rows is None:
            return forward.hidden_states
        rows, computed = inputs["completion_ids"].size(0), forward.computed_rows
        skipped = torch.ones(rows, dtype=torch.int8, device=computed.device).index_fill_(0, computed, 0)
        # the skipped rows first; their count is known from the shapes, so no host sync
        skipped_rows = torch.argsort(skipped, descending=True, stable=True)[: rows - computed.numel()]
        hidden_states = forward.hidden_states.new_empty(rows, *forward.hidden_states.shape[1:])
        hidden_states[computed] = forward.hidden_states
        if skipped_rows.numel():
            with torch.no_grad():
                hidden_states[skipped_rows] = self._hidden_states(inputs, skipped_rows).to(hidden_states.dtype)
        return hidden_states

    def value_loss(self, inputs: dict, hidden_states: torch.Tensor | None = None, mode: str = "train") -> torch.Tensor:
        """The clipped value loss of a micro-batch (trl_zoo.critic.clipped_value_loss), with its metrics logged."""
        values = self.critic_values(inputs, grad=True, hidden_states=hidden_states)
        result = clipped_value_loss(
            values, inputs["old_values"], inputs["value_targets"], loss_mask(inputs), self.args.value_clip
        )
        metrics = self._metrics[mode]
        metrics["critic/value_loss"].append(result.loss.item())
        metrics["critic/clip_fraction"].append(result.clip_fraction.item())
        metrics["critic/value_mean"].append(result.mean_value.item())
        return result.loss

    def _positive_nll(self, inputs: dict, logps: torch.Tensor, mode: str) -> torch.Tensor:
        positive = inputs["positive_example"]
        nll = positive_example_nll(logps, loss_mask(inputs), positive)
        self._metrics[mode]["vapo/positive_nll"].append(nll.item())
        self._metrics[mode]["vapo/positive_fraction"].append(positive.float().mean().item())
        return nll

    # ------------------------------------------------------------------ saving and resuming
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call)
        if self.critic_mode is not None and self.args.should_save:
            output_dir = output_dir or self.args.output_dir
            os.makedirs(output_dir, exist_ok=True)
            torch.save(self.critic_state_dict(), os.path.join(output_dir, CRITIC_FILE))

    def critic_state_dict(self) -> dict:
        model = self._unwrapped()
        marker = f".{VALUE_ADAPTER}."
        adapter = {n: p.detach().cpu() for n, p in model.named_parameters() if marker in n}
        return {"mode": self.critic_mode, "value_head": self.value_head.state_dict(), "value_adapter": adapter}

    def load_critic_state_dict(self, state: dict):
        if state["mode"] != self.critic_mode:
            raise ValueError(f"critic_model: the saved critic is {state['mode']!r}, this trainer's {self.critic_mode!r}.")
        self.value_head.load_state_dict(state["value_head"])
        model = self._unwrapped()
        with torch.no_grad():
            for name, tensor in state["value_adapter"].items():
                model.get_parameter(name).copy_(tensor)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if self.critic_mode is not None and checkpoint is not None:
            path = os.path.join(checkpoint, CRITIC_FILE)
            if os.path.exists(path):
                self.load_critic_state_dict(torch.load(path, map_location=self.accelerator.device, weights_only=True))


def check_critic_distribution(accelerator, estimator: str):
    """The critic averages its own gradients across DDP processes; setups that shard parameters are refused, on any
    number of processes (they shard the model, hence the value head, even on one)."""
    if accelerator.distributed_type in _SHARDED:
        raise NotImplementedError(
            f"advantage_estimator: {estimator!r} trains a critic whose value passes run outside the wrapped model, "
            f"so not under {accelerator.distributed_type.value}, which shards its parameters; launch with DDP "
            f"instead (accelerate launch --multi_gpu, or --config_file configs/accelerate/ddp.yaml)."
        )
