"""A reward function still running after `reward_timeout_warning` seconds gets one line naming it (TRL has no
timeout). 0 turns the line off. One still running after `reward_timeout` seconds stops the run with one line naming it
and the field; the stuck call is left in a daemon thread (here released when the test ends)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from trl_zoo import GRPOConfig, GRPOTrainer
from trl_zoo.components.reward_watchdog import RewardTimeoutError, watched

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
    no_limit = r"^reward_timeout: must be > 0 seconds \(None: no limit\), got 0; e\.g\. 300\.$"
    with pytest.raises(ValueError, match=no_limit):
        GRPOConfig(**tiny.config_kwargs(reward_timeout=0))
    assert GRPOConfig(**tiny.config_kwargs()).reward_timeout is None  # no limit unless asked


@pytest.fixture
def dead_scorer():
    """A reward that waits for a scorer service that never answers; released when the test ends."""
    answered = threading.Event()

    def dead_scorer(completions, **kwargs):
        answered.wait()
        return [1.0] * len(completions)

    yield dead_scorer
    answered.set()


def timeout_line(name: str, seconds: str, rows: int) -> str:
    return (
        f"reward_timeout: reward function {name!r} has not returned after {seconds} s on {rows} completions, so the "
        f"run stops (the call is left running in a background thread); check what it waits for (a scorer service, a "
        f"sandbox), or raise reward_timeout."
    )


def test_a_reward_that_never_returns_stops_at_the_timeout(dead_scorer, capsys):
    started = time.perf_counter()
    with pytest.raises(RewardTimeoutError) as caught:
        watched(dead_scorer, "dead_scorer", 0.05, timeout=0.3)(completions=["a", "b"])
    assert 0.3 <= time.perf_counter() - started < 2
    assert str(caught.value) == timeout_line("dead_scorer", "0.3", 2)
    (warning,) = capsys.readouterr().err.strip().splitlines()  # said first, with when the call will be stopped
    assert warning.startswith("reward_funcs: 'dead_scorer' is still running after 0.05 s on 2 completions")
    assert "it is stopped at reward_timeout=0.3 s" in warning


def test_a_timed_reward_returns_its_value_or_raises_its_own_error():
    def failing(completions, **kwargs):
        raise KeyError("no answer column")

    timed = watched(tiny.digit_reward, "digit_reward", 0, timeout=5.0)
    assert timed(completions=["1a", "22"]) == [0.5, 1.0]
    with pytest.raises(KeyError, match="no answer column"):
        watched(failing, "failing", 0, timeout=5.0)(completions=["a"])


def test_an_async_reward_that_never_returns_is_cancelled_at_the_timeout():
    cancelled = []

    async def dead_async_scorer(completions, **kwargs):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    with pytest.raises(RewardTimeoutError) as caught:
        asyncio.run(watched(dead_async_scorer, "dead_async_scorer", 0, timeout=0.2)(completions=["a"]))
    assert str(caught.value) == timeout_line("dead_async_scorer", "0.2", 1)
    assert cancelled == [True]


def test_the_trainer_stops_at_a_reward_that_never_returns(dead_scorer):
    trainer = tiny.make_trainer(GRPOTrainer, GRPOConfig, reward_funcs=[tiny.digit_reward, dead_scorer],
                                reward_timeout=0.3, max_steps=1)
    with pytest.raises(RewardTimeoutError) as caught:
        trainer.train()
    assert str(caught.value) == timeout_line("dead_scorer", "0.3", 8)
