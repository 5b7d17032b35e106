"""One measuring cell per device at a time, across processes and campaigns on this machine.

A cell holds, for its whole life: the lock of every emulated tier it builds (set-up, dataset
generation, runs and tear-down), then the lock of every device it measures. All of them are taken
in one sorted order, so two cells never wait for each other in a circle, and every wait has a time
limit (``platform.lock_timeout_min``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import pwd
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from jobs import owned

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
    t0 = time.monotonic()
    note_at = t0  # say so at once, then every NOTE_EVERY_S, naming the holder each time
    while True:
        fd = _open_shared(lp)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            now = time.monotonic()
            timed_out = timeout_s is not None and now - t0 >= timeout_s
            holder = (
                holder_of(fd) if now >= note_at or timed_out else ""
            )  # only when it is said: it reads /proc
            os.close(fd)
            if now >= note_at:
                log.warning(
                    "waiting for %s, which is measuring %s (%s)%s",
                    holder,
                    what,
                    lp,
                    f"; waited {(now - t0) / 60:.0f} min so far" if now - t0 >= 1 else "",
                )
                note_at += NOTE_EVERY_S
            if timed_out:
                raise LockTimeout(
                    f"{holder} held {what} ({lp}) for longer than platform.lock_timeout_min="
                    f"{timeout_s / 60:g}"
                ) from None
            time.sleep(POLL_S)
            continue
        if _still_named(fd, lp):
            break
        os.close(fd)  # the file was removed or replaced while we locked it: that lock guards nothing
    try:
        yield time.monotonic() - t0
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def check_dir(lock_dir: str) -> None:
    """Raise NotOurs (one line) where the lock folder cannot be used safely; makes nothing (planning)."""
    path = os.path.abspath(lock_dir)
    owned.check_way(os.path.dirname(path), "platform.lock_dir")
    if os.path.lexists(path):
        os.close(owned.shared_dir(path, "platform.lock_dir"))


def _open_shared(lp: Path) -> int:
    """The lock file, opened read-only in the shared lock folder without following a link: nothing is ever
    written in a lock file, so another user's lock file locks as well as one's own, and a planted link,
    FIFO or device is refused, never opened as a file."""
    dfd = owned.shared_dir(lp.parent, "platform.lock_dir")
    try:
        fd = os.open(
            lp.name,
            os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
            0o644,
            dir_fd=dfd,
        )
    except OSError as e:
        kind = "a link" if e.errno == errno.ELOOP else f"not a lock file ({e.strerror})"
        raise owned.NotOurs(
            f"platform.lock_dir: {lp} is {kind}: the tool never follows another user's link "
            "or opens what is not a plain file; its owner should remove it"
        ) from None
    finally:
        os.close(dfd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise owned.NotOurs(f"platform.lock_dir: {lp} is not a plain file: its owner should remove it")
    return fd


def _still_named(fd: int, lp: Path) -> bool:
    """Whether ``lp`` still names the file ``fd`` locked (an owner of the shared folder may remove a lock
    file; a new one by the same name would let two cells in at once)."""
    try:
        st = os.stat(lp, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def holder_of(fd: int) -> str:
    """Who holds the lock on ``fd``, from the kernel (its lock table, /proc/locks, then the processes that
    have the file open), never from anything a holder wrote: 'pid N (command, user U)', or 'another
    process' when the holder is not visible here (another PID namespace)."""
    st = os.fstat(fd)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        table = ""
    for line in table.splitlines():
        f = line.split()
        if (
            len(f) >= 6
            and f[1] == "FLOCK"
            and f[5] == key
            and f[4].isdigit()
            and os.path.exists(f"/proc/{f[4]}")
        ):
            return _describe(int(f[4]))
    others = [
        pid for pid in _openers(st) if pid != os.getpid()
    ]  # the locker may have passed the file on and ended
    return ", ".join(_describe(pid) for pid in others[:3]) if others else "another process"


def _openers(st: os.stat_result) -> list[int]:
    """The processes that have the file of ``st`` open."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fds = list((d / "fd").iterdir())
        except OSError:
            continue
        for f in fds:
            try:
                o = f.stat()
            except OSError:
                continue
            if (o.st_dev, o.st_ino) == (st.st_dev, st.st_ino):
                out.append(int(d.name))
                break
    return sorted(out)


def _describe(pid: int) -> str:
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return f"pid {pid}"
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = f"uid {uid}"
    return f"pid {pid} ({comm}, user {user})"


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
