"""Moved to `trl_zoo/cli/train.py` (the command line's folder). `import trl_zoo.train` still works: it is the same
module object as `trl_zoo.cli.train`, so what is patched through either name is patched for both."""

import sys

from .cli import train as _module

sys.modules[__name__] = _module
