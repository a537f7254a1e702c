"""What the generation-speed fields need from the installed libraries, checked when the config is built.

Tests: tests/test_autocast_generation.py, tests/test_speed_recipe.py.
"""

from __future__ import annotations

import transformers
from packaging.version import Version

# the first transformers whose StaticLayer allocates the values in their own dtype, not the keys'
MIXED_DTYPE_STATIC_CACHE_SINCE = Version("5.24")


def static_cache_fails_on_mixed_dtypes() -> bool:
    """Whether the installed transformers' static KV cache fails on the fp32 keys and bf16 values of autocast."""
    return Version(transformers.__version__).release < MIXED_DTYPE_STATIC_CACHE_SINCE.release
