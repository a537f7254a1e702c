"""Moved to `trl_zoo/cli/report.py` (the command line's folder). `import trl_zoo.report` still works: it is the same
module object as `trl_zoo.cli.report`, so what is patched through either name is patched for both."""

import sys

from .cli import report as _module

sys.modules[__name__] = _module
