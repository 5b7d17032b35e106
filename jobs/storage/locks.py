"""One measuring cell per device at a time, across processes and campaigns on this machine.

A cell holds, for its whole life: the lock of every emulated tier it builds (set-up, dataset
generation, runs and tear-down), then the lock of every device it measures. All of them are taken
in one sorted order, so two cells never wait for each other in a circle, and every wait has a time
limit (``platform.lock_timeout_min``).

The lock files are shared by every user, so one may be another user's, who can remove it while a cell
holds it. Each lock is therefore taken with the user's own lock beside it (``own_lock``: the user's or
root's file, which nobody else can remove), and a cell whose lock file was removed under it fails
(``LockLost``) instead of being recorded as a result.
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
OWN = ".uid-"  # a user's own lock beside a shared one: dev-8-1.lock, dev-8-1.uid-1000.lock


_HELD: list[tuple[list[tuple[int, Path]], str]] = []  # the locks this process holds, for check_held


class LockTimeout(TimeoutError):
    """Another process held a lock longer than the cell may wait; the message names it."""


class LockLost(RuntimeError):
    """A lock file was removed while a cell held it: the cell may have overlapped another; one line."""


def lock_path(lock_dir: str, path: str) -> Path:
    """The lock file of the device that holds ``path``."""
    st = os.stat(path)
    return Path(lock_dir) / f"dev-{os.major(st.st_dev)}-{os.minor(st.st_dev)}.lock"


def tier_lock_path(lock_dir: str, name: str) -> Path:
    """The lock file of emulated tier ``name`` (held from before its set-up until after its tear-down)."""
    return Path(lock_dir) / f"tier-{name}.lock"


@contextlib.contextmanager
def hold(lp: Path, what: str, timeout_s: float | None = None) -> Iterator[float]:
    """Hold the lock file ``lp`` (``what`` names it in messages), then the user's own lock beside it
    (``own_lock``); yields the seconds spent waiting.

    ``lp`` is shared by every user, so it may be another user's file, which its owner can remove while a
    cell holds it; a new file by that name would then let a second cell in. So the user's own lock, which
    nobody else can remove, keeps the user's cells apart whatever happens to ``lp``; a cell that finds
    another user's own lock held beside ``lp`` waits for it too (that cell locked an ``lp`` since
    removed); and a cell that ends while ``lp`` no longer names the file it locked raises LockLost instead
    of returning. Raises LockTimeout after ``timeout_s`` seconds of waiting (None: as long as it takes).
    """
    wait = _Wait(what, timeout_s)
    while True:
        held: list[tuple[int, Path]] = []
        try:
            for path in (lp, own_lock(lp)):
                held.append((_take(path, wait, own=path != lp), path))
            busy = _held_beside(lp)
        except BaseException:
            _release(held)
            raise
        if busy is None:
            break
        _release(held)  # let the cell that still measures end first, holding nothing meanwhile
        wait.blocked(busy[0], busy[1])
    _HELD.append((held, what))
    try:
        yield wait.seconds()
        lost = _lost(held, what)  # only when the body ended well: a failure is already a failure
    finally:
        _HELD[:] = [h for h in _HELD if h[0] is not held]
        _release(held)
    if lost:
        raise LockLost(lost)


def _let_go_in_child() -> None:
    """In a process forked from one that holds locks (a DataLoader's worker, forked while its cell
    measures): close this copy of every lock's descriptor. The lock stays the parent's; a child that hangs
    or outlives it no longer keeps the device locked for every other cell (a forked worker that hung held
    a CI run's disk lock until the suite's end)."""
    for held, _ in _HELD:
        for fd, _path in held:
            with contextlib.suppress(OSError):
                os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_let_go_in_child)


def own_lock(lp: Path) -> Path:
    """The running user's own lock beside the shared lock file ``lp``: ``dev-8-1.uid-1000.lock``."""
    return lp.with_name(f"{lp.stem}{OWN}{os.geteuid()}.lock")


def check_held() -> None:
    """Raise LockLost where a lock this process holds is no longer named by its file (between runs: a
    cell stops at once rather than at its end)."""
    for held, what in _HELD:
        lost = _lost(held, what)
        if lost:
            raise LockLost(lost)


