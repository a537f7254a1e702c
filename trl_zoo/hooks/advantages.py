"""Trainer hook: advantage estimators from the advantage table."""


class AdvantageMixin:
    """Not active yet: passes every call through to TRL."""
