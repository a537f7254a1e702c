"""Trainer hook: MoE router statistics for RSPO."""


class RouterStatsMixin:
    """Not active yet: passes every call through to TRL."""
