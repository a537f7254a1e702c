"""A watchdog around each reward call: a reward function still running after `reward_timeout_warning` seconds
gets one line on stderr naming it, and one still running after `reward_timeout` seconds stops the run.

    watched(fn, name, seconds, timeout=None)  ->  fn, called as before; after `seconds` without returning, one line
                                                  names it; after `timeout`, RewardTimeoutError (one line)

TRL calls reward functions without a timeout, so a reward that hangs (a scorer service that never answers, a
network call, a deadlock) would stop training with no word. The line says which function is still running, on how
many completions, and when (if ever) it will be stopped. A `threading.Timer` starts with each call and is cancelled
when the call returns. `seconds` 0 turns the line off; it is not said when `timeout` comes first.

With a `timeout` (the config's `reward_timeout`, default None: no limit) a plain function runs in a worker thread
while the calling thread waits for it; when the time passes, the calling thread raises `RewardTimeoutError`, one line
naming the function and the field, and the run stops. A Python call cannot be killed portably, so the stuck call is
left running in its thread, a daemon thread, which does not keep the process alive once the run has stopped (a
reward holding a lock or a socket keeps them until then). The worker runs with the caller's context variables and
torch grad mode. An async function stays async (TRL awaits them together): its task is cancelled at `timeout`, which
stops it at its next `await` (one that blocks in plain code holds the event loop until it returns).

`components/rewards.py` wraps each plain reward function with it for TRL's reward call, with the config's
`reward_timeout_warning` (default 10 s) and `reward_timeout` (`config/run.py`); the held-out evaluation and pass@k
do the same (`tasks/evaluation.py`).

Tests: tests/test_reward_watchdog.py (sync, async, through the trainer, the config fields, a reward that never
returns).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager

import torch
from trl.trainer.utils import is_async_callable


class RewardTimeoutError(RuntimeError):
    """A reward function did not return within `reward_timeout` seconds: one line naming it and the field."""


def _batch(rows: int | None) -> str:
    return f" on {rows} completions" if rows is not None else ""


def _say(name: str, seconds: float, rows: int | None, timeout: float | None = None) -> None:
    then = (
        f"it is stopped at reward_timeout={timeout:g} s"
        if timeout is not None
        else "nothing stops a reward function unless reward_timeout is set"
    )
    print(
        f"reward_funcs: {name!r} is still running after {seconds:g} s{_batch(rows)} and has not returned; training "
        f"waits for it ({then}; reward_timeout_warning sets when this line comes, 0: never).",
        file=sys.stderr,
        flush=True,
    )


def timed_out(name: str, timeout: float, rows: int | None) -> RewardTimeoutError:
    return RewardTimeoutError(
        f"reward_timeout: reward function {name!r} has not returned after {timeout:g} s{_batch(rows)}, so the run "
        f"stops (the call is left running in a background thread); check what it waits for (a scorer service, a "
        f"sandbox), or raise reward_timeout."
    )


@contextmanager
def _watchdog(name: str, seconds: float | None, rows: int | None, timeout: float | None):
    if seconds is None:
        yield
        return
    timer = threading.Timer(seconds, _say, args=(name, seconds, rows, timeout))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _in_worker(fn: Callable, args, kwargs, name: str, timeout: float, rows: int | None):
    """`fn(*args, **kwargs)` in a daemon thread, waited for `timeout` seconds; its value or its exception, else
    RewardTimeoutError with the call left running."""
    outcome = {}
    context, grad = contextvars.copy_context(), torch.is_grad_enabled()

    def work():
        try:
            with torch.set_grad_enabled(grad):
                outcome["value"] = context.run(fn, *args, **kwargs)
        except BaseException as error:  # re-raised in the caller's thread
            outcome["error"] = error

    worker = threading.Thread(target=work, name=f"reward {name}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise timed_out(name, timeout, rows)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def watched(fn: Callable, name: str, seconds: float, timeout: float | None = None) -> Callable:
    """`fn` with a watchdog around each call, and a time limit when `timeout` is given (module docstring); `fn`
    itself when neither applies."""
    seconds = seconds if seconds and seconds > 0 and (timeout is None or seconds < timeout) else None
    if seconds is None and timeout is None:
        return fn

    def rows(kwargs) -> int | None:
        completions = kwargs.get("completions")
        return len(completions) if hasattr(completions, "__len__") else None

    if is_async_callable(fn):

        @functools.wraps(fn)
        async def watched_async(*args, **kwargs):
            with _watchdog(name, seconds, rows(kwargs), timeout):
                if timeout is None:
                    return await fn(*args, **kwargs)
                task = asyncio.ensure_future(fn(*args, **kwargs))
                done, _ = await asyncio.wait({task}, timeout=timeout)
                if not done:
                    task.cancel()
                    raise timed_out(name, timeout, rows(kwargs))
                return task.result()

        return watched_async

    @functools.wraps(fn)
    def watched_call(*args, **kwargs):
        with _watchdog(name, seconds, rows(kwargs), timeout):
            if timeout is None:
                return fn(*args, **kwargs)
            return _in_worker(fn, args, kwargs, name, timeout, rows(kwargs))

    return watched_call
