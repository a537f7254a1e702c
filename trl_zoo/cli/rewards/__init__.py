"""The rewards a `trl-zoo train` run trains and evaluates on, and the reward names `trl-zoo list` shows:

    reward_names.py          `--reward_funcs` names resolved: trl_zoo's, TRL's registry, dotted paths
    run_rewards.py           the run's reward model and functions, the held-out scorer, the columns they read
    null_reward_control.py   the null-reward control: rewards shuffled across each batch
    listed_rewards.py        the reward functions and reward shaping `trl-zoo list` shows (no trainer library)
"""
