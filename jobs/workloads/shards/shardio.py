"""One rank's checkpoint shard on a tier: written as a training framework writes it (sequential writes
of ``block_mb``, then fsync of every file and of the folder: durable before it counts), and read back
cold into memory, every byte checked.

A file's bytes are a random block of the rank's own (seeded), each block stamped with the rank, the
file and its place in the file, so a block read back from the wrong file or offset is caught, not only
a wrong byte. The check is a comparison with what was written, as fast as the read itself, so it
costs the timed load nothing it would not cost a framework (which deserialises every byte); the
file's sha256 is computed before the timed save and recorded."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import random
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from jobs.data import loading

STAMP = 24  # bytes at the start of every block: rank, file number, block number


class ShardError(RuntimeError):
    """A shard read back differs from what was written (the file, block and offset are named)."""


FULL = (errno.ENOSPC, errno.EDQUOT)  # a tier (or the user's quota on it) filled up


class TierFull(RuntimeError):
    """A write of a shard into ``folder`` found its tier full; ``written`` bytes of the shard had gone in."""

    def __init__(self, folder: Path, written: int, cause: OSError):
        super().__init__(f"{folder}: {cause.strerror} after {written} bytes")
        self.folder, self.written = folder, written


@contextlib.contextmanager
def _full_is_named(folder: Path, progress: list[int]):
    """ENOSPC or EDQUOT while writing into ``folder`` raised as TierFull (``progress[0]``: bytes written)."""
    try:
        yield
    except OSError as e:
        if e.errno in FULL:
            raise TierFull(folder, progress[0], e) from e
        raise


@dataclass(frozen=True)
class Content:
    """What rank ``rank`` writes: its own random block, stamped per place."""

    rank: int
    seed: int
    block: int  # bytes per write and read request (a multiple of 8)

    def __post_init__(self) -> None:
        if self.block % 8 or self.block <= STAMP:
            raise ValueError(f"a block of {self.block} B: it must be a multiple of 8 above {STAMP}")

    def base(self) -> bytes:
        return random.Random(self.seed * 1_000_003 + self.rank).randbytes(self.block)

    def stamp(self, file_no: int, block_no: int) -> bytes:
        return struct.pack("<QQQ", self.rank, file_no, block_no)

    def sha256(self, base: bytes, file_no: int, size: int) -> str:
        h = hashlib.sha256()
        for k, off in enumerate(range(0, size, self.block)):
            n = min(self.block, size - off)
            h.update((self.stamp(file_no, k) + base[STAMP:n])[:n])
        return h.hexdigest()


def write(folder: Path, files: list[tuple[str, int]], content: Content, base: bytes) -> float:
    """Write every file (created, never overwritten), fsync each and the folder; seconds taken."""
    buf = bytearray(base)
    done = [0]
    t0 = time.perf_counter()
    with _full_is_named(folder, done):
        for file_no, (name, size) in enumerate(files):
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                for k, off in enumerate(range(0, size, content.block)):
                    n = min(content.block, size - off)
                    buf[:STAMP] = content.stamp(file_no, k)
                    _write_all(fd, memoryview(buf)[:n], done)
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_folder(folder)
    return time.perf_counter() - t0


def _write_all(fd: int, view: memoryview, done: list[int]) -> None:
    """Write all of ``view`` (os.write may write less), counting each byte written in ``done[0]`` as it
    goes, so that a full tier names how much of the shard made it."""
    while view:
        put = os.write(fd, view)
        done[0] += put
        view = view[put:]


def _fsync_folder(folder: Path) -> None:
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read(folder: Path, files: list[tuple[str, int]], content: Content, base: bytes) -> float:
    """Read every file back whole in ``block``-sized requests, checking each block against what was
    written (8 bytes at a time, at memory speed); seconds taken. Raises ShardError on the first
    difference (or a short file)."""
    return read_from(lambda name: open(folder / name, "rb", buffering=0), str(folder), files, content, base)


def read_from(opener, where: str, files: list[tuple[str, int]], content: Content, base: bytes) -> float:
    """``read`` from what ``opener(name)`` opens (a file, or an object's stream: anything with
    ``readinto`` and ``read``, usable in ``with``); ``where`` names the place in errors."""
    import numpy as np

    buf = bytearray(content.block)
    view, words = memoryview(buf), np.frombuffer(buf, dtype=np.uint64)
    mine = np.frombuffer(base, dtype=np.uint64)
    t0 = time.perf_counter()
    for file_no, (name, size) in enumerate(files):
        with opener(name) as f:
            for k, off in enumerate(range(0, size, content.block)):
                n = min(content.block, size - off)
                got, whole = _read_exactly(f, view[:n]), n // 8
                if (
                    got != n
                    or view[: min(STAMP, n)] != content.stamp(file_no, k)[:n]  # a last block may be shorter
                    or not np.array_equal(words[STAMP // 8 : whole], mine[STAMP // 8 : whole])
                    or buf[max(whole * 8, STAMP) : n] != base[max(whole * 8, STAMP) : n]
                ):
                    raise ShardError(
                        f"{where}/{name}: block {k} (bytes {off}-{off + n}) differs from what rank "
                        f"{content.rank} wrote" + (f" ({got} of {n} bytes read)" if got != n else "")
                    )
            if f.read(1):
                raise ShardError(f"{where}/{name}: longer than the {size} bytes written")
    return time.perf_counter() - t0


def _read_exactly(f, view: memoryview) -> int:
    """Fill ``view`` from ``f`` (a stream may give less per call); the bytes read, fewer only at its end."""
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            break
        got += n
    return got


def io_bytes() -> tuple[int | None, int | None, int | None]:
    """(read_bytes, write_bytes, rchar) of this process so far, in one read of /proc/self/io."""
    try:
        with open("/proc/self/io") as f:
            vals = {k: int(v) for k, _, v in (line.partition(":") for line in f)}
        return vals.get("read_bytes"), vals.get("write_bytes"), vals.get("rchar")
    except (OSError, ValueError):
        return None, None, None


def drain(fast: Path, slow: Path, files: list[tuple[str, int]], sums: list[str], block: int) -> float:
    """The burst buffer's copy of one rank's shard: each file read from the fast tier and written to the slow
    one in ``block``-sized requests (created, never overwritten), fsynced with its folder, checked against
    its sha256, then the fast copy removed; seconds taken. Raises ShardError on a difference."""
    t0 = time.perf_counter()
    done = [0]
    for (name, _), want in zip(files, sums):
        h = hashlib.sha256()
        with open(fast / name, "rb", buffering=0) as src, _full_is_named(slow, done):
            fd = os.open(slow / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                while chunk := src.read(block):
                    h.update(chunk)
                    _write_all(fd, memoryview(chunk), done)
                os.fsync(fd)
            finally:
                os.close(fd)
        if h.hexdigest() != want:
            raise ShardError(f"{fast / name}: its copy to {slow} does not match the sha256 rank wrote")
    with _full_is_named(slow, done):
        _fsync_folder(slow)
    for name, _ in files:
        (fast / name).unlink()  # only now: the slow copy is durable and checked
    return time.perf_counter() - t0


def checkpoint_files(files: list[tuple[str, int]], writes: int) -> list[list[tuple[str, int]]]:
    """The files of each of ``writes`` checkpoints a rank writes in its folder: the shard's own names, each
    checkpoint's after its number (``ckpt03_<name>``) where a run writes more than one."""
    if writes == 1:
        return [files]
    return [[(f"ckpt{i:02d}_{n}", b) for n, b in files] for i in range(writes)]


