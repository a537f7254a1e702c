"""The advantage estimator table: the baseline (and scale) that turns rewards into advantages. Every module in this
package registers its estimators on import: adding an estimator is adding one file here (and its test); what the
estimators share (`AdvantageInputs`, group statistics, whitening, GDPO's per-reward form) is in `base.py`.

An estimator is a pure function ``estimator(inputs: AdvantageInputs, args) -> Tensor`` of the rewards of a whole
generation batch (all processes), N = P·G values, P groups of G = num_generations consecutive completions of one
prompt; it returns per-completion (N,) or per-token (N, T) advantages. ``args`` is the trainer's config (any object
with ``advantage_std_unbiased``, ``advantage_epsilon``, ``scale_rewards``). A NaN reward (unscorable) is left out of
every baseline and its advantage comes back NaN (the trainer turns it into 0). With R_i the rewards of one group,
mean and std over it (std unbiased or not per ``advantage_std_unbiased``), ε = ``advantage_epsilon``, l_i lengths:

========================  ===============================================================  ==========================
name                      Â_i                                                              source
========================  ===============================================================  ==========================
grpo                      (R_i − mean R) / (std R + ε); `scale_rewards` "batch" takes the  GRPO, arXiv:2402.03300
                          std over the batch, "none" skips it (TRL's behaviour)
dr_grpo                   R_i − mean R                                                     Dr. GRPO, arXiv:2503.20783
rloo                      R_i − mean_{j≠i} R_j  =  G/(G−1) · (R_i − mean R)                RLOO, arXiv:2402.14740
reinforce                 R_i  (no baseline)                                               Williams 1992
reinforce_batch_baseline  R_i − mean over the whole batch of R                             Williams 1992
reinforce_pp              Â_{i,t} = whiten_batch( R_i − β Σ_{s≥t} KL_{i,s} )               REINFORCE++, 2501.03262
reinforce_pp_baseline     Â_{i,t} = whiten_batch( R_i − mean R − β Σ_{s≥t} KL_{i,s} )      REINFORCE++, 2501.03262
opo                       R_i − Σ_j l_j R_j / Σ_j l_j                                      OPO, arXiv:2505.23585
maxrl                     (R_i − mean R) / mean R where mean R > 0, else 0 (R ≥ 0)         MaxRL, arXiv:2602.02710
optimal_baseline          R_i − Σ_j ‖s_j‖² R_j / Σ_j ‖s_j‖²                                Greensmith et al. 2004
gae                       Â_{i,t} = GAE(γ, λ)_{i,t} of the critic's V(s_t), whitened         GAE, arXiv:1506.02438
a2po                      R_i − V*(x_i), V* = β₁ ln mean_k exp(r_k/β₁) over reference      A*-PO, arXiv:2505.20686
                          samples' rewards r_k (the dataset column reference_rewards)
gigpo                     Â_{i,t} = Â^E_i + ω Â^S_{i,k(t)}: episode advantage plus turn    GiGPO, arXiv:2505.10978
                          k's among the group's turns from the same state (`Turns`)
mt_grpo                   Â_{i,t} = Â^O_i + λ [t in turn 0] Â^T_i: outcome advantage plus  MT-GRPO, arXiv:2505.11821
                          the tool-calling turn's on its tokens (two-turn rollouts, `Turns`)
========================  ===============================================================  ==========================

whiten_batch(x) = (x − mean x) / (std x + ε) over every completion token of the batch, or over the completions
without a mask. The KL terms are there only with ``kl_placement="reward"``, where every estimator's R_i already is
R_i − β Σ_t KL_{i,t}. Groups of unequal size (``AdvantageInputs.group_sizes``): every estimator takes them, its group
statistics over i's own group (docs/formulas.md, "Groups of unequal size"). Each file's docstring has its formula
(‖s_j‖², the score's squared norm in logit space, and why b* minimises the variance: `optimal_baseline.py`).
"""

import importlib
import pkgutil

from .base import (
    AdvantageInputs,
    Turns,
    constant_groups,
    exact_for_constant_groups,
    group_mean,
    nan_std,
    reward_decoupled_advantages,
    weighted_group_baseline,
    whiten,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "AdvantageInputs", "Turns", "constant_groups", "exact_for_constant_groups", "group_mean", "nan_std",
    "reward_decoupled_advantages", "weighted_group_baseline", "whiten",
]
