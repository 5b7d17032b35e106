"""Page-cache control without root, and the evidence that it worked.

Eviction is fsync (dirty pages are only partly evicted otherwise) then
``posix_fadvise(DONTNEED)`` per file; the global ``drop_caches`` only when asked and permitted.
Residency is read with mincore(2); device reads with ``/proc/self/io`` ``read_bytes``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
_PAGE = mmap.PAGESIZE
_MAP_FAILED = ctypes.c_void_p(-1).value

# Cache states a run can end up with (the column cache_state of results.csv).
COLD = "cold"  # device reads covered the bytes consumed: the data came from the device
NOT_COLD = "not_cold"  # cold was asked for, but the device delivered too little: numbers measure memory
WARM = "warm"  # warm was asked for and the device delivered (almost) nothing
NOT_WARM = "not_warm"  # warm was asked for, but the device still delivered a large share
MEMORY = "memory"  # tmpfs/ramfs: the data lives in memory, there is no cold state
UNKNOWN = "unknown"  # the per-process device counter does not see this file system (Lustre, NFS, ...)
STATES = (COLD, NOT_COLD, WARM, NOT_WARM, MEMORY, UNKNOWN)  # what a run's cache can have been

COLD_MIN_RATIO = 0.9  # device bytes / consumed bytes at or above which a run counts as cold
WARM_MAX_RATIO = 0.1  # ... at or below which a warm run counts as warm


@dataclass(frozen=True)
class EvictionReport:
    files: int
    bytes: int
    resident_bytes_after: int  # what mincore still saw resident after eviction
    drop_caches: bool  # whether the global drop_caches was written as well


def resident_bytes(path: str) -> int:
    """Bytes of ``path`` resident in the page cache (mincore over a read-only mapping)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap failed for {path}")
        try:
            pages = (size + _PAGE - 1) // _PAGE
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore failed for {path}")
            resident = sum(v & 1 for v in vec)
        finally:
            _libc.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)
    return min(size, resident * _PAGE)


def _open_regular(path: str) -> int | None:
    """A read-only descriptor of ``path`` when it is a regular file, else None. Never blocks: a FIFO
    opened for reading waits for a writer, so it is opened non-blocking and then refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:  # opened, then unreadable (a FUSE tier whose layer died answers ENOTCONN): skipped too
        regular = False
    if not regular:
        os.close(fd)
        return None
    return fd


def residency(paths: Iterable[str]) -> tuple[int, int]:
    """(resident bytes, total bytes) over ``paths``; unreadable files count as zero of both."""
    res = tot = 0
    for p in paths:
        try:
            if not stat.S_ISREG(os.stat(p).st_mode):
                continue
            tot += os.path.getsize(p)
            res += resident_bytes(p)
        except OSError:
            continue
    return res, tot


def _drop_caches() -> bool:
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def evict(paths: Iterable[str], drop_caches: bool = False) -> EvictionReport:
    """Evict ``paths`` from the page cache; unreadable files are skipped (the run will count them).

    Raises PermissionError when ``drop_caches`` was asked for and writing it is not permitted.
    """
    paths = list(paths)
    n = total = 0
    for p in paths:
        fd = _open_regular(p)
        if fd is None:
            continue
        try:
            try:
                os.fsync(fd)
            except OSError:
                pass  # read-only file systems and some special files refuse fsync; fadvise still works
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += os.fstat(fd).st_size
            n += 1
        except OSError:
            continue  # unreadable since it was opened: the run counts it (and the runner asks its tier)
        finally:
            os.close(fd)
    dropped = False
    if drop_caches:
        os.sync()
        if not _drop_caches():
            raise PermissionError(
                "drop_caches=true but /proc/sys/vm/drop_caches is not writable (needs root)"
            )
        dropped = True
    res, _ = residency(paths)
    return EvictionReport(files=n, bytes=total, resident_bytes_after=res, drop_caches=dropped)


def warm(paths: Iterable[str]) -> int:
    """Read every file once so the next run finds it in memory; returns the bytes read."""
    total = 0
    for p in paths:
        fd = _open_regular(p)
        if fd is None:
            continue
        try:
            with open(fd, "rb", buffering=0, closefd=True) as f:
                while chunk := f.read(1 << 20):
                    total += len(chunk)
        except OSError:
            continue
    return total


def process_read_bytes() -> int | None:
    """Bytes this process has caused to be read from block devices so far; None if not available."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def classify(
    requested: str, sighted_only: bool, fs_type: str, device_bytes: int | None, consumed: int
) -> str:
    """The cache state a run actually had, from what the device delivered versus what was consumed.
    ``sighted_only``: this machine's counters may miss the tier's reads (its kind says so:
    ``Backend.sighted_only``), so only a positive sighting proves a run cold."""
    # The file system the data really sits on decides, not what the preset says the tier is.
    if fs_type in MEMORY_FS:
        return MEMORY
    if device_bytes is None or consumed <= 0:
        return UNKNOWN
    ratio = device_bytes / consumed
    if fs_type not in LAYER_COUNTED_FS and (
        fs_type in NETWORK_FS or fs_type.startswith("fuse") or sighted_only
    ):
        # The counter may not see these reads at all: only a positive sighting means anything.
        if requested == "cold" and ratio >= COLD_MIN_RATIO:
            return COLD
        return UNKNOWN
    if requested == "cold":
        return COLD if ratio >= COLD_MIN_RATIO else NOT_COLD
    return WARM if ratio <= WARM_MAX_RATIO else NOT_WARM


# a modelled tier (jobs/storage/modeled): its layer counts every byte the modelled drive served
LAYER_COUNTED_FS = frozenset({"fuse.iocampaign"})
MEMORY_FS = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"})
NETWORK_FS = frozenset(
    {
        "lustre",
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "gpfs",
        "beegfs",
        "ceph",
        "glusterfs",
        "9p",
        "virtiofs",
        "pvfs2",
        "orangefs",
    }
)
