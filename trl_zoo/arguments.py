"""Moved to `trl_zoo/cli/arguments.py` (the command line's folder). `import trl_zoo.arguments` still works: it is the
same module object as `trl_zoo.cli.arguments`, so what is patched through either name is patched for both."""

import sys

from .cli import arguments as _module

sys.modules[__name__] = _module
