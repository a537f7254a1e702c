"""Trainer mixins that extend TRL's generation side, each one concept, composed by `trl_zoo.GRPOTrainer`.

Method resolution order (outermost first): router statistics → dynamic sampling → advantage estimators →
KL control → TRL. Each overrides TRL methods and calls `super()`.
"""

from .advantages import AdvantageMixin
from .kl_control import KLControlMixin
from .router import RouterStatsMixin
from .sampling import DynamicSamplingMixin

HOOK_MIXINS = (RouterStatsMixin, DynamicSamplingMixin, AdvantageMixin, KLControlMixin)
