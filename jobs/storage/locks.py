"""One measuring cell per device at a time, across processes and campaigns on this machine.

A cell holds, for its whole life: the lock of every emulated tier it builds (set-up, dataset
generation, runs and tear-down), then the lock of every device it measures. All of them are taken
in one sorted order, so two cells never wait for each other in a circle, and every wait has a time
limit (``platform.lock_timeout_min``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)
NOTE_EVERY_S = 60.0  # how often a wait for a lock says so
POLL_S = 0.5


class LockTimeout(TimeoutError):
    """Another process held a lock longer than the cell may wait; the message names it."""


def lock_path(lock_dir: str, path: str) -> Path:
    """The lock file of the device that holds ``path``."""
    st = os.stat(path)
    return Path(lock_dir) / f"dev-{os.major(st.st_dev)}-{os.minor(st.st_dev)}.lock"


def tier_lock_path(lock_dir: str, name: str) -> Path:
    """The lock file of emulated tier ``name`` (held from before its set-up until after its tear-down)."""
    return Path(lock_dir) / f"tier-{name}.lock"


@contextlib.contextmanager
def hold(lp: Path, what: str, timeout_s: float | None = None) -> Iterator[float]:
    """Hold the lock file ``lp`` (``what`` names it in messages); yields the seconds spent waiting.

    Raises LockTimeout after ``timeout_s`` seconds of waiting (None: wait as long as it takes).
    """
    with _open_shared(lp) as f:
        t0 = time.monotonic()
        note_at = t0  # say so at once, then every NOTE_EVERY_S, naming the holder each time
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                f.seek(0)
                holder = f.read().strip() or "another process"
                if time.monotonic() >= note_at:
                    waited = time.monotonic() - t0
                    log.warning("waiting for %s, which is measuring %s (%s)%s", holder, what, lp,
                                f"; waited {waited / 60:.0f} min so far" if waited >= 1 else "")
                    note_at += NOTE_EVERY_S
                if timeout_s is not None and time.monotonic() - t0 >= timeout_s:
                    raise LockTimeout(f"{holder} held {what} ({lp}) for longer than platform.lock_timeout_min="
                                      f"{timeout_s / 60:g}") from None
                time.sleep(POLL_S)
        waited = time.monotonic() - t0
        _say(f, f"pid {os.getpid()}\n")
        try:
            yield waited
        finally:
            _say(f, "")
            fcntl.flock(f, fcntl.LOCK_UN)


def _open_shared(lp: Path):
    """The lock file, made so that every user's campaigns can take it: the lock folder like /tmp
    (1777: anyone adds files, only their owner removes them) and the file writable by all (0666). A
    file another user made without that (an older version) is opened read-only: it still locks."""
    if not lp.parent.exists():
        lp.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(lp.parent, 0o1777)
    try:
        fd = os.open(lp, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        return open(lp)  # noqa: SIM115 - the caller's with-block closes it
    if os.fstat(fd).st_uid == os.getuid():
        os.fchmod(fd, 0o666)
    return os.fdopen(fd, "a+")


def _say(f, text: str) -> None:
    """Write who holds the lock (nothing when it was opened read-only)."""
    if f.writable():
        f.seek(0)
        f.truncate()
        f.write(text)
        f.flush()


@contextlib.contextmanager
def device_lock(lock_dir: str, path: str, timeout_s: float | None = None) -> Iterator[float]:
    """Hold the device lock of ``path``; yields the seconds spent waiting for it."""
    with hold(lock_path(lock_dir, path), f"the device of {path}", timeout_s) as waited:
        yield waited


@contextlib.contextmanager
def all_of(named: dict[Path, str], timeout_s: float | None = None) -> Iterator[float]:
    """Hold every lock file of ``named`` (lock file -> what it guards), taken in sorted order; yields
    the total seconds spent waiting."""
    with contextlib.ExitStack() as stack:
        waited = 0.0
        for lp in sorted(named):
            waited += stack.enter_context(hold(lp, named[lp], timeout_s))
        yield waited


def devices(lock_dir: str, paths: list[str]) -> dict[Path, str]:
    """The device locks of ``paths`` (one per device), for ``all_of``."""
    out: dict[Path, str] = {}
    for p in paths:
        out.setdefault(lock_path(lock_dir, p), f"the device of {p}")
    return out
