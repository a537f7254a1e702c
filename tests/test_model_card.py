"""The model card TRL writes on `save_model` names the loss, advantage estimator and sampler the run used and
cites their papers, instead of TRL's fixed "GRPO (DeepSeekMath)"."""

from pathlib import Path

import trl_zoo
from tests.tiny import make_trainer


def test_model_card_names_and_cites_the_run_s_loss_estimator_and_sampler(tmp_path):
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, output_dir=str(tmp_path), loss_type="cispo", epsilon_high=5.0,
        advantage_estimator="rloo", dynamic_sampling="resample",
    )
    trainer.create_model_card(model_name="tiny")
    card = (Path(tmp_path) / "README.md").read_text()
    assert "trained with trl_zoo's GRPOTrainer with loss `cispo` (MiniMax-M1, arXiv:2506.13585)" in card
    assert "advantage estimator `rloo` (RLOO (Ahmadian et al.), arXiv:2402.14740)" in card
    assert "dynamic sampler `resample` (DAPO, arXiv:2503.14476)" in card
    for arxiv_id in ("2506.13585", "2402.14740", "2503.14476"):
        assert f"eprint        = {{{arxiv_id}}}" in card
    assert "DeepSeekMath" not in card


def test_model_card_of_the_default_run_names_trl_s_advantages():
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, loss_type="bnpo")
    assert trainer._name == (
        "trl_zoo's GRPOTrainer with loss `bnpo` (TRL's loss_type, no paper) and TRL's group-normalised advantages "
        "(DeepSeekMath, arXiv:2402.03300)"
    )
    assert "2402.03300" in trainer._paper["citation"]
