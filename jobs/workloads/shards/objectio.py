"""One rank's checkpoint shard in an object store (``storage=s3``): each file of the shard one object under
the run's key prefix, written as a framework's S3 writer streams a tensor (an S3 multipart upload, one
part per request of ``block_mb``, at least S3's 5 MiB; a file smaller than a part is one PUT), durable
once the store answered; then, the embedded server's files evicted, read back cold by one GET per object
streamed in ``block_mb`` reads, every byte checked as ``shardio.read`` checks a file's.

The same bytes as on a file-system tier (``shardio.Content``); the requests are boto3's, as every other
request of the tool (PyTorch's DCP writes through s3torchconnector instead: ``dcp``)."""

from __future__ import annotations

import contextlib
import time

from jobs.storage.objectstore.client import StoreError, why
from jobs.workloads.shards import shardio

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


def _put(s3, bucket: str, key: str, pieces) -> None:
    """One object from ``pieces``: a PUT when there is one, else a multipart upload (aborted on failure, so
    no part outlives it)."""
    first = next(pieces)
    second = next(pieces, None)
    if second is None:
        s3.put_object(Bucket=bucket, Key=key, Body=first)
        return
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    try:
        parts = []
        for number, body in enumerate((first, second, *pieces), start=1):
            answer = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=body)
            parts.append({"PartNumber": number, "ETag": answer["ETag"]})
        s3.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
        )
    except BaseException:
        try:
            s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
        except Exception:  # noqa: BLE001 - the first failure is the one to report
            pass
        raise


def write(store, prefix: str, files: list[tuple[str, int]], content: shardio.Content, base: bytes) -> float:
    """Put every file of the shard as an object under ``prefix``; seconds taken."""
    part = max(MIN_PART, content.block)
    t0 = time.perf_counter()
    for file_no, (name, size) in enumerate(files):
        try:
            _put(
                store.client,
                store.endpoint.bucket,
                f"{prefix}/{name}",
                _blocks(file_no, size, content, base, part),
            )
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - one line naming the endpoint
            raise why(e, store.endpoint) from None
    return time.perf_counter() - t0


class _Stream:
    """An object's body as ``shardio.read_from`` reads a file."""

    def __init__(self, body):
        self.body = body

    def readinto(self, view: memoryview) -> int:
        data = self.body.read(len(view))
        view[: len(data)] = data
        return len(data)

    def read(self, n: int) -> bytes:
        return self.body.read(n)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.body.close()


def read(store, prefix: str, files: list[tuple[str, int]], content: shardio.Content, base: bytes) -> float:
    """GET every object of the shard, each byte checked; seconds taken."""

    def opened(name: str) -> _Stream:
        try:
            return _Stream(
                store.client.get_object(Bucket=store.endpoint.bucket, Key=f"{prefix}/{name}")["Body"]
            )
        except Exception as e:  # noqa: BLE001 - one line naming the endpoint
            raise why(e, store.endpoint) from None

    return shardio.read_from(opened, f"s3://{store.endpoint.bucket}/{prefix}", files, content, base)


def phases(
    ctx, store, prefix: str, files: list[tuple[str, int]], content: shardio.Content, base: bytes
) -> dict:
    """``shardio.phases`` on the store: save, every rank saved, the server's files evicted, the cold load;
    the device bytes are the embedded server's reads during the load (None on a user's endpoint)."""
    from jobs.storage import cache

    ctx.mark("start")
    out = {"save_s": write(store, prefix, files, content, base)}
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
    after = store.counters() if ctx.rank == 0 else None
    if before is not None and after is not None:
        reads[0] = after[0] - before[0]
    elif ctx.rank > 0 and store.server is not None:
        reads[0] = 0


OWNER = "owner.json"  # in a rank's prefix: the host and process putting it, and whether the run kept it


def claim(store, prefix: str) -> None:
    """Say who puts the rank's objects under ``prefix``, before the first of them: a later run on this host
    removes them if that process died (``remove_killed``)."""
    _owner(store, prefix, kept=False)


def keep(store, prefix: str) -> None:
    """The run finished and keeps its shard (``checkpoint.keep=true``): no later run removes it."""
    _owner(store, prefix, kept=True)


def _owner(store, prefix: str, kept: bool) -> None:
    import json
    import os
    import socket

    body = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "kept": kept}).encode()
    try:
        store.client.put_object(Bucket=store.endpoint.bucket, Key=f"{prefix}/{OWNER}", Body=body)
    except Exception as e:  # noqa: BLE001 - one line naming the endpoint
        raise why(e, store.endpoint) from None


def remove_killed(store, runs: str, run_prefix: str) -> list[str]:
    """Remove the ranks under ``runs`` (``<prefix>/checkpoints``) whose run folder starts ``run_prefix`` and
    whose process, on this host, died before it finished (a killed campaign's): only what such a process
    claimed; another host's, a live one's and a kept one's stay. Returns the rank prefixes removed."""
    import json
    import socket

    from jobs.storage.objectstore import objects, server

    host, removed = socket.gethostname(), []
    for key in sorted(objects.sizes_under(store.client, store.endpoint, runs)):
        rest = key[len(runs) + 1 :].split("/")
        if len(rest) != 3 or not rest[0].startswith(run_prefix) or rest[2] != OWNER:
            continue
        try:
            body = store.client.get_object(Bucket=store.endpoint.bucket, Key=key)["Body"].read()
            owner = json.loads(body)
        except Exception:  # noqa: BLE001 - unreadable: not known to be a dead run's, left alone
            continue
        if owner.get("host") != host or owner.get("kept") or server.alive(int(owner.get("pid", 0))):
            continue
        rank = key.rsplit("/", 1)[0]
        objects.delete_prefix(store.client, store.endpoint, rank)
        removed.append(rank)
    return removed
