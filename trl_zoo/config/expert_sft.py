"""The expert-demonstration axis: CHORD's SFT term on a dataset column of expert answers inside the RL step (the
maths: `trl_zoo/sft_term.py`; the component: `components/expert_sft.py`), its fields and their checks.

With `loss_type="luffy"` the same column holds LUFFY's expert traces (`components/luffy.py`), and CHORD's fields are
refused: LUFFY adds no SFT term.

The defaults are the authors' code's (CHORD-φ: μ = 0.1 throughout, φ on); their CHORD-μ recipe is
expert_mu_peak=0.9, expert_mu_valley=0.05, expert_mu_decay_steps=200, expert_phi=False.

Tests: tests/test_expert_sft.py, tests/test_luffy.py (the refusals with loss_type='luffy').
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .fields import help_field


@dataclass
class ExpertSFTFields:
    """The column of expert answers, the schedule of μ and the φ weighting (CHORD, arXiv:2508.11408)."""

    expert_column: str | None = help_field(
        "CHORD: the dataset column of expert answers (text, a number read as its text; None or blank in a row: no "
        "demonstration for that prompt). Each step then minimises (1 − μ)·L_RL + μ·L_SFT, L_SFT the token-mean NLL "
        "of the expert answer after the row's prompt (components/expert_sft.py). None: RL alone."
    )
    expert_mu_peak: float = help_field(
        "μ_p, the SFT weight μ at the end of the warm-up (in [0, 1]); μ rises linearly from 0 to it over "
        "expert_mu_warmup_steps, then decays to expert_mu_valley over expert_mu_decay_steps (cosine).", 0.1
    )
    expert_mu_valley: float = help_field("μ_v, the SFT weight μ after the decay (in [0, 1]).", 0.1)
    expert_mu_warmup_steps: int = help_field("W, optimizer steps of μ's linear warm-up from 0 to expert_mu_peak.", 0)
    expert_mu_decay_steps: int = help_field(
        "D, optimizer steps of μ's cosine decay from expert_mu_peak to expert_mu_valley.", 0
    )
    expert_phi: bool = help_field(
        "CHORD-φ: weight each expert token's NLL by φ(p) = p·(1 − p) (no gradient through φ), so the tokens the "
        "policy is unsure of count most. False: plain NLL (CHORD-μ).", True
    )

    def _check_expert_sft_fields(self) -> None:
        check_expert_sft_options(self)


def check_expert_sft_options(args) -> None:
    """Config-time checks of the expert fields (one line each)."""
    column = args.expert_column
    if column is None:
        defaults = {item.name: item.default for item in fields(ExpertSFTFields)}
        for name, default in defaults.items():
            if getattr(args, name) != default:
                raise ValueError(f"{name}: has no effect without expert demonstrations; set expert_column or drop it.")
        return
    if not isinstance(column, str) or not column:
        raise ValueError(f"expert_column: got {column!r}; name the dataset column of expert answers, or None.")
    if getattr(args, "loss_type", None) == "luffy":  # the column holds LUFFY's expert traces (components/luffy.py)
        defaults = {item.name: item.default for item in fields(ExpertSFTFields)}
        for name, default in defaults.items():
            if name != "expert_column" and getattr(args, name) != default:
                raise ValueError(
                    f"{name}: CHORD's SFT term is not part of loss_type='luffy' (its expert traces are rollouts of "
                    f"each group); drop it."
                )
    for name in ("expert_mu_peak", "expert_mu_valley"):
        value = getattr(args, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{name}: μ={value!r} must be a number in [0, 1].")
    for name in ("expert_mu_warmup_steps", "expert_mu_decay_steps"):
        value = getattr(args, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}: got {value!r}; give a whole number of optimizer steps ≥ 0.")
    if args.remove_unused_columns:
        raise ValueError(
            "expert_column: remove_unused_columns=True drops the column before the trainer sees it; set "
            "remove_unused_columns=False (TRL's GRPO default)."
        )

