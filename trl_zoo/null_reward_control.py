"""Moved to `trl_zoo/cli/null_reward_control.py` (the command line's folder). `import trl_zoo.null_reward_control`
still works: it is the same module object as `trl_zoo.cli.null_reward_control`, so what is patched through either name
is patched for both."""

import sys

from .cli import null_reward_control as _module

sys.modules[__name__] = _module
