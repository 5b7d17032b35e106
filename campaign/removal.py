"""Removing (or sizing) one folder the tool keeps without ever leaving it: the tree is walked by
descriptors, so no link is followed; nothing on another device or another mount is entered or removed (a
bind mount of a folder of the same file system has the same device number, so each folder's mount is
compared too, as the kernel reports it in ``/proc/self/fdinfo``); what another user owns stays where it
is, and every such thing is reported, never skipped in silence. ``campaign.cache purge`` removes with it.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Walk:
    bytes: int = 0  # allocated bytes removed (counted, when sizing)
    kept: list[str] = field(default_factory=list)  # "<path>: why it stays"


@dataclass(frozen=True)
class _Base:
    dev: int  # the device of the folder walked
    mnt: int | None  # its mount's id
    points: frozenset[str]  # every mount point of this process, decoded (a file can be one)
    remove: bool


def mount_id(fd: int) -> int | None:
    """The id of the mount the open file ``fd`` is on (``mnt_id`` of ``/proc/self/fdinfo``, Linux 3.15)."""
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            for line in f:
                if line.startswith("mnt_id:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def user(uid: int) -> str:
    """The name of user ``uid`` (``uid N`` for one without a name)."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _foreign(st: os.stat_result, base: _Base) -> str | None:
    """Why an item must stay whatever it holds: another user's, or on another device."""
    if st.st_uid != os.geteuid():
        return f"belongs to {user(st.st_uid)}"
    if st.st_dev != base.dev:
        return "on another device (a mount)"
    return None


def remove(path: str, points: frozenset[str]) -> Walk:
    """Remove ``path`` (a folder, or a file) and what it holds that is the user's and on its own mount;
    ``points``: the mount points of this process (``jobs.storage.mounts``). Returns what went and what
    stayed."""
    return _top(path, points, remove=True)


def size(path: str, points: frozenset[str]) -> int:
    """The bytes ``remove`` would free: allocated blocks of the user's items on ``path``'s own mount."""
    return _top(path, points, remove=False).bytes


def _top(path: str, points: frozenset[str], remove: bool) -> Walk:
    out = Walk()
    parent, name = os.path.split(path)
    try:
        pfd = os.open(parent, _DIR)
    except OSError as e:
        out.kept.append(f"{path}: {e.strerror}")
        return out
    try:
        pst = os.fstat(pfd)
        base = _Base(pst.st_dev, mount_id(pfd), points, remove)
        _item(pfd, name, path, base, out)
    finally:
        os.close(pfd)
    return out


def _item(dir_fd: int, name: str, path: str, base: _Base, out: Walk) -> bool:
    """Remove (or count) ``name`` in ``dir_fd``; whether it is gone (counted) whole."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return True
    why = _foreign(st, base)
    if why is None and stat.S_ISDIR(st.st_mode):
        why = _folder(dir_fd, name, path, st, base, out)
    elif why is None:
        why = _file(dir_fd, name, path, base)
    if why == "":  # a folder that keeps something inside: its contents said why
        return False
    if why:
        out.kept.append(f"{path}: {why}")
        return False
    out.bytes += st.st_blocks * 512
    return True


def _folder(dir_fd: int, name: str, path: str, st: os.stat_result, base: _Base, out: Walk) -> str | None:
    """Empty the folder and remove it; None when it went, "" when something inside stays, else why not."""
    try:
        fd = os.open(name, _DIR, dir_fd=dir_fd)
    except OSError as e:
        return e.strerror
    try:
        here = os.fstat(fd)
        if (here.st_dev, here.st_ino) != (st.st_dev, st.st_ino):
            return "replaced while it was removed"
        if mount_id(fd) != base.mnt or path in base.points:
            return "a mount point"
        with os.scandir(fd) as it:
            names = [e.name for e in it]
        whole = all([_item(fd, n, f"{path}/{n}", base, out) for n in names])
    finally:
        os.close(fd)
    if not whole:
        return ""
    if base.remove:
        try:
            os.rmdir(name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        except OSError as e:
            return "a mount point" if e.errno == errno.EBUSY else e.strerror
    return None


def _file(dir_fd: int, name: str, path: str, base: _Base) -> str | None:
    """Remove a file, a link (never what it points to) or a special file; None when it went, else why not."""
    if path in base.points:
        return "a mount point"
    if base.remove:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        except OSError as e:
            return "a mount point" if e.errno == errno.EBUSY else e.strerror
    return None
