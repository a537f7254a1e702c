"""Decoding replayed as a CUDA graph, captured by trl_zoo without torch.compile (`compile_generation_backend=
"cuda_graph"`).

A small model decoding a batch is launch-bound: every new token runs the whole forward in Python, hundreds of
small kernels each launched from the host. With a static KV cache every decode step has the same shapes and
reads and writes the same tensors, so the step can be recorded once as a CUDA graph and replayed, one launch a
token, no Python:

    transformers' decoding loop (sampling, logits processors, stopping: unchanged)
        prefill                       eager, as without the option
        decode step 1                 eager, on a side stream (the warm-up a capture needs)
        decode step 2                 captured: input_ids, position_ids, the masks (a tensor, or a dict of them
                                      per attention type, as transformers 5 passes them) copied into static
                                      buffers, the forward recorded (nothing runs), then replayed
        decode steps 3 … n            the new inputs copied into the buffers, the graph replayed

transformers calls its decode forward through `model.get_compiled_call(compile_config)` when the generation config
allows compilation and the cache is static; `install` puts a `GraphedDecodeStep` there (an attribute of the
transformers model, the instance's own: its class is not changed). The static cache writes the new key and value
at its own counter (`cumulative_length`, a device tensor advanced in place), so the replayed graph writes where
the eager forward would. A capture costs one eager step and one recording (no torch.compile and its compile time);
`generate` builds a new static cache each call, so each call captures once; when `generate` returns, the graph, its
memory pool and its hold on the static cache are released (`install` wraps the model's `generate`), so neither
the loss step nor a held-out evaluation carries decoding memory (docs/architecture.md, "Decoding").

What the graph reads at replay — the weights, the LoRA factors, the cache — it reads from the tensors it recorded,
so optimizer updates, the merge of `merge_adapter_for_generation` (written in place) and autocast
(`generation_autocast`, its casts recorded in the graph) reach it. A new key (another cache, other shapes or
dtypes, grad mode or autocast switched) captures again; the key reads tensors nested in a dict, list or tuple by
shape, not by the container's identity (transformers builds a new mask dict every step: keyed by identity, every
step was a new key, so nothing was ever replayed; `keys` counts the keys seen in a row).

On a CPU there are no CUDA graphs: the step runs the eager forward (the same static cache and masks), so a config
that works on a GPU also runs in the tests. If a capture fails (a forward that synchronises with the host, such
as a model whose mask code reads a tensor's value), one warning says so and decoding stays eager for the rest of
the run.

Tests: tests/test_decode_graph.py.
"""

from __future__ import annotations

import functools
import warnings

import torch


def decoding_model(model):
    """The transformers model whose `generate` runs the decoding loop: under a PEFT wrapper, its base model."""
    get_base_model = getattr(model, "get_base_model", None)
    return get_base_model() if callable(get_base_model) else model


def install(model) -> GraphedDecodeStep:
    """Make transformers' compiled-decoding hook of `model`'s decoding model return a `GraphedDecodeStep`, and its
    `generate` release the step's graph when it returns."""
    target = decoding_model(model)
    step = GraphedDecodeStep(target)
    target.get_compiled_call = step.as_compiled_call
    generate = target.generate

    @functools.wraps(generate)
    def generate_then_release(*args, **kwargs):
        warm_ups, replays = step.warm_ups, step.replays
        try:
            return generate(*args, **kwargs)
        finally:
            step.release()
            step.warn_if_never_replayed(step.warm_ups - warm_ups, step.replays - replays)

    target.generate = generate_then_release
    return step


def _key_part(value):
    """What a capture depends on: a tensor's shape, dtype and device (not its values), a container's structure, a
    scalar's value, any other object's identity (the static cache)."""
    if torch.is_tensor(value):
        return ("tensor", tuple(value.shape), value.dtype, value.device)
    if isinstance(value, dict):
        return ("dict", tuple(sorted((name, _key_part(item)) for name, item in value.items())))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_key_part(item) for item in value))
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    return ("object", id(value))


