"""Trainer hook: TRL's `model.generate` decoding compiled with a static KV cache (`compile_generation`).

transformers compiles a model's decoding forward by itself when `generate` runs with a compileable (static) cache,
unless the generation config says `disable_compile` (`GenerationMixin._valid_auto_compile_criteria`); its
`CompileConfig` defaults to inductor with `mode="reduce-overhead"`, i.e. generated kernels and CUDA graphs, which
replace the kernel launches that dominate the decoding of a small model. TRL 1.16 builds its generation config with
`disable_compile=True` (`GRPOTrainer.__init__`), so the `model.generate` path never compiles, and passing
`generation_kwargs={"disable_compile": False}` is a duplicate keyword there. With the field on, this layer sets, on
the generation config TRL built:

    disable_compile = False,  cache_implementation = "static" (when unset),  compile_config = CompileConfig()

`compile_generation_backend="cudagraphs"` sets `CompileConfig(backend="cudagraphs", mode=None)` instead: torch
traces the decoding and replays it as CUDA graphs without generating kernels. On a CPU that backend runs the traced
graph eagerly.

Measured (benchmarks/compiled_decoding.py; SmolLM2-135M, 256 × 64 tokens, H200): decoding takes 0.33× eager's time
with inductor, after a first call of 31.5 s (9.0 s with the compile cache a previous process left), and 0.62× with
"cudagraphs", after 12.2 s: the graphs remove the launches, inductor's fused kernels most of the rest.

The prefill stays eager; the decode forward is compiled once and again for a new shape (after that torch marks the
length dynamic), so the first generation batches pay the compile. On a CPU transformers compiles only with
`compile_config._compile_all_devices`, which this layer sets there too (tests run it; it is no speed lever there).
The LoRA layers, merged or not (`merge_adapter_for_generation`), are compiled with the rest; the weights are read
at every call, so optimizer updates and the merge reach the compiled decoding.

Refused when the config is built (`config.py`): with vLLM (it compiles its own decoding), with TRL's continuous
batching (its own `transformers_continuous_batching_config` has the compile options) and with a cache
implementation other than "static" (the others are not compileable).

Tests: tests/test_compiled_generation.py.
"""

from __future__ import annotations

from transformers import CompileConfig


class CompiledGenerationMixin:
    """Turns transformers' compiled decoding on in TRL's generation config when `compile_generation` is set."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not getattr(self.args, "compile_generation", False):
            return
        config = self.generation_config
        config.disable_compile = False
        config.cache_implementation = config.cache_implementation or "static"
        if config.compile_config is None:
            backend = getattr(self.args, "compile_generation_backend", "inductor")
            config.compile_config = (
                CompileConfig() if backend == "inductor" else CompileConfig(backend=backend, mode=None)
            )
        if self.accelerator.device.type == "cpu":
            config.compile_config._compile_all_devices = True
