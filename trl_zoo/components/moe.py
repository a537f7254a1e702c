"""Mixture-of-Experts routers of transformers models: find them, and record their log-probabilities per token.

transformers declares each MoE architecture's router module in the model's ``_can_record_outputs["router_logits"]``
(Qwen2-MoE, Qwen3-MoE, Mixtral, DeepSeek, ...): the router class and which of its outputs are the logits.
`find_routers` reads that declaration, so any such model works without a per-architecture table.

`RouterLogpsRecorder` is a context manager that hooks the routers for one forward (possibly run in chunks of
sequences) and keeps, for each completion token and each MoE layer ℓ, only K numbers:

    log p^ℓ(e | x, y_<t) = log_softmax(router logits)_e   at the position whose output predicts y_t

either for the router's own top-K experts (``experts=None``: the old policy's choice, with their indices) or for
the experts given in ``experts`` (the current router scored on the old policy's choice). Results are (B, T, L, K).
The router distribution is the softmax of the logits, which is what Qwen2/3-MoE and Mixtral route with; for
routers that score experts another way (sigmoid with a selection bias, as in DeepSeek-V3) the same softmax is
used as a measure of the router's preference.

The hooks are removed when the block exits, so a recomputation during backward (gradient checkpointing) or any
other forward records nothing.

Tests: tests/test_rspo.py (a tiny Qwen3-MoE's routers found, top-K against its router logits),
tests/test_vllm_paths.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

Tensor = torch.Tensor


@dataclass(frozen=True)
class MoELayerRouter:
    """One MoE layer's router: the module, which of its outputs holds the logits, and how many experts it picks."""

    name: str
    module: nn.Module
    logits_output_index: int
    top_k: int


def _router_specs(model: nn.Module) -> list[tuple[type, int, str | None]]:
    """(router class, logits output index, layer-name filter) declared by every submodel of `model`."""
    specs = []
    for module in model.modules():
        declared = getattr(module, "_can_record_outputs", None)
        if not isinstance(declared, dict) or "router_logits" not in declared:
            continue
        entries = declared["router_logits"]
        for entry in entries if isinstance(entries, list) else [entries]:
            if isinstance(entry, type):  # a bare class: transformers' convention reads output 1
                specs.append((entry, 1, None))
            elif getattr(entry, "target_class", None) is not None:
                specs.append((entry.target_class, entry.index, entry.layer_name))
    return specs


def _top_k(module: nn.Module, model: nn.Module) -> int | None:
    if isinstance(getattr(module, "top_k", None), int):
        return module.top_k
    config = getattr(model, "config", None)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text_config, "num_experts_per_tok", None)


def find_routers(model: nn.Module) -> list[MoELayerRouter]:
    """The MoE routers of `model` in layer order (empty for a dense model). Works through PEFT wrappers."""
    specs = _router_specs(model)
    routers, seen = [], set()
    for name, module in model.named_modules():
        for router_class, index, layer_name in specs:
            if not isinstance(module, router_class) or id(module) in seen:
                continue
            if layer_name is not None and f".{layer_name.strip('.')}." not in f".{name}.":
                continue
            top_k = _top_k(module, model)
            if top_k is None:
                raise ValueError(
                    f"Router {name} ({type(module).__name__}) declares no top_k and the model config has no "
                    f"num_experts_per_tok; cannot tell how many experts it routes each token to."
                )
            routers.append(MoELayerRouter(name, module, index, top_k))
            seen.add(id(module))
    return routers


def expert_index_dtype(num_experts: int) -> torch.dtype:
    """The smallest signed integer type that holds an expert index (stored per token, layer and k)."""
    return torch.int16 if num_experts <= torch.iinfo(torch.int16).max else torch.int32


