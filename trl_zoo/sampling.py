"""Moved to the samplers' folder, `trl_zoo/samplers/`: the contract in `base.py`, one file per sampler. The names
this module had are re-exported here, so `from trl_zoo.sampling import ...` still works."""

from .samplers.base import (  # noqa: F401
    MAX_ROUNDS,
    ON_EXHAUSTED,
    DynamicSamplingExhausted,
    Round,
    SampledBatch,
    SamplingSession,
    fill_batch,
    group_reward_spread,
    informative_groups,
    round_metrics,
    sampling_metrics,
)
from .samplers.base import round_metrics as _metrics  # noqa: F401  (its earlier, private name)
from .samplers.resample import resample  # noqa: F401
from .samplers.reweight import reweight  # noqa: F401
