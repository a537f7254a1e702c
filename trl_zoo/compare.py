"""Moved to `trl_zoo/cli/compare.py` (the command line's folder). `import trl_zoo.compare` still works: it is the same
module object as `trl_zoo.cli.compare`, so what is patched through either name is patched for both."""

import sys

from .cli import compare as _module

sys.modules[__name__] = _module
