"""Moved to `trl_zoo/cli/train_help.py` (the command line's folder). `import trl_zoo.train_help` still works: it is the
same module object as `trl_zoo.cli.train_help`, so what is patched through either name is patched for both."""

import sys

from .cli import train_help as _module

sys.modules[__name__] = _module
