"""The loss hyperparameters, each with a loss that reads it: the bad-input battery and the range tests set each one
to absurd values under that loss."""

HYPERPARAMETERS = {
    "epsilon": "grpo", "epsilon_high": "dapo", "delta": "grpo", "dual_clip": "grpo", "beta": "grpo",
    "cispo_epsilon_low": "cispo", "gmpo_epsilon": "gmpo", "ppo_kl_beta": "ppo_kl", "ppo_kl_target": "ppo_kl",
    "clip_cov_ratio": "clip_cov", "clip_cov_lower": "clip_cov", "clip_cov_upper": "clip_cov",
    "kl_cov_ratio": "kl_cov", "kl_cov_coef": "kl_cov", "rspo_gamma_min": "rspo",
    "sapo_temperature_pos": "sapo", "sapo_temperature_neg": "sapo",
    "vespo_k_pos": "vespo", "vespo_lambda_pos": "vespo", "vespo_k_neg": "vespo", "vespo_lambda_neg": "vespo",
}
