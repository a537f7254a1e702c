"""Moved to `trl_zoo/cli/cpu_threads.py` (the command line's folder). `import trl_zoo.cpu_threads` still works: it is
the same module object as `trl_zoo.cli.cpu_threads`, so what is patched through either name is patched for both."""

import sys

from .cli import cpu_threads as _module

sys.modules[__name__] = _module
