"""A dataset folder in use: every cell holds a shared lock on the tool's datasets it reads, for the cell's
life, so that ``python -m campaign.cache purge`` (which takes the lock exclusive, without waiting) can tell
a dataset in use and refuse it instead of removing the files a run is reading.

The lock is ``.reading.lock`` in the dataset's folder (a synthetic set, a converted one). A cell takes it
before it generates or checks the set, and makes sure the file it locked is still the one in the folder
(a purge that removed the folder meanwhile leaves the cell a lock on a file that is gone: it takes the new
one). The locks are the cell's ``reading()`` scope's (``jobs.runner``); outside one, nothing is held.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from pathlib import Path

READING = ".reading.lock"
_ATTEMPTS = 100  # purges racing one cell for its lock; each removes the folder once
_held: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("iocampaign_reading", default=None)


class InUseError(RuntimeError):
    """A dataset's folder kept being removed while a cell took its lock; the message names it."""


@contextlib.contextmanager
def reading() -> Iterator[None]:
    """The scope of one cell: the datasets it ``hold``s inside stay locked until it ends."""
    held: list[int] = []
    token = _held.set(held)
    try:
        yield
    finally:
        _held.reset(token)
        for fd in held:
            # closing releases the flock; on a tier that died under the cell (a FUSE layer killed: ENOTCONN)
            # the close fails, and must not hide the error that says the tier died
            with contextlib.suppress(OSError):
                os.close(fd)


def hold(folder: Path) -> None:
    """A shared lock on ``folder``'s ``READING`` for the rest of the current ``reading()`` scope (none
    outside one). Waits only while a purge removes the folder; the folder is made again after it."""
    import fcntl

    held = _held.get()
    if held is None:
        return
    lock = folder / READING
    for _ in range(_ATTEMPTS):
        folder.mkdir(exist_ok=True)  # a purge may have removed it since the caller made it
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            continue
        fcntl.flock(fd, fcntl.LOCK_SH)
        if _same(fd, lock):
            held.append(fd)
            return
        os.close(fd)  # the purge that held it removed it: lock the new one
    raise InUseError(f"{folder} was removed {_ATTEMPTS} times while a cell took its lock {READING}")


def release(folder: Path) -> None:
    """Give up the current scope's lock on ``folder`` before the scope ends: a generation that failed
    removes the set it began, which it may do only once no other cell holds the lock."""
    held = _held.get()
    for fd in list(held or ()):
        if _same(fd, folder / READING):
            held.remove(fd)
            os.close(fd)


def _same(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path``."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino)


def lock_table() -> dict[str, list[int]]:
    """Every file locked on this machine (``/proc/locks``, keyed ``MAJ:MIN:INODE`` as it writes them) and
    the processes holding its locks (the pid that took each; waiters left out)."""
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    table: dict[str, list[int]] = {}
    for fields in (line.split() for line in lines):
        if len(fields) >= 6 and "->" not in fields and fields[4].isdigit():
            pids = table.setdefault(fields[5], [])
            if int(fields[4]) not in pids:
                pids.append(int(fields[4]))
    return table


def holders(path: str | Path, table: dict[str, list[int]] | None = None) -> list[int]:
    """The processes holding a lock on the file ``path`` (from ``table``, else read now)."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return []
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return (lock_table() if table is None else table).get(key, [])


def describe(pids: list[int]) -> str:
    """``pid 1234 (python -m campaign ...)`` for each holder, as one phrase."""
    out = []
    for pid in pids:
        if pid == 0:  # /proc/locks' pid of a process this PID namespace cannot see
            out.append("a process of another PID namespace")
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            command = ""
        if len(command) > 80:
            command = command[:77] + "..."
        out.append(f"pid {pid} ({command})" if command else f"pid {pid}")
    return ", ".join(out)