class _Wait:
    """One wait for a lock: says so at once and then every NOTE_EVERY_S, naming the holder each time, and
    ends at its time limit."""

    def __init__(self, what: str, timeout_s: float | None):
        self.what, self.timeout_s = what, timeout_s
        self.t0 = self.note_at = time.monotonic()

    def seconds(self) -> float:
        return time.monotonic() - self.t0

    def blocked(self, fd: int, lp: Path) -> None:
        """``lp`` (open as ``fd``, closed here) is held by another process: say so when due, raise
        LockTimeout at the limit, else sleep a poll."""
        now, t0 = time.monotonic(), self.t0
        timed_out = self.timeout_s is not None and now - t0 >= self.timeout_s
        holder = holder_of(fd) if now >= self.note_at or timed_out else ""  # said only: it reads /proc
        os.close(fd)
        if now >= self.note_at:
            log.warning(
                "waiting for %s, which is measuring %s (%s)%s",
                holder,
                self.what,
                lp,
                f"; waited {(now - t0) / 60:.0f} min so far" if now - t0 >= 1 else "",
            )
            self.note_at += NOTE_EVERY_S
        if timed_out:
            raise LockTimeout(
                f"{holder} held {self.what} ({lp}) for longer than platform.lock_timeout_min="
                f"{self.timeout_s / 60:g}"
            )
        time.sleep(POLL_S)


def _take(lp: Path, wait: _Wait, own: bool) -> int:
    """The descriptor of ``lp``, locked and still named by ``lp``, after waiting for its holder."""
    while True:
        fd = _open_shared(lp, own)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            wait.blocked(fd, lp)
            continue
        if _still_named(fd, lp):
            return fd
        os.close(fd)  # the file was removed or replaced while we locked it: that lock guards nothing


def _held_beside(lp: Path) -> tuple[int, Path] | None:
    """Another user's own lock beside ``lp`` that a process holds, open (the caller closes it), or None.
    Whoever holds it also locked an ``lp`` of the same name that has since been removed (each cell takes
    ``lp`` first), so it is measuring what ``lp`` guards. The kernel says so (a shared lock tried, at
    once let go), which works across PID namespaces; only plain files are opened."""
    prefix, mine = f"{lp.stem}{OWN}", own_lock(lp).name
    dfd = owned.shared_dir(lp.parent, "platform.lock_dir")
    try:
        for name in os.listdir(dfd):
            if not name.startswith(prefix) or not name.endswith(".lock") or name == mine:
                continue
            try:
                if not stat.S_ISREG(os.lstat(name, dir_fd=dfd).st_mode):
                    continue
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return fd, lp.parent / name
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        return None
    finally:
        os.close(dfd)


def _release(held: list[tuple[int, Path]]) -> None:
    for fd, _ in reversed(held):
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _lost(held: list[tuple[int, Path]], what: str) -> str:
    """Why the locks of ``held`` no longer guard anything (one line), or '' while each file is still named
    by its lock file."""
    for fd, lp in held:
        if not _still_named(fd, lp):
            return (
                f"platform.lock_dir: {lp}, the lock of {what} (a file of {_name(os.fstat(fd).st_uid)}'s), "
                "was removed during the cell, which its owner may do: another cell may have measured "
                "beside this one, so nothing of this cell is recorded as a result"
            )
    return ""


def check_dir(lock_dir: str) -> None:
    """Raise NotOurs (one line) where the lock folder cannot be used safely; makes nothing (planning)."""
    path = os.path.abspath(lock_dir)
    owned.check_way(os.path.dirname(path), "platform.lock_dir")
    if os.path.lexists(path):
        os.close(owned.shared_dir(path, "platform.lock_dir"))


def _open_shared(lp: Path, own: bool = False) -> int:
    """The lock file, opened read-only in the shared lock folder without following a link: nothing is ever
    written in a lock file, so another user's lock file locks as well as one's own, and a planted link,
    FIFO or device is refused, never opened as a file. An ``own`` lock (``own_lock``) must be the user's
    or root's: one that another user made could be removed by them."""
    dfd = owned.shared_dir(lp.parent, "platform.lock_dir")
    try:
        fd = os.open(
            lp.name,
            os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
            0o644,
            dir_fd=dfd,
        )
    except OSError as e:
        link = e.errno == errno.ELOOP or _is_link(lp.name, dfd)
        kind = "a link" if link else f"not a lock file ({e.strerror})"
        raise owned.NotOurs(
            f"platform.lock_dir: {lp} is {kind}: the tool never follows another user's link "
            "or opens what is not a plain file; its owner should remove it"
        ) from None
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise owned.NotOurs(f"platform.lock_dir: {lp} is not a plain file: its owner should remove it")
    if own and st.st_uid not in (0, os.geteuid()):
        os.close(fd)
        raise owned.NotOurs(
            f"platform.lock_dir: {lp} belongs to {_name(st.st_uid)}, who could remove it while a "
            f"cell of {_name(os.geteuid())}'s holds it; its owner (or root) should remove it"
        )
    return fd


def _is_link(name: str, dfd: int) -> bool:
    """Whether ``name`` in the folder ``dfd`` is a link (in a sticky folder of another owner the kernel
    refuses to follow it with EACCES before O_NOFOLLOW can say ELOOP: fs.protected_symlinks)."""
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dfd).st_mode)
    except OSError:
        return False


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
    # the locker may have passed the file on and ended
    others = [pid for pid in _openers(st) if pid != os.getpid()]
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
    return f"pid {pid} ({comm}, user {_name(uid)})"


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


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
