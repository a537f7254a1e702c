"""A reward function still running after `reward_timeout_warning` seconds gets one line naming it (TRL has no
timeout; the function is not stopped). 0 turns the line off."""

from __future__ import annotations

import asyncio
import time

import pytest

from trl_zoo import GRPOConfig, GRPOTrainer
from trl_zoo.hooks.reward_watchdog import watched

from . import tiny


def slow_reward(completions, **kwargs):
    time.sleep(0.4)
    return [1.0] * len(completions)


async def slow_async_reward(completions, **kwargs):
    await asyncio.sleep(0.4)
    return [1.0] * len(completions)


def test_a_reward_still_running_after_the_time_is_named_once(capsys):
    assert watched(slow_reward, "slow_reward", 0.05)(completions=["a", "b"]) == [1.0, 1.0]
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reward_funcs: 'slow_reward' is still running after 0.05 s")
    assert "reward_timeout_warning" in lines[0]


def test_an_async_reward_is_watched_and_stays_async(capsys):
    wrapped = watched(slow_async_reward, "slow_async_reward", 0.05)
    assert asyncio.iscoroutinefunction(wrapped)
    assert asyncio.run(wrapped(completions=["a"])) == [1.0]
    assert "'slow_async_reward' is still running" in capsys.readouterr().err


def test_a_quick_reward_or_a_zero_time_says_nothing(capsys):
    assert watched(tiny.digit_reward, "digit_reward", 5.0)(completions=["1a"]) == [0.5]
    assert watched(slow_reward, "slow_reward", 0) is slow_reward
    assert capsys.readouterr().err == ""


def test_the_trainer_names_a_reward_that_hangs(capsys):
    trainer = tiny.make_trainer(GRPOTrainer, GRPOConfig, reward_funcs=[tiny.digit_reward, slow_reward],
                                reward_timeout_warning=0.1, max_steps=1)
    trainer.train()
    err = capsys.readouterr().err
    assert "reward_funcs: 'slow_reward' is still running after 0.1 s" in err and "'digit_reward'" not in err


def test_a_negative_time_is_refused():
    with pytest.raises(ValueError, match=r"reward_timeout_warning: must be ≥ 0"):
        GRPOConfig(**tiny.config_kwargs(reward_timeout_warning=-1))
