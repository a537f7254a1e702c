"""The critic of PPO with GAE and VAPO: a value function V(s_t) sharing the policy's frozen base (formulas in
`trl_zoo/value_function.py`), as one object, `ValueModel`, that the component `components/critic.py` creates and
calls.

The critic takes one of two forms (``critic_model``):

- ``"adapter"`` (default for a PEFT policy): a second LoRA adapter, ``"value"``, with the policy adapter's
  configuration, plus a scalar head V = w·h + b on the backbone's last hidden state. The value pass switches the
  active adapter with peft's ``set_adapter`` (no weights are copied) and runs the backbone only, never the LM head;
  the trainable flags of the policy and the critic, which ``set_adapter`` changes, are restored after each switch.
  Gradient checkpointing is off for the value pass (its recomputation would run when the policy adapter is active).
- ``"head"`` (the fallback for a model without PEFT): an MLP head (one hidden layer) on the policy's own last hidden
  states, *detached*, so the value regression never moves the policy. The hidden states are those of the loss's
  policy forward (`PolicyForward.hidden_states`, a forward hook on the backbone: no extra forward); the rows that
  forward skipped (``skip_zero_advantage``) and value pre-training (no policy forward) take a no-grad backbone pass.

Why the adapter is the default for a PEFT policy, and what it costs: docs/algorithms.md, "A learned critic". Either
way the value loss reaches only the critic's parameters and the policy loss only the policy's.

Per generation round the critic gives ``old_values`` V_old (B, T) from a no-grad value pass (`old_values`), which
the estimator reads as ``AdvantageInputs.values`` over the global batch, and, from what the estimator saw, the
value targets ``value_targets`` (Monte-Carlo λ = 1 during value pre-training) and, for VAPO's positive-example loss,
``positive_example`` (task reward > threshold) per row (`add_value_targets`). Per micro-batch its loss (`loss`) is
``value_coef`` × the clipped value loss plus ``vapo_positive_nll_coef`` × the positive-example NLL (on the log-probs
of the loss's policy forward), each a micro-batch token mean divided by the gradient-accumulation steps.

The head is a submodule of the model (``trl_zoo_value_head``), so gradient clipping (global over policy and critic,
as in PPO implementations with one optimizer) and the logged grad norm cover it. The critic's parameters form their
own optimizer group (``value_learning_rate``, or learning_rate), scheduled with the trainer's (`add_param_groups`),
and are saved as ``critic.pt`` (`save`, `load`). Several processes: DDP only; the critic's parameters are kept out
of DDP, every process starts from rank 0's weights and their gradients are averaged once per optimizer step, before
clipping (`average_gradients`). DeepSpeed and FSDP shard the parameters and are refused.

Logged: ``critic/value_loss``, ``critic/clip_fraction``, ``critic/value_mean`` (per micro-batch), and per generation
round ``critic/explained_variance`` (1 − Var(R̂ − V_old)/Var(R̂), the critic before this batch against its new
targets), ``critic/return_mean``, ``critic/gae_mean`` and ``critic/gae_std`` (token advantages before whitening),
``critic/value_warmup`` (1 during value pre-training), and ``vapo/positive_nll``, ``vapo/positive_fraction``.

Tests: tests/test_critic.py (value passes, targets, the clipped value loss, gradient separation, critic.pt),
tests/test_critic_multiprocess.py (DDP gradient averaging across two processes).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

import torch
from accelerate.utils import DistributedType, is_peft_model
from trl.models.utils import disable_gradient_checkpointing

from ..advantages.gae import policy_gae
from ..hooks.generation import ScoredRound, row_chunks
from ..hooks.loss_step import PolicyForward
from ..hooks.model_inputs import forward_inputs, is_multimodal, loss_mask
from ..hooks.trl_access import ignored_by_ddp
from ..run_files import torch_save
from ..value_function import ValueHead, clipped_value_loss, explained_variance, positive_example_nll, value_targets

VALUE_ADAPTER = "value"
VALUE_HEAD = "trl_zoo_value_head"
CRITIC_FILE = "critic.pt"
# distributed setups that shard parameters: the critic's own gradient averaging does not apply there
_SHARDED = (DistributedType.DEEPSPEED, DistributedType.FSDP, DistributedType.MEGATRON_LM)


class ValueModel:
    """A value function sharing the policy's frozen base: its own LoRA adapter + head, or a head (module docstring).

    Built on the trainer's `model` (PEFT-wrapped or not, before any DDP wrapping), with its `accelerator` and
    `args`; `log_metric(name, value, mode)` logs one value of a metric with the trainer's (`trl_access.log_metric`).
    """

    def __init__(self, model, accelerator, args, log_metric: Callable[[str, float, str], None]):
        check_critic_distribution(accelerator, args.advantage_estimator)
        self.model, self.accelerator, self.args, self.log_metric = model, accelerator, args, log_metric
        unwrapped = self._unwrapped()
        mode = args.critic_model or ("adapter" if is_peft_model(unwrapped) else "head")
        if mode == "adapter" and not is_peft_model(unwrapped):
            raise ValueError(
                "critic_model: 'adapter' needs a PEFT policy (pass peft_config=...); use critic_model='head' for a "
                "model without adapters."
            )
        hidden_size = unwrapped.config.get_text_config().hidden_size
        marker = f".{VALUE_ADAPTER}."
        # taken before the value adapter exists: peft's add_adapter / set_adapter reset trainable flags
        self._policy_parameters = [p for n, p in unwrapped.named_parameters() if p.requires_grad and marker not in n]
        adapter_parameters = []
        if mode == "adapter":
            if VALUE_ADAPTER not in unwrapped.peft_config:
                value_config = copy.deepcopy(unwrapped.peft_config[unwrapped.active_adapter])
                value_config.inference_mode = False
                if hasattr(value_config, "modules_to_save"):
                    value_config.modules_to_save = None  # the critic never uses the LM head or embeddings
                unwrapped.add_adapter(VALUE_ADAPTER, value_config)
            adapter_parameters = [p for n, p in unwrapped.named_parameters() if marker in n]
        self.mode: str = mode  # "adapter" | "head"
        self.value_head = ValueHead(hidden_size, hidden_layers=0 if mode == "adapter" else 1).to(accelerator.device)
        # a submodule of the model: gradient clipping, the logged grad norm and device moves include it
        (unwrapped.get_base_model() if is_peft_model(unwrapped) else unwrapped).add_module(VALUE_HEAD, self.value_head)
        self.parameters: list[torch.nn.Parameter] = adapter_parameters + list(self.value_head.parameters())
        self._restore_trainable()
        self._keep_out_of_ddp()
        if accelerator.num_processes > 1:
            self._share_weights_across_processes()

    # ------------------------------------------------------------------ several processes (DDP)
    def _keep_out_of_ddp(self):
        """Mark the critic's parameters as ignored by any DistributedDataParallel that later wraps the model: its
        value passes run outside the wrapped forward, so DDP's reducer would miss or wait for their gradients. The
        mark is inert without DDP, and is set whatever the process count: accelerate wraps the model in DDP on a
        one-process distributed launch too (torchrun --nproc_per_node 1 on CPU)."""
        critic_ids = {id(parameter) for parameter in self.parameters}
        names = [name for name, parameter in self.model.named_parameters() if id(parameter) in critic_ids]
        ignored_by_ddp(self.model, names)

    def _share_weights_across_processes(self):
        """Start every process from rank 0's critic weights; their gradients are averaged at each optimizer step
        (`average_gradients`)."""
        with torch.no_grad():
            for parameter in self.parameters:
                torch.distributed.broadcast(parameter.data, src=0)

    def average_gradients(self):
        """All-reduce (mean) the critic's accumulated gradients in one flat tensor, before clipping and the step;
        called once per optimizer step when several processes train."""
        parameters = self.parameters
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
        for parameter in self._policy_parameters + self.parameters:
            parameter.requires_grad_(True)

    @contextmanager
    def left_out(self) -> Iterator[None]:
        """The critic's parameters not trainable for the duration (so that an optimizer built inside puts none of
        them in the policy's groups); every trainable flag restored after, however the block ends."""
        for parameter in self.parameters:
            parameter.requires_grad_(False)
        try:
            yield
        finally:
            self._restore_trainable()

    def add_param_groups(self, optimizer: torch.optim.Optimizer) -> None:
        """The critic's parameters that `optimizer` lacks as groups of their own: ``value_learning_rate`` (or
        learning_rate), weight decay on the matrices only."""
        grouped = {id(p) for group in optimizer.param_groups for p in group["params"]}
        missing = [p for p in self.parameters if id(p) not in grouped]
        if missing:
            learning_rate = self.args.value_learning_rate or self.args.learning_rate
            decay = [p for p in missing if p.dim() > 1]
            no_decay = [p for p in missing if p.dim() <= 1]  # biases
            for params, weight_decay in ((decay, self.args.weight_decay), (no_decay, 0.0)):
                if params:
                    optimizer.add_param_group({"params": params, "lr": learning_rate, "weight_decay": weight_decay})

    # ------------------------------------------------------------------ value passes
    def backbone(self):
        """The transformer without its LM head (PreTrainedModel.base_model), inside any PEFT wrapper."""
        model = self._unwrapped()
        return (model.get_base_model() if is_peft_model(model) else model).base_model

    @contextmanager
    def active(self) -> Iterator[None]:
        """The value adapter active for the duration (adapter mode); every trainable flag kept as it was."""
        if self.mode != "adapter":
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

    def hidden_states(self, batch: dict, rows: slice | torch.Tensor | None = None) -> torch.Tensor:
        """Last hidden states at the positions that predict the completion tokens, (B, T, H) (of `rows` only, a
        slice or indices, when given), with the active adapter; gradient as the caller's grad mode."""
        if is_multimodal(batch):
            raise NotImplementedError("advantage_estimator='gae': the critic supports text-only models.")
        rows = slice(None) if rows is None else rows
        input_ids, attention_mask, length, _ = forward_inputs(batch)
        with self.accelerator.autocast():
            output = self.backbone()(input_ids=input_ids[rows], attention_mask=attention_mask[rows], use_cache=False)
        return output.last_hidden_state[:, -length - 1 : -1]

    @contextmanager
    def keeping_hidden_states(self, length: int) -> Iterator[list[torch.Tensor]]:
        """Yields a list that gets, for every backbone forward inside the block, its last hidden states at the
        positions predicting the last `length` tokens, detached (head mode: the loss's policy forward)."""
        captured: list[torch.Tensor] = []

        def keep_hidden_states(module, module_args, module_output):
            captured.append(module_output.last_hidden_state[:, -length - 1 : -1].detach())

        handle = self.backbone().register_forward_hook(keep_hidden_states)
        try:
            yield captured
        finally:
            handle.remove()

    def values(self, batch: dict, grad: bool = True, hidden_states: torch.Tensor | None = None) -> torch.Tensor:
        """V(s_t) for every completion token of `batch`, (B, T), float32. In head mode the hidden states are detached
        (``hidden_states`` from the policy forward, or a no-grad pass)."""
        if self.mode == "head":
            if hidden_states is None:
                with torch.no_grad():
                    hidden_states = self.hidden_states(batch)
            return self.value_head(hidden_states.detach().float())
        with (
            nullcontext() if grad else torch.no_grad(),
            self.active(),
            disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs),
        ):
            return self.value_head(self.hidden_states(batch).float())

    def old_values(self, batch: dict, chunk: int) -> torch.Tensor:
        """V_old(s_t) of a freshly generated batch, (B, T), in row chunks of `chunk`; the caller holds no grad and
        gradient checkpointing off (the generation seam's `extra_pass`)."""
        rows = batch["completion_ids"].size(0)
        with self.active():
            values = [self.value_head(self.hidden_states(batch, part).float()) for part in row_chunks(rows, chunk)]
        return torch.cat(values)

    # ------------------------------------------------------------------ generation side
    def value_warmup(self, mode: str, global_step: int) -> bool:
        """VAPO's value pre-training: the first ``vapo_value_warmup_steps`` optimizer steps of training."""
        return mode == "train" and global_step < self.args.vapo_value_warmup_steps

    def add_value_targets(self, scored: ScoredRound, mode: str, warmup: bool) -> None:
        """This process's rows of the round get ``value_targets`` (λ = 1 during value pre-training) and, with VAPO's
        positive-example loss, ``positive_example``, from what the estimator saw (`scored.advantage_inputs`, every
        process's rows); the round's critic metrics are logged."""
        output = scored.batch
        inputs = scored.advantage_inputs  # the global batch the estimator saw
        targets = value_targets(inputs, self.args, lam=1.0 if warmup else None)
        rows, length = output["completion_mask"].shape
        start = self.accelerator.process_index * rows
        output["value_targets"] = targets[start : start + rows, :length].to(output["old_values"].dtype)

        log = self.log_metric
        log("critic/explained_variance", explained_variance(inputs.values, targets, inputs.mask), mode)
        selected = inputs.mask.bool() & torch.isfinite(targets)
        log("critic/return_mean", targets[selected].mean().item() if selected.any() else float("nan"), mode)
        raw = policy_gae(inputs, self.args)[selected]
        if raw.numel():
            log("critic/gae_mean", raw.mean().item(), mode)
            log("critic/gae_std", raw.std(unbiased=False).item(), mode)
        if mode == "train":
            log("critic/value_warmup", float(warmup), mode)

        if self.args.vapo_positive_nll_coef > 0:
            task_rewards = scored.task_rewards()  # weighted task rewards, NaN = unscorable (the reward seam)
            positive = (task_rewards > self.args.vapo_positive_reward_threshold).to(output["old_values"].dtype)
            output["positive_example"] = positive[start : start + rows]

    # ------------------------------------------------------------------ loss side
    def loss(self, inputs: dict, forward: PolicyForward | None, mode: str, accumulation: float) -> torch.Tensor:
        """value_coef × the value loss (+ vapo_positive_nll_coef × the positive-example NLL when the policy forward
        ran, `forward`), each divided by the gradient-accumulation steps `accumulation`."""
        hidden_states = self._policy_hidden_states(inputs, forward)
        auxiliary = self.args.value_coef * self.value_loss(inputs, hidden_states, mode) / accumulation
        if self.args.vapo_positive_nll_coef > 0 and forward is not None:
            if forward.computed_rows is not None:
                raise RuntimeError(
                    "vapo_positive_nll_coef: the policy forward of this micro-batch did not run on every row."
                )
            nll = self.positive_nll(inputs, forward.logps, mode)
            auxiliary = auxiliary + self.args.vapo_positive_nll_coef * nll / accumulation
        return auxiliary

    def _policy_hidden_states(self, inputs: dict, forward: PolicyForward | None) -> torch.Tensor | None:
        """Head mode: the policy forward's hidden states of every row, (B, T, H), detached; the rows it skipped
        (`skip_zero_advantage`) from one no-grad backbone pass over those rows only. None without them."""
        if self.mode != "head" or forward is None or forward.hidden_states is None:
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
                hidden_states[skipped_rows] = self.hidden_states(inputs, skipped_rows).to(hidden_states.dtype)
        return hidden_states

    def value_loss(self, inputs: dict, hidden_states: torch.Tensor | None = None, mode: str = "train") -> torch.Tensor:
        """The clipped value loss of a micro-batch (`clipped_value_loss`), with its metrics logged."""
        values = self.values(inputs, grad=True, hidden_states=hidden_states)
        result = clipped_value_loss(
            values, inputs["old_values"], inputs["value_targets"], loss_mask(inputs), self.args.value_clip
        )
        self.log_metric("critic/value_loss", result.loss.item(), mode)
        self.log_metric("critic/clip_fraction", result.clip_fraction.item(), mode)
        self.log_metric("critic/value_mean", result.mean_value.item(), mode)
        return result.loss

    def positive_nll(self, inputs: dict, logps: torch.Tensor, mode: str) -> torch.Tensor:
        """VAPO's positive-example NLL of a micro-batch (`positive_example_nll`), with its metrics."""
        positive = inputs["positive_example"]
        nll = positive_example_nll(logps, loss_mask(inputs), positive)
        self.log_metric("vapo/positive_nll", nll.item(), mode)
        self.log_metric("vapo/positive_fraction", positive.float().mean().item(), mode)
        return nll

    # ------------------------------------------------------------------ weights
    def state_dict(self) -> dict:
        """The critic's weights: ``mode``, ``value_head`` (its state dict), ``value_adapter`` (name → tensor, CPU)."""
        model = self._unwrapped()
        marker = f".{VALUE_ADAPTER}."
        adapter = {n: p.detach().cpu() for n, p in model.named_parameters() if marker in n}
        return {"mode": self.mode, "value_head": self.value_head.state_dict(), "value_adapter": adapter}

    def load_state_dict(self, state: dict):
        check_saved_mode(state, self.mode)
        self.value_head.load_state_dict(state["value_head"])
        model = self._unwrapped()
        with torch.no_grad():
            for name, tensor in state["value_adapter"].items():
                model.get_parameter(name).copy_(tensor)

    def save(self, output_dir: str):
        """``critic.pt`` in `output_dir` (created if missing)."""
        os.makedirs(output_dir, exist_ok=True)
        torch_save(self.state_dict(), os.path.join(output_dir, CRITIC_FILE))

    def load(self, checkpoint: str):
        """The weights of ``critic.pt`` in `checkpoint`, if it has one."""
        path = os.path.join(checkpoint, CRITIC_FILE)
        if os.path.exists(path):
            self.load_state_dict(torch.load(path, map_location=self.accelerator.device, weights_only=True))


def check_saved_mode(state: dict, mode: str | None):
    """A saved critic loads only into a critic of its own form (`mode`: None for a trainer without one)."""
    if state["mode"] != mode:
        raise ValueError(f"critic_model: the saved critic is {state['mode']!r}, this trainer's {mode!r}.")


def check_critic_distribution(accelerator, estimator: str):
    """The critic averages its own gradients across DDP processes; setups that shard parameters are refused, on any
    number of processes (they shard the model, hence the value head, even on one)."""
    if accelerator.distributed_type in _SHARDED:
        raise NotImplementedError(
            f"advantage_estimator: {estimator!r} trains a critic whose value passes run outside the wrapped model, "
            f"so not under {accelerator.distributed_type.value}, which shards its parameters; launch with DDP "
            f"instead (accelerate launch --multi_gpu, or --config_file configs/accelerate/ddp.yaml)."
        )
