"""Trainer hook: KL in the reward, adaptive KL coefficient and reference resets."""


class KLControlMixin:
    """Not active yet: passes every call through to TRL."""