class RouterLogpsRecorder:
    """Record router log-probs of the completion tokens during the forwards run inside the ``with`` block.

    Args:
        routers: from `find_routers`.
        sequence_length: S, the prompt + completion length of the forward's input ids.
        completion_length: T, the number of completion tokens at the end of each sequence (T < S).
        experts: None to record each router's own top-K; or (B, T, L, K) expert indices to score instead.

    Chunked forwards (TRL scores a batch in chunks of sequences) append in order; `top_k()` / `scored()` return
    the whole batch. Recorded values are detached: the recorder never holds the graph.
    """

    def __init__(
        self,
        routers: list[MoELayerRouter],
        sequence_length: int,
        completion_length: int,
        experts: Tensor | None = None,
    ):
        if not 0 < completion_length < sequence_length:
            raise ValueError(
                f"Router statistics need a non-empty prompt before the {completion_length} completion tokens "
                f"(sequence length {sequence_length})."
            )
        if experts is not None and experts.shape[2] != len(routers):
            raise ValueError(f"experts covers {experts.shape[2]} MoE layers but the model has {len(routers)} routers.")
        self.routers = routers
        self.sequence_length = sequence_length
        self.completion_length = completion_length
        self.experts = experts
        self._logps: list[list[Tensor]] = [[] for _ in routers]
        self._indices: list[list[Tensor]] = [[] for _ in routers]
        self._rows_seen = [0] * len(routers)
        self._handles = []

    def __enter__(self) -> RouterLogpsRecorder:
        for layer, router in enumerate(self.routers):
            self._handles.append(router.module.register_forward_hook(self._hook(layer)))
        return self

    def __exit__(self, *exc_info):
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _hook(self, layer: int):
        def record(module, inputs, output):
            logits = output[self.routers[layer].logits_output_index] if isinstance(output, (tuple, list)) else output
            self._record(layer, logits)

        return record

    def _record(self, layer: int, logits: Tensor):
        length, completion = self.sequence_length, self.completion_length
        logits = logits.detach().reshape(-1, length, logits.shape[-1])
        # position p's output predicts token p + 1: the completion tokens are predicted at [S − T − 1, S − 1)
        logps = logits[:, length - completion - 1 : length - 1].float().log_softmax(-1)
        if self.experts is None:
            values, indices = logps.topk(self.routers[layer].top_k, dim=-1)
            self._indices[layer].append(indices.to(expert_index_dtype(logps.shape[-1])))
        else:
            start = self._rows_seen[layer]
            rows = self.experts[start : start + logps.shape[0], :, layer].long()
            if rows.shape[0] != logps.shape[0]:
                raise RuntimeError(f"Router {self.routers[layer].name} saw more sequences than the given experts.")
            values = logps.gather(-1, rows)
        self._rows_seen[layer] += logps.shape[0]
        self._logps[layer].append(values)

    def _stack(self, per_layer: list[list[Tensor]]) -> Tensor:
        if len(set(self._rows_seen)) != 1 or self._rows_seen[0] == 0:
            raise RuntimeError(
                "MoE routers recorded unequal numbers of sequences per layer "
                f"({dict(zip((r.name for r in self.routers), self._rows_seen))}); the forward skipped a router."
            )
        return torch.stack([torch.cat(chunks) for chunks in per_layer], dim=2)

    def top_k(self) -> tuple[Tensor, Tensor]:
        """(expert indices, their log-probs), each (B, T, L, K): every router's own top-K choice."""
        if self.experts is not None:
            raise RuntimeError("This recorder scored given experts; read `scored()`.")
        return self._stack(self._indices), self._stack(self._logps)

    def scored(self) -> Tensor:
        """(B, T, L, K) log-probs of the given experts under the routers that ran in the block."""
        if self.experts is None:
            raise RuntimeError("This recorder recorded each router's top-K; read `top_k()`.")
        logps = self._stack(self._logps)
        if logps.shape[0] != self.experts.shape[0]:
            raise RuntimeError(f"Routers scored {logps.shape[0]} sequences, expected {self.experts.shape[0]}.")
        return logps
