"""The loss table. Every module in this package registers its losses on import: adding an algorithm is adding
one file here (and its test)."""

import importlib
import pkgutil

from .. import aggregation  # noqa: F401  (fills the aggregation table the losses' specs are checked against)
from .base import PolicyBatch, PolicyTerm, importance_log_weights

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["PolicyBatch", "PolicyTerm", "importance_log_weights"]