def _static_copy(value):
    """`value` with every tensor in it (nested in dicts, lists, tuples) cloned: the buffers a graph reads."""
    if torch.is_tensor(value):
        return value.clone()
    if isinstance(value, dict):
        return {name: _static_copy(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_static_copy(item) for item in value)
    return value


def _holds_tensors(value) -> bool:
    if torch.is_tensor(value):
        return True
    if isinstance(value, dict):
        return any(_holds_tensors(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_tensors(item) for item in value)
    return False


def _copy_into(buffer, value) -> None:
    """Copy the tensors of `value` into the matching tensors of `buffer` (built by `_static_copy`, same key)."""
    if torch.is_tensor(buffer):
        buffer.copy_(value)
    elif isinstance(buffer, dict):
        for name, item in buffer.items():
            _copy_into(item, value[name])
    elif isinstance(buffer, (list, tuple)):
        for item, new in zip(buffer, value):
            _copy_into(item, new)


class GraphedDecodeStep:
    """transformers' decode forward, replayed from a CUDA graph per key (module docstring). Counts what it did:
    `eager_steps`, `captures`, `replays`, and `keys` (the keys seen in a row: one per `generate` call when every
    decode step has the same shapes)."""

    def __init__(self, model):
        self.model = model
        self.eager_steps = 0
        self.captures = 0
        self.replays = 0
        self.keys = 0
        self.warm_ups = 0
        self._warned_never_replayed = False
        self.disabled_because: str | None = None
        self._stream = None
        self.release()

    @property
    def holds_a_graph(self) -> bool:
        return self._graph is not None

    def release(self) -> None:
        """Drop the graph, its memory pool and its references to the static cache (the cache's memory with them)."""
        self._key = None
        self._warm = False
        self._graph = None
        self._inputs: dict = {}
        self._output = None

    def as_compiled_call(self, compile_config=None):
        return self

    def _key_of(self, inputs: dict) -> tuple:
        device = next((v.device for v in inputs.values() if torch.is_tensor(v)), None)
        autocast = (torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type)) if device else None
        return (tuple(sorted((name, _key_part(value)) for name, value in inputs.items())),
                torch.is_grad_enabled(), autocast)

    def __call__(self, **inputs):
        tensors = [v for v in inputs.values() if torch.is_tensor(v)]
        key = self._key_of(inputs)
        if key != self._key:
            self.release()
            self._key = key
            self.keys += 1
        if self.disabled_because is not None or not tensors or tensors[0].device.type != "cuda":
            return self._eager(inputs)
        if self._graph is None:
            if not self._warm:
                self._warm = True
                return self._warm_up(inputs)
            if not self._capture(inputs):
                return self._eager(inputs)
        for name, buffer in self._inputs.items():
            _copy_into(buffer, inputs[name])
        self._graph.replay()
        self.replays += 1
        return self._output

    def _eager(self, inputs):
        self.eager_steps += 1
        return self.model(**inputs)

    def warn_if_never_replayed(self, warm_ups: int, replays: int) -> None:
        """One warning, once a run, when a `generate` call on the GPU warmed up for more than one key and replayed
        nothing: its decode inputs changed key every step, so decoding ran eagerly (silently slower otherwise)."""
        if warm_ups > 1 and replays == 0 and self.disabled_because is None and not self._warned_never_replayed:
            self._warned_never_replayed = True
            warnings.warn(
                f"compile_generation_backend='cuda_graph': a generate call replayed no decode step from a CUDA graph "
                f"({warm_ups} decode steps each had new input shapes or objects); decoding ran eagerly. Please report "
                f"the model's architecture as an issue of trl_zoo.",
                stacklevel=2,
            )

    def _warm_up(self, inputs):
        """One eager step on a side stream: the lazy allocations (cuBLAS workspaces, the caching allocator's blocks)
        happen here, not inside the capture."""
        self.warm_ups += 1
        current = torch.cuda.current_stream()
        side = self._side_stream()
        side.wait_stream(current)
        with torch.cuda.stream(side):
            output = self._eager(inputs)
        current.wait_stream(side)
        return output

    def _side_stream(self) -> torch.cuda.Stream:
        """One side stream for every warm-up and capture: cuBLAS keeps a workspace per stream, so a new
        stream per generation batch would hold one more workspace each time."""
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        return self._stream

    def _capture(self, inputs) -> bool:
        self._inputs = {name: _static_copy(value) for name, value in inputs.items() if _holds_tensors(value)}
        static = {**inputs, **self._inputs}
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=self._side_stream()):
                output = self.model(**static)
        except Exception as error:  # a host synchronisation or an unsupported kernel inside the forward
            self.disabled_because = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
            self.release()
            warnings.warn(
                f"compile_generation_backend='cuda_graph': the decode step could not be captured as a CUDA graph "
                f"({self.disabled_because}); decoding stays eager for this run.",
                stacklevel=2,
            )
            return False
        self._graph, self._output = graph, output
        self.captures += 1
        return True
