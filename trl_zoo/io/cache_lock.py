"""Build a cache entry once, however many processes ask for it at the same time.

    build_once(target, build)     →  target, built by exactly one process; the others wait, then use it

The processes of one distributed launch (`accelerate launch`, `torchrun`) and separate runs started together on one
machine all reach the same missing entry at once. Each takes an exclusive lock on a lock file next to the entry
(`fcntl.flock` on `.<name>.lock`); the one that gets it first builds, the others block until it is done, then find the
entry and return it without building. The builder writes into a staging folder beside the entry and renames it into
place, so no process ever sees a half-written entry, whatever happens to the builder.

- A builder that fails or is interrupted (an exception, Ctrl-C) removes its staging folder and releases the lock;
  one killed outright (SIGKILL, the OOM killer) leaves no entry and holds no lock either, since the kernel releases
  a `flock` when its holder dies: a waiter then takes the lock and builds. Only the killed builder's staging folder
  stays behind (`.<name>-XXXXXXXX`, harmless).
- An entry that exists but fails `is_complete` (e.g. one left by an older version) is moved aside and rebuilt.
- The lock file is never deleted (deleting a lock file others may hold open is racy); it is empty.
- No distributed process group is needed or used: the lock works the same in a plain process.
- Where `fcntl` is missing (Windows), there is no lock: concurrent builders each build and the first rename wins.
- On a network file system the lock is as good as its `flock` (Linux NFS v4: yes; some older mounts: no).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None


def lock_path(target: Path) -> Path:
    return target.parent / f".{target.name}.lock"


@contextmanager
def exclusive_lock(target: Path, log: Callable = print) -> Iterator[None]:
    """Hold the exclusive lock of cache entry `target` (blocking; says once that it waits for another process)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path(target), "a") as handle:
        if fcntl is not None:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log(f"Waiting for another process to finish building {target} ...")
                fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)


def build_once(
    target: Path | str,
    build: Callable[[Path], None],
    is_complete: Callable[[Path], bool] = Path.exists,
    log: Callable = print,
) -> Path:
    """`target`, built by `build(staging)` in exactly one process if it is missing or not `is_complete`.

    `build` writes the entry's files into the empty folder `staging` (on the same file system as `target`);
    `build_once` renames it to `target` when `build` returns, or removes it when `build` raises. Returns `target`.
    """
    target = Path(target)
    if is_complete(target):
        return target
    with exclusive_lock(target, log):
        if is_complete(target):  # built by the process that held the lock before us
            return target
        if target.exists():
            log(f"Rebuilding the incomplete cache entry {target}")
            aside = Path(tempfile.mkdtemp(prefix=f".{target.name}-incomplete-", dir=target.parent))
            target.rename(aside / target.name)
            shutil.rmtree(aside, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            build(staging)
            staging.chmod(target.parent.stat().st_mode & 0o777)  # mkdtemp's 0700 would hide a shared cache
            os.rename(staging, target)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if not is_complete(target):  # else another builder, unlocked (no fcntl), renamed its entry first
                raise
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return target
