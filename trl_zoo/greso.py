"""Moved to `trl_zoo/samplers/greso.py` (the samplers' folder). `import trl_zoo.greso` still works: it is the same
module object as `trl_zoo.samplers.greso`."""

import sys

from .samplers import greso as _module

sys.modules[__name__] = _module
