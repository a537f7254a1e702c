"""Trainer hook: dynamic sampling and overlong reward shaping."""


class DynamicSamplingMixin:
    """Not active yet: passes every call through to TRL."""