def many_phases(
    ctx, folder: Path, files: list[tuple[str, int]], content: Content, base: bytes, writes: int, reads: int
) -> dict:
    """MLPerf Storage's checkpointing run for one rank: ``writes`` checkpoints saved one after another, each
    durable (fsync) before the next and every rank's before any rank's next (a barrier); then every
    checkpoint evicted from the page cache (MLPerf clears it when a client wrote at most 3 times its memory;
    here always, so that no read is served from memory); then the last ``reads`` of them loaded cold, one
    after another, every byte checked. The save and load durations are each checkpoint's; ``read_gap_s``
    is the time from the last write's end to the first read's start (MLPerf: within 30 s)."""
    from jobs.storage import cache

    each = checkpoint_files(files, writes)
    _, w0, _ = io_bytes()
    ctx.mark("start")
    saves = []
    for i, ck in enumerate(each):
        saves.append(write(folder, ck, content, base))
        ctx.barrier(f"saved{i}")  # every rank's checkpoint i is durable before any rank writes the next
    written_at = time.perf_counter()
    _, w1, _ = io_bytes()
    cache.evict([str(folder / n) for ck in each for n, _ in ck])
    ctx.barrier("evicted")
    r0, _, rc0 = io_bytes()
    gap = time.perf_counter() - written_at
    loads = [read(folder, ck, content, base) for ck in each[writes - reads :]]
    r1, _, rc1 = io_bytes()
    ctx.mark("end")
    return {
        "save_s": sum(saves) / len(saves),
        "load_s": sum(loads) / len(loads),
        "save_each_s": saves,
        "load_each_s": loads,
        "read_gap_s": gap,
        "cache_cleared": True,
        "write_device_bytes": None if w0 is None or w1 is None else w1 - w0,
        "read_device_bytes": None if r0 is None or r1 is None else r1 - r0,
        "read_syscall_bytes": loading.delta(rc0, rc1),
    }


def phases(
    ctx, folders: list[Path], files: list[tuple[str, int]], content: Content, base: bytes, sums: list[str]
) -> dict:
    """One rank's timed phases, every rank in step (the run's barriers): save into ``folders[0]``; through
    the burst buffer (two folders: fast, slow) the drain to ``folders[1]``; then, every copy durable and
    evicted, the cold load of the last folder, every byte checked."""
    from jobs.storage import cache

    _, w0, _ = io_bytes()
    ctx.mark("start")  # every rank's save starts together (the tasks' barrier)
    out = {"save_s": write(folders[0], files, content, base)}
    _, w1, _ = io_bytes()
    ctx.barrier("saved")  # MLPerf: every rank has written before any reads
    if len(folders) > 1:
        out["drain_s"] = drain(folders[0], folders[1], files, sums, content.block)
        ctx.barrier("drained")
    last = folders[-1]
    cache.evict([str(last / n) for n, _ in files])
    ctx.barrier("evicted")
    r2, _, rc0 = io_bytes()
    out["load_s"] = read(last, files, content, base)
    r3, _, rc1 = io_bytes()
    ctx.mark("end")
    return {
        **out,
        "write_device_bytes": None if w0 is None or w1 is None else w1 - w0,
        "read_device_bytes": None if r2 is None or r3 is None else r3 - r2,
        "read_syscall_bytes": loading.delta(rc0, rc1),
    }
