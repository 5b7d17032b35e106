"""One rank's checkpoint shard in an object store (``storage=s3``, ``storage=azure``): each file of the
shard one object under the run's key prefix, written as a framework's writer streams a tensor (an upload
in parts, one part per request of ``block_mb``, at least S3's 5 MiB: S3's multipart upload, Azure's
blocks; a file smaller than a part is one PUT), durable once the store answered; then, the embedded
server's files evicted, read back cold by one GET per object (Azure's SDK: a GET of up to 32 MiB, then
GETs of 4 MiB) streamed in ``block_mb`` reads, every byte checked as ``shardio.read`` checks a file's.

The same bytes as on a file-system tier (``shardio.Content``); the requests are the store's service's
(``Service.put_parts``, ``stream``), as every other request of the tool (PyTorch's DCP writes through
s3torchconnector instead: ``dcp``). Every key, and every upload's ID where the store names one (S3's
multipart uploads), is recorded in the rank's local record first (``jobs.storage.objectstore.journal``):
what the rank, a failure or the next run after a kill removes is what a record names, never what the
bucket holds."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from pathlib import Path

from jobs.storage.objectstore import objects, services
from jobs.storage.objectstore.client import StoreError
from jobs.workloads.shards import shardio

log = logging.getLogger(__name__)
MIN_PART = 5 * 1024 * 1024  # S3's smallest part of a multipart upload (but the last)


def _blocks(file_no: int, size: int, content: shardio.Content, base: bytes, part: int):
    """The file's bytes in ``part``-sized pieces (each a whole number of blocks, the last shorter)."""
    buf = bytearray(base)
    piece = bytearray()
    for k, off in enumerate(range(0, size, content.block)):
        n = min(content.block, size - off)
        buf[: shardio.STAMP] = content.stamp(file_no, k)
        piece += buf[:n]
        if len(piece) >= part:
            yield bytes(piece)
            piece.clear()
    if piece or size == 0:
        yield bytes(piece)


def write(
    store, prefix: str, files: list[tuple[str, int]], content: shardio.Content, base: bytes, journal
) -> float:
    """Put every file of the shard as an object under ``prefix``, each key recorded first in ``journal``
    (``jobs.storage.objectstore.journal``); seconds taken."""
    part = max(MIN_PART, content.block)
    t0 = time.perf_counter()
    for file_no, (name, size) in enumerate(files):
        pieces = _blocks(file_no, size, content, base, part)
        _put(store.client, store.endpoint, f"{prefix}/{name}", pieces, journal)
    return time.perf_counter() - t0


def _put(handle, endpoint, key: str, pieces, journal) -> None:
    """One object from ``pieces`` (``Service.put_parts``), its key recorded in ``journal`` before any
    request and its upload's ID as soon as the store names one: a kill between two parts leaves what the
    next run needs to abort and remove it."""
    service = services.of(endpoint)
    journal.put(key)
    try:
        service.put_parts(handle, endpoint, key, pieces, lambda upload: journal.upload(key, upload))
    except StoreError:
        raise
    except Exception as e:  # noqa: BLE001 - one line naming the endpoint
        raise service.why(e, endpoint) from None


class _Stream:
    """An object's body, its chunks as the GET gives them (``objects.chunks``: a failure is one line), as
    ``shardio.read_from`` reads a file."""

    def __init__(self, chunks):
        self.chunks = chunks
        self.left = memoryview(b"")

    def readinto(self, view: memoryview) -> int:
        if not self.left:
            self.left = memoryview(next(self.chunks, b""))
        n = min(len(view), len(self.left))
        view[:n] = self.left[:n]
        self.left = self.left[n:]
        return n

    def read(self, n: int) -> bytes:
        buf = bytearray(n)
        return bytes(buf[: self.readinto(memoryview(buf))])

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.chunks.close()


def read(store, prefix: str, files: list[tuple[str, int]], content: shardio.Content, base: bytes) -> float:
    """GET every object of the shard, each byte checked; seconds taken."""

    def opened(name: str) -> _Stream:
        return _Stream(objects.chunks(store.client, store.endpoint, f"{prefix}/{name}", content.block))

    service = services.of(store.endpoint)
    where = service.location(store.endpoint, prefix)
    return shardio.read_from(opened, where, files, content, base)


def phases(
    ctx, store, prefix: str, files: list[tuple[str, int]], content: shardio.Content, base: bytes, journal
) -> dict:
    """``shardio.phases`` on the store: save, every rank saved, the server's files evicted, the cold load;
    the device bytes are the embedded server's reads during the load (None on a user's endpoint)."""
    from jobs.storage import cache

    ctx.mark("start")
    out = {"save_s": write(store, prefix, files, content, base, journal)}
    ctx.barrier("saved")
    cache.evict(store.server_files())
    ctx.barrier("evicted")
    with server_reads(ctx, store) as reads:
        out["load_s"] = read(store, prefix, files, content, base)
    ctx.mark("end")
    return {**out, "write_device_bytes": None, "read_device_bytes": reads[0], "read_syscall_bytes": None}


@contextlib.contextmanager
def server_reads(ctx, store):
    """The embedded server's disk reads over every rank's load, as ``[bytes]``: taken by rank 0 from the
    barrier before the loads to the one after them all (the server's reads are the run's, not a rank's);
    0 for the other ranks, so the run's total is the server's; None on a user's endpoint."""
    before = store.counters() if ctx.rank == 0 else None
    reads: list = [None]
    yield reads
    ctx.barrier("loaded")
    if before is not None:
        reads[0] = store.disk_bytes_since(before)
    elif ctx.rank > 0 and store.server is not None:
        reads[0] = 0


def records(ctx) -> Path:
    """The folder of the records of what the cell's ranks put (``journal``): the tool's own, on
    ``storage.root``, local to the host whose next run cleans up after a killed one."""
    from jobs.storage.objectstore import journal

    return journal.folder(ctx.cfg.storage.root, "storage.root")


RECORD = "shards-"  # what the names of the ranks' records start with


def begin(ctx, store, run: str, rank: int):
    """The rank's record (``journal``), made before it puts anything; rank 0 first cleans up after the
    ranks of killed runs on this host (their uploads aborted, their recorded objects deleted: nothing
    else). Returns (the record, the prefixes (a killed rank's) whose objects the clean-up deleted)."""
    from jobs.storage.objectstore import journal

    where = records(ctx)
    removed: list[str] = []
    if ctx.rank == 0:
        for dead in journal.dead_records(where, store.endpoint, RECORD):
            removed += journal.clean(store.client, store.endpoint, dead)
    removed = sorted({k.rsplit("/", 1)[0] for k in removed})
    name = f"{RECORD}{socket.gethostname()}-{os.getpid()}-{run}-rank{rank:05d}"
    return journal.Journal.create(where, name, store.endpoint), removed


def finish(store, j, keep: bool, failed: bool = False) -> None:
    """The rank is done with its objects: kept for the user (``checkpoint.keep=true``, the record goes and
    no later run touches them), or removed (its uploads aborted, its recorded keys deleted). A failed
    rank's clean-up that fails too is logged, never raised over the run's own error; its record stays
    for the next run."""
    from jobs.storage.objectstore import journal
    from jobs.storage.objectstore.client import StoreError

    if keep and not failed:
        j.forget()
        return
    try:
        journal.clean(store.client, store.endpoint, j)
    except StoreError as e:
        if not failed:
            raise
        log.warning("the run's shard in %s could not be removed: %s", store.endpoint.url, e)
