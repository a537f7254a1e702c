"""A watchdog around each reward call: a reward function still running after `reward_timeout_warning` seconds
gets one line on stderr naming it.

    watched(fn, name, seconds)  ->  fn, called as before; after `seconds` without returning, one line names it

TRL calls reward functions without a timeout, so a reward that hangs (a sandbox that never answers, a network call,
a deadlock) stops training with no word. The line says which function is still running, on how many completions,
and that it is not stopped: the function is never interrupted or killed (a Python thread cannot be stopped safely,
and a reward that is merely slow should finish). A `threading.Timer` starts with each call and is cancelled when the
call returns; async reward functions stay async (TRL awaits them together). `seconds` 0 turns it off.

`hooks/rewards.py` wraps each plain reward function with it for TRL's reward call, with the config's
`reward_timeout_warning` (default 60 s; `config/run.py`).

Tests: tests/test_reward_watchdog.py (sync, async, through the trainer, the config field).
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager

from trl.trainer.utils import is_async_callable


def _say(name: str, seconds: float, rows: int | None) -> None:
    batch = f" on {rows} completions" if rows is not None else ""
    print(f"reward_funcs: {name!r} is still running after {seconds:g} s{batch} and has not returned; training waits "
          f"for it (nothing stops a reward function; reward_timeout_warning sets when this line comes, 0: never).",
          file=sys.stderr, flush=True)


@contextmanager
def _watchdog(name: str, seconds: float, rows: int | None):
    timer = threading.Timer(seconds, _say, args=(name, seconds, rows))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def watched(fn: Callable, name: str, seconds: float) -> Callable:
    """`fn` with a watchdog around each call (module docstring); `fn` itself when `seconds` is 0 or less."""
    if not seconds or seconds <= 0:
        return fn

    def rows(kwargs) -> int | None:
        completions = kwargs.get("completions")
        return len(completions) if hasattr(completions, "__len__") else None

    if is_async_callable(fn):

        @functools.wraps(fn)
        async def watched_async(*args, **kwargs):
            with _watchdog(name, seconds, rows(kwargs)):
                return await fn(*args, **kwargs)

        return watched_async

    @functools.wraps(fn)
    def watched_call(*args, **kwargs):
        with _watchdog(name, seconds, rows(kwargs)):
            return fn(*args, **kwargs)

    return watched_call
