"""trl_zoo: GRPO-family algorithms for TRL as a plugin table, behind a drop-in `GRPOTrainer`.

The names below are imported when first used (`from trl_zoo import GRPOTrainer` imports the trainer then), so that
importing the package costs nothing: `trl-zoo --help` and `--version` start without torch (tests/test_layout.py).

Tests: tests/test_plugin_package.py (`register_loss` in an installed package), tests/test_cli_messages.py (its
aggregation check)."""

import importlib

# public name -> the module that defines it
PUBLIC = {
    **dict.fromkeys(("ADVANTAGES", "AGGREGATIONS", "KL_ESTIMATORS", "LOSSES", "SAMPLERS", "TABLES", "Registry"),
                    "registry"),
    **dict.fromkeys(("AdvantageSpec", "LossSpec", "PluginField", "SamplerSpec"), "specs"),
    **dict.fromkeys(("PolicyBatch", "PolicyTerm"), "losses.base"),
    "GRPOConfig": "config",
    "GRPOTrainer": "trainer",
    "sample_reference_rewards": "io.reference_rewards",
}


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{PUBLIC[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *PUBLIC})


__version__ = "0.1.0"


def register_loss(name: str, *, description: str, source: str = "", override=False, **declarations):
    """Decorator: add `fn(batch: PolicyBatch, args) -> PolicyTerm` to the loss table under `name`. `declarations`
    are `LossSpec` fields (aggregation, sequence_level, ...); the others keep their defaults, as `LOSSES.register`
    and a bare function registered through the `trl_zoo.losses` entry point do. An `aggregation` that is not in
    the aggregation table fails here, not at the first training step."""
    from .registry import AGGREGATIONS, LOSSES

    aggregation_name = declarations.get("aggregation")
    if aggregation_name is not None and aggregation_name not in AGGREGATIONS:
        raise ValueError(AGGREGATIONS.unknown_message(aggregation_name, f"register_loss({name!r}): aggregation"))
    return LOSSES.register(name, description=description, source=source, override=override, **declarations)


def available_losses() -> dict[str, str]:
    """Every registered loss name with its one-line description."""
    from .registry import LOSSES

    return {entry.name: entry.description for entry in LOSSES.entries()}


__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "AdvantageSpec",
    "GRPOConfig",
    "GRPOTrainer",
    "KL_ESTIMATORS",
    "LOSSES",
    "LossSpec",
    "PluginField",
    "PolicyBatch",
    "PolicyTerm",
    "Registry",
    "SAMPLERS",
    "SamplerSpec",
    "TABLES",
    "available_losses",
    "register_loss",
    "sample_reference_rewards",
]
