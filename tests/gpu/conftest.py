"""The GPU battery: trl_zoo under real vLLM (TRL's colocate mode) on the packaged SmolLM2-135M-Instruct, dequantized.

Skipped unless CUDA and vLLM are both there. One vLLM engine serves the whole session (`shared_engines`): TRL builds
`LLM(...)` in each trainer's constructor, 60-90 s each on a first start, so the engine is built once, by the first
trainer, and handed to the later ones; each trainer's weight sync then loads its own weights into it, as TRL does
before every generation. The engine's settings are TRL's (`trl/generation/vllm_generation.py`) but for
`max_num_seqs` (the largest any test needs) and `enforce_eager` (no CUDA-graph capture; set
TRL_ZOO_VLLM_EAGER=0 for vLLM's default). Tests that need an engine of their own (sleep mode, a memory share too
small) start a process of their own.

`TRL_ZOO_VLLM_STAND_IN=1` runs the same battery's logic on a CPU, vLLM replaced by tests/vllm_stand_in.py and the
policy by the tiny model, which is how the battery itself is checked without a GPU.

On the GPU: `python -m pytest tests/gpu -q -n 0` (one process; docs/vllm.md gives the setup and the last results).
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

STAND_IN = os.environ.get("TRL_ZOO_VLLM_STAND_IN") == "1"
REAL = torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None
MAX_NUM_SEQS = 64


def pytest_collection_modifyitems(config, items):
    if REAL or STAND_IN:
        return
    skip = pytest.mark.skip(reason="the GPU battery needs CUDA and vLLM (or TRL_ZOO_VLLM_STAND_IN=1)")
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def policy_path() -> str:
    """The policy's checkpoint folder, which vLLM loads by path."""
    if STAND_IN:
        from tests.tiny import model_dir

        return model_dir(0)
    from trl_zoo.io.gguf_checkpoint import policy_path as packaged

    gguf = os.environ.get("TRL_ZOO_SMOLLM2_GGUF")  # a GGUF file outside the pip package
    if gguf:
        return packaged(os.path.dirname(gguf), os.path.basename(gguf))
    return packaged("smollm2-135m-instruct", None)


class SharedEngines:
    """`LLM(...)` built once per (model, context, sleep mode, quantization) and handed out again; counts what TRL
    asked."""

    def __init__(self, build):
        self.build, self.engines, self.requests = build, {}, 0

    def __call__(self, **kwargs):
        self.requests += 1
        key = tuple(kwargs.get(name) for name in ("model", "max_model_len", "enable_sleep_mode", "quantization"))
        if key not in self.engines:
            kwargs["max_num_seqs"] = max(kwargs.get("max_num_seqs") or 0, MAX_NUM_SEQS)
            if os.environ.get("TRL_ZOO_VLLM_EAGER", "1") == "1" and not STAND_IN:
                kwargs["enforce_eager"] = True
            self.engines[key] = self.build(**kwargs)
        return self.engines[key]


@pytest.fixture(scope="session")
def shared_engines():
    import trl.generation.vllm_generation as vllm_generation

    with pytest.MonkeyPatch.context() as patch:
        if STAND_IN:
            from tests import vllm_stand_in

            vllm_stand_in.install(patch)
        engines = SharedEngines(vllm_generation.LLM)
        patch.setattr(vllm_generation, "LLM", engines)
        yield engines


@pytest.fixture(autouse=True)
def _engines(shared_engines):
    """Every test of the battery goes through the shared engines."""
    return shared_engines
