"""Moved to `trl_zoo/cli/preset_lengths.py` (the command line's folder). `import trl_zoo.preset_lengths` still works:
it is the same module object as `trl_zoo.cli.preset_lengths`, so what is patched through either name is patched for
both."""

import sys

from .cli import preset_lengths as _module

sys.modules[__name__] = _module
