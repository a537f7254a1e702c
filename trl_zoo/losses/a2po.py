"""A*-PO's least-squares policy loss (Brantley et al., "Accelerating RL for LLM Reasoning with Optimal Advantage
Regression", arXiv:2505.20686; TRL's experimental `A2POTrainer`, trl/experimental/a2po in TRL 1.16).

The KL-regularised optimum π* ∝ π_ref · exp(r/β) satisfies β ln(π*(y|x)/π_ref(y|x)) = r(x, y) − V*(x). A*-PO regresses
the policy's implicit reward onto that optimal advantage, estimated with V* from the reference's samples
(`advantages/a2po.py`), on the policy's own completions:

    ℓ_i = ( β₂ · Σ_t m_{i,t} (log π_θ(y_{i,t}) − log π_ref(y_{i,t}))  −  Â_i )²        Â_i = R_i − V*(x_i)

    ∂ℓ_i / ∂log π_θ(y_{i,t}) = 2 β₂ (β₂ ln(π_θ/π_ref)(y_i) − Â_i) · m_{i,t}

aggregated as the mean over the completions (`sequence_mean` of a per-sequence term: (1/B) Σ_i ℓ_i). The sum runs
over the completion tokens (the sequence's log-ratio, not its token mean). No ratio to π_old and no clip: the square
is the trust region, and the KL regularisation is inside it (β₂ ln π/π_ref), so the trainer adds no β·KL term
(`applies_kl`). At π_θ = π_ref the gradient is 2β₂ times REINFORCE's −Σ_t Â_i ∇log π under `sequence_sum`.

β₂ is TRL's `beta` (the KL coefficient, which also makes TRL compute the reference's log-probs); 1e-3 is the
paper's, TRL's `beta2` and the authors' scripts'. A*-PO generates one completion per prompt; TRL's GRPOConfig refuses
`num_generations` < 2, so here each prompt gets G ≥ 2 completions, each regressed on its own (the advantage uses no
group): `num_generations=2` is the closest to the paper. Use it with `advantage_estimator="a2po"`; with another
estimator this regresses onto that estimator's advantages instead.

Where the sources agree and this follows them: the mean of the squares over the batch (TRL: `.mean()`, the authors'
verl `compute_policy_loss`: `loss.mean()` per micro-batch over gradient accumulation); the log-ratio summed over the
completion mask, its terminal EOS included (TRL's mask, and trl_zoo's). Beyond TRL's A2PO, which generates with
`model.generate` only: under vLLM TRL's importance-sampling ratio multiplies the term, as it does every loss's.

Tests: tests/test_a2po.py (the closed form and its gradient, a transcription of TRL's `compute_loss` on random tensors,
the law at π = π_ref, a tiny model's training step), tests/test_losses_extreme.py, tests/test_numerics.py.
"""

from ..registry import ADVANTAGES, LOSSES
from .base import PolicyBatch, PolicyTerm

PAPER_BETA2 = 1e-3


def check_a2po(args) -> None:
    """The settings the regression onto β₂ ln(π/π_ref) needs: a fixed β > 0, the reference V* was estimated with, one
    target per completion."""
    if args.beta <= 0:
        raise ValueError(
            f"beta: a2po regresses beta · ln(π/π_ref) onto R − V*(x), so beta is A*-PO's β₂ and must be > 0 (it also "
            f"makes TRL compute the reference's log-probs), got {args.beta}; set beta={PAPER_BETA2} (the paper's)."
        )
    refused = (
        ("kl_placement", getattr(args, "kl_placement", "loss") == "reward",
         "'reward' adds the KL to the rewards, and a2po holds it in its loss; use kl_placement='loss'"),
        ("kl_target", getattr(args, "kl_target", None) is not None, "a2po's β₂ is the fixed beta; set kl_target=None"),
        ("ref_reset_steps", getattr(args, "ref_reset_steps", None) is not None,
         "V*(x) was estimated from the reference's samples; set ref_reset_steps=None"),
        ("sync_ref_model", getattr(args, "sync_ref_model", False),
         "V*(x) was estimated from the reference's samples; set sync_ref_model=False"),
        ("teacher_model", getattr(args, "teacher_model", None) is not None,
         "its per-token term leaves no single target per completion; set teacher_model=None"),
    )
    for name, active, why in refused:
        if active:
            raise ValueError(f"{name}: not with loss_type='a2po' ({why}).")
    estimator = getattr(args, "advantage_estimator", None)
    if estimator is not None and ADVANTAGES.get(estimator).spec.token_level:
        raise ValueError(
            f"advantage_estimator: {estimator!r} gives per-token advantages, and a2po regresses one target per "
            f"completion; use advantage_estimator='a2po'."
        )


@LOSSES.register(
    "a2po",
    description="(β ln(π/π_ref) − Â)²: least squares onto the optimal advantage R − V*(x), β = beta (A*-PO's β₂)",
    source="A*-PO, arXiv:2505.20686 (TRL: experimental A2POTrainer)",
    aggregation="sequence_mean",
    sequence_level=True,
    zero_advantage_is_inert=False,  # Â = 0 still pulls β ln(π/π_ref) to 0
    applies_kl=True,
    validate=check_a2po,
)
def a2po_loss(batch: PolicyBatch, args) -> PolicyTerm:
    if batch.ref_logps is None:
        raise ValueError("a2po needs the reference's log-probs (beta > 0); pass ref_logps=.")
    log_ratio = ((batch.logps - batch.ref_logps) * batch.mask).sum(-1, keepdim=True)
    implicit_reward = args.beta * log_ratio
    residual = implicit_reward - batch.advantages
    metrics = {"a2po/implicit_reward": implicit_reward.detach(), "a2po/residual": residual.detach()}
    return PolicyTerm(residual**2, metrics)
