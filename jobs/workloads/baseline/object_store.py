"""Table I for an object store: its GET and PUT throughput, measured with the tool's own client of the
store's service (boto3 for S3, azure-storage-blob for Azure Blob), at each number of requests in flight
(``workload.requests_in_flight``), for large objects (64 MiB: a store's streaming rate) and small ones (the
dataset's own images for GETs, 112 KB objects for PUTs: the paper's median image).

At each count: the large objects are put, the server's files evicted, then read back (cold); the
dataset's objects are read cold; as many small objects are put. The best large GET and PUT rates are
the tier's Table I row (as IOR's maximum is); every rate is kept per count (``object_mb_s``). The
large objects are ``workload.file_gb`` in all: a count above their number is measured on small
objects only (64 of 64 MiB would be 4.3 GB in flight). What this puts is under ``<prefix>/baseline/``
and deleted at the end, whatever happened.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from jobs.storage import cache
from jobs.storage.objectstore import clients, objects, services
from jobs.storage.objectstore.client import StoreError

log = logging.getLogger(__name__)

LARGE = 64 << 20  # bytes of a large object (64 MiB)
SMALL = 112_000  # bytes of a small object (the paper's median image, 112 KB)
SMALL_MAX = 1024  # small objects per count at most (the dataset's first ones, for GETs)
CHUNK = 1 << 20  # a GET's body is read in chunks this large (never held whole)


def _timed(fn, items: list, in_flight: int) -> float:
    """Seconds to apply ``fn`` to every item with ``in_flight`` requests at a time."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        list(pool.map(fn, items))
    return time.perf_counter() - t0


def _get(store, key: str) -> int:
    return sum(len(c) for c in services.of(store.endpoint).stream(store.client, store.endpoint, key, CHUNK))


def _fsync(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # a file the server removed meanwhile
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _put(store, key: str, body: bytes) -> None:
    services.of(store.endpoint).put(store.client, store.endpoint, key, body)


class _Sweep:
    """The rates of one run, per measure and count, and what the server read from its disk for each GET
    measure (evicted first: cold)."""

    def __init__(self, store):
        self.store = store
        self.rates: dict[str, dict[str, float]] = {m: {} for m in MEASURES}
        self.read: dict[str, list[int | None]] = {"get_large": [0, 0], "get_small": [0, 0]}  # device, got

    def put(self, measure: str, keys: list[str], body: bytes, c: int) -> None:
        """The PUTs, then (embedded server) its files flushed to its disk, inside the timed interval: the
        server does not sync a PUT itself, and Table I's writes are flushed."""
        t0 = time.perf_counter()
        _timed(lambda k: _put(self.store, k, body), keys, c)
        for path in self.store.server_files():
            _fsync(path)
        self.rates[measure][str(c)] = len(keys) * len(body) / (time.perf_counter() - t0) / 1e6

    def get(self, measure: str, keys: list[str], nbytes: int, c: int) -> None:
        cache.evict(self.store.server_files())
        before = self.store.counters()
        took = _timed(lambda k: _get(self.store, k), keys, c)
        read = self.store.disk_bytes_since(before)
        self.rates[measure][str(c)] = nbytes / took / 1e6
        seen = self.read[measure]
        seen[0] = None if None in (seen[0], read) else seen[0] + read
        seen[1] += nbytes

    def device_ratio(self) -> dict[str, float | None]:
        return {m: (d / n if d is not None and n else None) for m, (d, n) in self.read.items()}


MEASURES = ("put_large", "get_large", "get_small", "put_small")


def _clean(store, prefix: str) -> None:
    """Delete what the run put; a store that no longer answers is said in the log, not raised over the
    run's own error."""
    try:
        objects.delete_prefix(store.client, store.endpoint, prefix)
    except StoreError as e:
        log.warning("the baseline's objects under %s were not deleted: %s", prefix, e)


def large_objects(file_gb: float) -> int:
    """How many 64 MiB objects ``workload.file_gb`` makes (at least one)."""
    return max(1, round(file_gb * 1e9 / LARGE))


def run_once(ds, store, file_gb: float, in_flight: tuple[int, ...], tag: str) -> dict:
    """One baseline run on the object store ``store`` (``jobs.storage.objectstore.tier.Store``)."""
    from importlib import metadata

    tool = clients.the_tools(store.endpoint.service)
    version = metadata.version(tool.distribution)

    # unique across hosts and processes: two campaigns on one user's bucket never meet
    prefix = (
        f"{store.endpoint.prefix}/baseline/{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}-{tag}"
    )
    large_n = large_objects(file_gb)
    blob, small_blob = os.urandom(LARGE), os.urandom(SMALL)
    small = list(ds.objects[:SMALL_MAX])
    sweep = _Sweep(store)
    try:
        for c in in_flight:
            large = [f"{prefix}/large-{c}-{i:04d}" for i in range(large_n)]
            if c <= large_n:  # more in flight than objects: the count is measured on small objects only
                sweep.put("put_large", large, blob, c)
                sweep.get("get_large", large, large_n * LARGE, c)
            sweep.get("get_small", small, sum(ds.sizes[: len(small)]), c)
            sweep.put("put_small", [f"{prefix}/small-{c}-{i:04d}" for i in range(len(small))], small_blob, c)
            objects.delete_prefix(store.client, store.endpoint, prefix)  # the next count starts empty
    except StoreError:
        raise
    except Exception as e:  # noqa: BLE001 - one line naming the endpoint
        raise services.of(store.endpoint).why(e, store.endpoint) from None
    finally:
        _clean(store, prefix)
    rates = sweep.rates
    client = f"{tool.name} {version}"
    best_get, best_put = (max(rates[m], key=lambda k: rates[m][k]) for m in ("get_large", "put_large"))
    commands = {
        "seq_read": f"GET {large_n} objects of 64 MiB, {best_get} in flight, cold ({client})",
        "seq_write": f"PUT {large_n} objects of 64 MiB, {best_put} in flight, flushed ({client})",
        **{
            f"small_read_{c}": f"GET the dataset's first {min(len(ds.objects), SMALL_MAX)} objects, "
            f"{c} in flight, cold ({client})"
            for c in in_flight
        },
    }
    return {
        "seq_read_mb_s": rates["get_large"][best_get],
        "seq_write_mb_s": rates["put_large"][best_put],
        "small_read_mb_s": rates["get_small"],
        "object_mb_s": rates,
        "file_bytes": large_n * LARGE,
        "tool": tool.name,
        "tool_version": version,
        "small_file_tool": tool.name,
        "commands": commands,
        "images": len(ds.files),
        "images_dropped": 0,
        "bytes_consumed": sum(n for _, n in sweep.read.values()),
        # what the embedded server read from its disk for the GETs (None: a user's endpoint)
        "bytes_read_device": None
        if None in (d for d, _ in sweep.read.values())
        else sum(d for d, _ in sweep.read.values()),
        "object_device_ratio": sweep.device_ratio(),
    }
