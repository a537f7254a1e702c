"""Moved to `trl_zoo/cli/reward_names.py` (the command line's folder). `import trl_zoo.reward_names` still works: it is
the same module object as `trl_zoo.cli.reward_names`, so what is patched through either name is patched for both."""

import sys

from .cli import reward_names as _module

sys.modules[__name__] = _module
