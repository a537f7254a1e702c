"""Moved to `trl_zoo/cli/one_gpu.py` (the command line's folder). `import trl_zoo.one_gpu` still works: it is the same
module object as `trl_zoo.cli.one_gpu`, so what is patched through either name is patched for both."""

import sys

from .cli import one_gpu as _module

sys.modules[__name__] = _module
