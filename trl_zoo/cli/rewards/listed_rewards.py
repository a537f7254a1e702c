"""What `trl-zoo list` shows after the plugin tables: the reward functions `--reward_funcs` names (trl_zoo's own; TRL's
registry and dotted paths said in a line) and the fields that shape rewards. Written here rather than read from
`reward_names.REWARDS` and the config, so that `list` imports no trainer library (tests/test_layout.py).

Tests: tests/test_cli.py (the names are those of `reward_names.REWARDS` and of `GRPOConfig`'s fields).
"""

REWARD_FUNCTIONS = {
    "exact_match": "1 when the completion equals the `answer` column (normalised), else 0",
    "final_number": "1 when the completion's last number is the `answer` column's (GSM8K's '#### N'), else 0",
    "final_answer": "1 when the text after the completion's last ':' equals the `answer` column, else 0",
    "majority_vote": "1 when the completion's answer is its prompt's majority answer; label-free, no `answer` "
                     "column [TTRL, arXiv:2504.16084]",
}
OTHER_REWARDS = (
    "also: a name in TRL's reward registry (trl.rewards: accuracy_reward, think_format_reward, "
    "get_soft_overlong_punishment, ...) or a dotted path package.module.function"
)
REWARD_SHAPING = {
    "overlong_buffer_length": "soft overlong punishment: L_cache before overlong_max_length, scaled by "
                              "overlong_penalty_factor, added to the reward [DAPO, arXiv:2503.14476]",
    "truncation_penalty": "the task rewards of a completion not ended within truncation_length tokens times this "
                          "factor [DLER, arXiv:2510.15110]",
    "mask_truncated_completions": "truncated completions left out of the loss (TRL's field)",
}


def listed_rewards() -> str:
    """The reward sections of `trl-zoo list`."""
    width = max(map(len, REWARD_FUNCTIONS))
    functions = [f"  {name:<{width}}  {text}" for name, text in REWARD_FUNCTIONS.items()]
    width = max(len(name) + 2 for name in REWARD_SHAPING)
    shaping = [f"  {'--' + name:<{width}}  {text}" for name, text in REWARD_SHAPING.items()]
    return "\n".join([
        f"reward functions ({len(REWARD_FUNCTIONS)}, --reward_funcs)", *functions, f"  {OTHER_REWARDS}", "",
        f"reward shaping ({len(REWARD_SHAPING)})", *shaping, "",
    ])
