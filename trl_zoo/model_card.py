"""Moved to `trl_zoo/cli/model_card.py` (the command line's folder). `import trl_zoo.model_card` still works: it is the
same module object as `trl_zoo.cli.model_card`, so what is patched through either name is patched for both."""

import sys

from .cli import model_card as _module

sys.modules[__name__] = _module
