"""Trainer mixins that extend TRL's generation side, each one concept, composed by `trl_zoo.GRPOTrainer`.

Method resolution order (outermost first): router statistics → dynamic sampling → zero-advantage skip → critic →
advantage estimators → KL control → TRL. Each overrides TRL methods and calls `super()`. The critic wraps the advantage hook's
`_estimated_advantages` (values before the estimator, value targets after) and sits inside dynamic sampling, so
its per-row tensors are regrouped with the batch.
"""

from .advantages import AdvantageMixin
from .critic import CriticMixin
from .kl_control import KLControlMixin
from .router import RouterStatsMixin
from .sampling import DynamicSamplingMixin
from .skip_zero_advantage import ZeroAdvantageSkipMixin

HOOK_MIXINS = (
    RouterStatsMixin, DynamicSamplingMixin, ZeroAdvantageSkipMixin, CriticMixin, AdvantageMixin, KLControlMixin
)
