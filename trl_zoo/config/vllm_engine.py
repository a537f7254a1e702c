"""What vLLM generation (`use_vllm=True`) needs before the first step, each refused in one line naming the field.

- An installed vLLM inside TRL's window (`VLLM_WINDOW`, TRL 1.16's `is_vllm_available` bounds: TRL only warns
  outside them and then fails wherever vLLM's API moved); both modes need it (the server mode's weight
  communicator is vLLM's).
- A context that holds a completion: with `vllm_max_model_length` set, every prompt needs
  `vllm_max_model_length > max_completion_length` tokens of room or vLLM refuses the request mid-run.
- An engine that fits its share of the card: vLLM's colocated engine takes `vllm_gpu_memory_utilization` of the
  card for its weights and KV cache; too small a share fails inside TRL's constructor, deep in vLLM. Its error
  becomes one line naming the two fields that decide it.

The vLLM versions trl_zoo has run with each TRL: docs/vllm.md.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import sys

from packaging.version import Version

VLLM_WINDOW = ("0.22.0", "0.31.0")  # TRL 1.16's supported vLLM versions, both ends included
TESTED_VLLM = "0.26.0"
INSTALL = f"pip install 'vllm=={TESTED_VLLM}' (tested), or any vLLM from {VLLM_WINDOW[0]} to {VLLM_WINDOW[1]}"
# vLLM's words when the engine does not fit its memory share (0.22-0.31: KV cache sizing in the engine core)
MEMORY_WORDS = ("gpu_memory_utilization", "KV cache", "cache blocks", "CUDA out of memory")


def installed_vllm_version() -> str | None:
    """The installed vLLM's version (None: not installed), as TRL reads it: the distribution's, else the module's."""
    if "vllm" not in sys.modules and importlib.util.find_spec("vllm") is None:
        return None
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        import vllm

        return getattr(vllm, "__version__", None)


def check_vllm_engine(config, version: str | None = None) -> None:
    """Raise a one-line ValueError when `use_vllm` cannot work with the installed vLLM or the context length
    (module docstring); `version` defaults to the installed vLLM's."""
    if not config.use_vllm:
        return
    version = version if version is not None else installed_vllm_version()
    if version is None:
        raise ValueError(f"use_vllm=True needs vLLM, which is not installed: {INSTALL}; or set use_vllm=False.")
    low, high = VLLM_WINDOW
    if not Version(low) <= Version(Version(version).base_version) <= Version(high):
        raise ValueError(f"use_vllm=True with vLLM {version}: TRL supports vLLM {low} to {high} only; {INSTALL}.")
    length, completion = config.vllm_max_model_length, config.max_completion_length
    if length is not None and completion is not None and completion >= length:
        raise ValueError(
            f"vllm_max_model_length={length} leaves no room for a prompt beside max_completion_length={completion}: "
            f"set vllm_max_model_length above max_completion_length plus the longest prompt, or leave it None "
            f"(the model's own context)."
        )


@contextlib.contextmanager
def vllm_engine_errors(config):
    """Turn vLLM's failure to fit its colocated engine into its memory share into one line (module docstring)."""
    try:
        yield
    except (ValueError, RuntimeError) as error:
        text = str(error)
        if not (config.use_vllm and config.vllm_mode == "colocate" and any(w in text for w in MEMORY_WORDS)):
            raise
        first = text.strip().splitlines()[0][:300]
        raise ValueError(
            f"vllm_gpu_memory_utilization={config.vllm_gpu_memory_utilization}: vLLM's colocated engine does not fit "
            f"that share of the card (vLLM: {first}); raise vllm_gpu_memory_utilization, or set "
            f"vllm_max_model_length (now {config.vllm_max_model_length}) to what a prompt and a completion need."
        ) from None
