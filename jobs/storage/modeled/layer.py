"""The FUSE layer of a modelled tier: a pass-through file system over a backing folder that serves
every read and write after the time the modelled device takes (``OnDisk``: a hard disk; a
``lustre.Lustre``: a parallel file system, which lays files out over its OSTs itself).

Files are placed on the modelled disk as a fresh file system would place them: the files already in
the backing folder in path order from the disk's start, then each new extent where the last one
ended (a file written alone is contiguous; files written side by side interleave). The bytes
themselves come from the backing files; the layer reads them while the request waits in the drive's
queue, and counts a request as *late* when the real read took longer than the modelled one.

The layer's counters are the device's: ``getxattr(<mount>, "user.iocampaign.disk")`` returns them as
JSON, fresh at every call (extended attributes are never cached by the kernel). Imported only by the
layer's own process (``python -m jobs.storage.modeled``), which needs libfuse3.
"""

from __future__ import annotations

import bisect
import errno
import json
import os
import threading
import time

import mfusepy

from jobs.storage.modeled.disk import Disk
from jobs.storage.modeled.mount import MARKER, XATTR, XATTR_SIZE

HIDDEN = "/" + MARKER  # the backing folder's marker: not part of the tier
BLOCK = 4096


class Placement:
    """Where each file's bytes lie on the modelled disk: extents allocated in order, never reused."""

    def __init__(self) -> None:
        self.next = 0  # the first free byte of the disk
        self._extents: dict[str, tuple[list[int], list[int]]] = {}  # path -> (file offsets, disk positions)
        self._allocated: dict[str, int] = {}  # path -> bytes of the file that have a place
        self._lock = threading.Lock()

    def adopt(self, files: list[tuple[str, int]]) -> None:
        """Place files already there ((path, size) in path order, ``backing_files``)."""
        for rel, size in files:
            self.extend(rel, size)

    def extend(self, path: str, upto: int) -> None:
        """Give bytes ``[allocated, upto)`` of ``path`` a place where the disk's free space starts."""
        with self._lock:
            have = self._allocated.get(path, 0)
            if upto <= have:
                return
            offs, poss = self._extents.setdefault(path, ([], []))
            # the file is the last one written: grows in place
            if poss and poss[-1] + (have - offs[-1]) == self.next:
                pass
            else:
                offs.append(have)
                poss.append(self.next)
            grow = -(-(upto - have) // BLOCK) * BLOCK
            self.next += grow
            self._allocated[path] = have + grow

    def locate(self, path: str, offset: int) -> int:
        """The disk position of byte ``offset`` of ``path`` (placing it first when it has none)."""
        if offset >= self._allocated.get(path, 0):
            self.extend(path, offset + 1)
        with self._lock:
            offs, poss = self._extents[path]
            i = bisect.bisect_right(offs, offset) - 1
            return poss[i] + (offset - offs[i])

    def rename(self, old: str, new: str) -> None:
        with self._lock:
            for key in [k for k in self._extents if k == old or k.startswith(old + "/")]:
                nk = new + key[len(old) :]
                self._extents[nk] = self._extents.pop(key)
                self._allocated[nk] = self._allocated.pop(key)

    def alias(self, new: str, old: str) -> None:
        """``new`` is a hard link to ``old``: the same bytes, in the same place."""
        with self._lock:
            if old in self._extents:
                self._extents[new] = self._extents[old]
                self._allocated[new] = self._allocated[old]

    def forget(self, path: str) -> None:
        with self._lock:
            self._extents.pop(path, None)
            self._allocated.pop(path, None)


def backing_files(backing: str) -> list[tuple[str, int]]:
    """The files already in the backing folder, as the layer names them, with their sizes, in path order
    (the marker left out): what a device lays out before the mount serves."""
    found = []
    for top, dirs, files in os.walk(backing):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(top, f)
            if os.path.isfile(p) and not os.path.islink(p) and p != os.path.join(backing, HIDDEN[1:]):
                found.append(("/" + os.path.relpath(p, backing), os.path.getsize(p)))
    return found


class OnDisk:
    """The modelled HDD as the layer's device: files placed on the drive, requests served by its queue."""

    def __init__(self, disk: Disk, placement: Placement):
        self.disk, self.placement = disk, placement

    def adopt(self, files: list[tuple[str, int]]) -> None:
        self.placement.adopt(files)

    @property
    def counters(self):
        return self.disk.counters

    def opened(self, path: str) -> None:
        pass  # the file system's metadata is in memory: an open costs the drive nothing

    def submit(self, path: str, offset: int, size: int, write: bool = False):
        if write:
            self.placement.extend(path, offset + size)
        return self.disk.submit(self.placement.locate(path, offset), size, write)

    def wait(self, r, ready: float | None = None) -> None:
        self.disk.wait(r, ready)

    def rename(self, old: str, new: str) -> None:
        self.placement.rename(old, new)

    def alias(self, new: str, old: str) -> None:
        self.placement.alias(new, old)

    def forget(self, path: str) -> None:
        self.placement.forget(path)


def _real(backing: str, path: str) -> str:
    return os.path.join(backing, path.lstrip("/"))


def _wrapped(fn):
    """An operation whose OSError reaches the kernel as its errno."""

    def inner(*args):
        try:
            return fn(*args)
        except OSError as e:
            raise mfusepy.FuseOSError(e.errno or errno.EIO) from None

    inner.__name__ = fn.__name__
    return inner


class Layer(mfusepy.Operations):
    """The pass-through operations; opens, reads and writes wait for the modelled device."""

    use_ns = True

    def __init__(self, backing: str, device, clock=time.monotonic):
        self.backing, self.device, self.clock = backing, device, clock

    @_wrapped
    def getattr(self, path, fh=None):
        if path == HIDDEN:
            raise mfusepy.FuseOSError(errno.ENOENT)
        st = os.lstat(_real(self.backing, path))
        out = {
            k: getattr(st, k)
            for k in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino", "st_blocks")
        }
        out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return out

    def getxattr(self, path, name, position=0):
        if path == "/" and name == XATTR:
            return json.dumps(self.device.counters.as_dict()).encode().ljust(XATTR_SIZE)
        raise mfusepy.FuseOSError(errno.ENODATA)

    def listxattr(self, path):
        return []

    @_wrapped
    def readdir(self, path, fh):
        return [
            ".",
            "..",
            *sorted(n for n in os.listdir(_real(self.backing, path)) if path != "/" or "/" + n != HIDDEN),
        ]

    @_wrapped
    def open(self, path, flags):
        self.device.opened(path)
        return os.open(
            _real(self.backing, path),
            flags & ~(os.O_DIRECT | os.O_APPEND | os.O_TRUNC | os.O_CREAT | os.O_EXCL),
        )

    @_wrapped
    def create(self, path, mode, fi=None):
        self.device.opened(path)
        return os.open(_real(self.backing, path), os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)

    @_wrapped
    def read(self, path, size, offset, fh):
        size = max(0, min(size, os.fstat(fh).st_size - offset))
        if size == 0:
            return b""
        r = self.device.submit(path, offset, size)
        data = os.pread(fh, size, offset)  # the real read, while the request waits in the device's queue
        self.device.wait(r, self.clock())
        return data

    @_wrapped
    def write(self, path, data, offset, fh):
        r = self.device.submit(path, offset, len(data), write=True)
        n = os.pwrite(fh, data, offset)
        self.device.wait(r, self.clock())
        return n

    @_wrapped
    def truncate(self, path, length, fh=None):
        os.truncate(_real(self.backing, path), length)
        return 0

    @_wrapped
    def release(self, path, fh):
        os.close(fh)
        return 0

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        return 0  # writes are served write-through by the modelled device: nothing is pending

    @_wrapped
    def unlink(self, path):
        os.unlink(_real(self.backing, path))
        self.device.forget(path)
        return 0

    @_wrapped
    def mkdir(self, path, mode):
        os.mkdir(_real(self.backing, path), mode)
        return 0

    @_wrapped
    def rmdir(self, path):
        os.rmdir(_real(self.backing, path))
        return 0

    @_wrapped
    def rename(self, old, new):
        os.rename(_real(self.backing, old), _real(self.backing, new))
        self.device.rename(old, new)
        return 0

    @_wrapped
    def chmod(self, path, mode):
        os.chmod(_real(self.backing, path), mode)
        return 0

    @_wrapped
    def chown(self, path, uid, gid):
        os.lchown(_real(self.backing, path), uid, gid)
        return 0

    @_wrapped
    def utimens(self, path, times=None):
        os.utime(_real(self.backing, path), ns=times) if times else os.utime(_real(self.backing, path))
        return 0

    @_wrapped
    def symlink(self, target, source):
        os.symlink(source, _real(self.backing, target))
        return 0

    @_wrapped
    def link(self, target, source):
        os.link(_real(self.backing, source), _real(self.backing, target))
        self.device.alias(target, source)
        return 0

    @_wrapped
    def readlink(self, path):
        return os.readlink(_real(self.backing, path))

    @_wrapped
    def statfs(self, path):
        sv = os.statvfs(self.backing)
        return {
            k: getattr(sv, k)
            for k in (
                "f_bsize",
                "f_frsize",
                "f_blocks",
                "f_bfree",
                "f_bavail",
                "f_files",
                "f_ffree",
                "f_favail",
                "f_namemax",
            )
        }
