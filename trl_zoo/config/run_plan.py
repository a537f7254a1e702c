"""`RunPlan`: the facts of a run that follow from its config alone, derived once.

    loss_entry                  the loss table's entry of `loss_type`
    aggregate                   the aggregation's function: `loss_aggregation`, else the loss's own
    kl_estimator                the KL estimator's function (`kl_estimator`)
    has_critic                  the estimator reads a critic's values (it declares needs=("values",))
    skips_on_policy_old_logps   `skip_on_policy_old_logps` on and applicable (`old_logps_skip_applies`)

`trl_zoo.GRPOTrainer` builds it once, before TRL's constructor (`trainer.plan`); the loss step and every component
read it there (`Component.plan`). The config's checks, which run before any plan, and the CLI ask `has_critic` of an
estimator's name: the one place that derives it. Frozen: nothing changes it once built.

Tests: tests/test_run_plan.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..registry import ADVANTAGES, AGGREGATIONS, KL_ESTIMATORS, LOSSES, Entry
from .generation_speed import old_logps_skip_applies


def has_critic(advantage_estimator: str | None) -> bool:
    """Whether the estimator named `advantage_estimator` reads a critic's values (None: TRL's advantages, no)."""
    return advantage_estimator is not None and "values" in ADVANTAGES.get(advantage_estimator).spec.needs


@dataclass(frozen=True)
class RunPlan:
    """The facts of one run derived from its config (module docstring)."""

    loss_entry: Entry
    aggregate: Callable
    kl_estimator: Callable
    has_critic: bool
    skips_on_policy_old_logps: bool

    @classmethod
    def of(cls, args) -> RunPlan:
        """The plan of the validated config `args`."""
        loss_entry = LOSSES.get(args.loss_type)
        estimator = args.advantage_estimator
        return cls(
            loss_entry=loss_entry,
            aggregate=AGGREGATIONS.get(args.loss_aggregation or loss_entry.spec.aggregation).fn,
            kl_estimator=KL_ESTIMATORS.get(args.kl_estimator).fn,
            has_critic=has_critic(estimator),
            skips_on_policy_old_logps=old_logps_skip_applies(args, bool(loss_entry.spec.requires_moe)),
        )
