"""A dataset in an object store: one object per file under the tool's prefix, listed by a manifest
written last, and read back by parallel GETs whose every request is counted.

``<prefix>/datasets/<content id>/<nnnnnn>-<file name>`` holds the files in their listed order and
``<prefix>/datasets/<content id>/manifest.json`` names every object with its size. An upload that was
cut off leaves objects but no manifest: ``listing`` then says the dataset is not there, and the next
``upload`` puts only what is missing (same size) before it writes the manifest. Nothing outside the
tool's prefix is ever written or deleted (``delete_prefix`` refuses any other).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from jobs.storage.objectstore import services
from jobs.storage.objectstore.client import StoreError
from jobs.storage.objectstore.endpoint import Endpoint

MANIFEST = "manifest.json"
SCHEMA = 1


@dataclass(frozen=True)
class Listing:
    """A complete dataset in the store: its objects' keys and sizes, in the dataset's order."""

    prefix: str
    keys: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def bytes(self) -> int:
        return sum(self.sizes)


def dataset_prefix(endpoint: Endpoint, content_id: str) -> str:
    return f"{endpoint.prefix}/datasets/{content_id}"


def sizes_under(handle, endpoint: Endpoint, prefix: str) -> dict[str, int]:
    """key -> size of every object under ``prefix`` (``handle``: the service's client, from
    ``Service.connect``)."""
    service = services.of(endpoint)
    try:
        return service.sizes_under(handle, endpoint, prefix)
    except Exception as e:  # noqa: BLE001 - one line naming the endpoint
        raise service.why(e, endpoint) from None


def listing(handle, endpoint: Endpoint, content_id: str) -> Listing | None:
    """The dataset ``content_id`` as its manifest lists it, None while it has no manifest (never
    uploaded, or an upload cut off)."""
    prefix = dataset_prefix(endpoint, content_id)
    service = services.of(endpoint)
    try:
        body = service.get(handle, endpoint, f"{prefix}/{MANIFEST}")
    except Exception as e:  # noqa: BLE001
        if service.missing(e):
            return None
        raise service.why(e, endpoint) from None
    try:
        m = json.loads(body)
        keys, sizes = tuple(str(o["key"]) for o in m["objects"]), tuple(int(o["size"]) for o in m["objects"])
    except (ValueError, KeyError, TypeError) as e:
        raise StoreError(
            f"{service.where(endpoint)}: {prefix}/{MANIFEST} is damaged "
            f"({type(e).__name__}); delete that prefix to upload the dataset again"
        ) from None
    if any(not k.startswith(prefix + "/") or k.endswith("/" + MANIFEST) for k in keys):
        raise StoreError(
            f"{service.where(endpoint)}: {prefix}/{MANIFEST} names objects "
            "outside its dataset; delete that prefix to upload the dataset again"
        )
    return Listing(prefix, keys, sizes)


def upload(
    handle, endpoint: Endpoint, files: list[Path], content_id: str, threads: int = 8
) -> tuple[Listing, int]:
    """Put ``files`` as the dataset ``content_id`` (skipping objects already there with their size), then
    its manifest; returns the listing and how many objects were put now."""
    prefix = dataset_prefix(endpoint, content_id)
    keys = [f"{prefix}/{i:06d}-{Path(f).name}" for i, f in enumerate(files)]
    sizes = [Path(f).stat().st_size for f in files]
    there = sizes_under(handle, endpoint, prefix)
    todo = [(k, f) for k, f, n in zip(keys, files, sizes) if there.get(k) != n]
    service = services.of(endpoint)

    def put(item) -> None:
        key, path = item
        with open(path, "rb") as fh:
            service.put(handle, endpoint, key, fh)

    try:
        with ThreadPoolExecutor(max(1, threads)) as pool:
            list(pool.map(put, todo))
        manifest = {
            "schema": SCHEMA,
            "content_id": content_id,
            "objects": [{"key": k, "size": n} for k, n in zip(keys, sizes)],
        }
        service.put(handle, endpoint, f"{prefix}/{MANIFEST}", json.dumps(manifest).encode())
    except Exception as e:  # noqa: BLE001 - one line naming the endpoint; the manifest is not written
        raise service.why(e, endpoint) from None
    return Listing(prefix, tuple(keys), tuple(sizes)), len(todo)


def delete_prefix(handle, endpoint: Endpoint, prefix: str) -> int:
    """Delete every object under ``prefix``, which must lie under the tool's own prefix; returns how many."""
    own = endpoint.prefix.rstrip("/") + "/"
    parts = prefix.split("/")
    if not prefix.startswith(own) or prefix == own.rstrip("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{prefix!r} is not under the tool's prefix {endpoint.prefix!r}")
    keys = [k for k in sizes_under(handle, endpoint, prefix) if k.startswith(prefix + "/")]
    delete_keys(handle, endpoint, keys, f" under {prefix}")
    return len(keys)


def delete_keys(handle, endpoint: Endpoint, keys: list[str], where: str = "") -> None:
    """Delete ``keys``; a missing one is no error. ``where`` names them in the one line a failure raises."""
    service = services.of(endpoint)
    try:
        failed = service.delete(handle, endpoint, keys)
    except Exception as e:  # noqa: BLE001 - one line naming the endpoint
        raise service.why(e, endpoint) from None
    if failed:
        key, reason = failed[0]
        raise StoreError(
            f"{service.where(endpoint)}: {len(failed)} objects{where} were not deleted, e.g. {key}: {reason}"
        )


@dataclass
class Requests:
    """What a run's GETs did: counted per request, as the service's client saw them."""

    latencies_s: list[float] = field(default_factory=list)
    bytes: int = 0
    errors: int = 0
    in_flight: int = 0
    live_max: int = 0  # the most of this process's own GETs (``get``) open at once
    busy_s: float = 0.0  # request-seconds: the mean requests in flight is this over the run's time
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _intervals: list = field(default_factory=list, repr=False)  # (time, +1 start / -1 end) of ``add``'s
    # every request as (start, end on the monotonic clock, bytes, error or None): what a task process hands
    # its runner (``exported``), whose counters take them in with ``add``
    made: list = field(default_factory=list, repr=False)

    @property
    def count(self) -> int:
        """Requests made, answered or failed."""
        return len(self.latencies_s) + self.errors

    def percentile_ms(self, q: float) -> float | None:
        if not self.latencies_s:
            return None
        ordered = sorted(self.latencies_s)  # nearest rank: the smallest with q% of the samples at or below it
        return 1000 * ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]

    @property
    def max_in_flight(self) -> int:
        """The most requests open at once: this process's own, or those ``add`` took in, whose intervals are
        swept here, once, when asked (a run asks at its end; a sweep per batch would sort them all again in
        the training loop). A process's requests are either its own or folded, never both."""
        with self._lock:
            return max(self.live_max, _most_at_once(self._intervals))

    def add(self, requests) -> None:
        """Requests made elsewhere (a DataLoader worker's, ``jobs.frameworks.pytorch.loader.s3map``): (start,
        end on the machine's monotonic clock, bytes, error or None) each."""
        with self._lock:
            for start, end, nbytes, error in requests:
                took = max(0.0, end - start)
                self.busy_s += took
                if error is None:
                    self.latencies_s.append(took)
                    self.bytes += nbytes
                else:
                    self.errors += 1
                self._intervals += [(start, 1), (end, -1)]
                self.made.append((start, end, nbytes, error))

    def exported(self) -> list[tuple]:
        """Every request, its times on the epoch's clock (seconds since 1970): the same instants on every
        process of the machine and, to the nodes' clock agreement, on every node of a cluster; ``add``
        takes them in the runner."""
        offset = time.time() - time.monotonic()
        with self._lock:
            return [(start + offset, end + offset, nbytes, error) for start, end, nbytes, error in self.made]

    def summary(self, seconds: float) -> dict:
        """The run's request metrics (MLPerf Storage's and S3's terms)."""
        return {
            "requests": self.count,
            "request_errors": self.errors,
            "request_bytes": self.bytes,
            "get_latency_p50_ms": self.percentile_ms(50),
            "get_latency_p99_ms": self.percentile_ms(99),
            "requests_in_flight_mean": self.busy_s / seconds if seconds > 0 else None,
            "requests_in_flight_max": self.max_in_flight,
        }


def _most_at_once(events: list) -> int:
    """The most intervals open at once, of (time, +1 at a start / -1 at an end) events (an end before a
    start at the same time)."""
    most = now = 0
    for _, step in sorted(events):
        now += step
        most = max(most, now)
    return most


def chunks(handle, endpoint: Endpoint, key: str, chunk: int):
    """``key`` GET through its service (``Service.stream``) chunk by chunk, the request made at the first
    chunk; a failure, at the GET or midway, is one line naming the endpoint."""
    service = services.of(endpoint)
    try:
        yield from service.stream(handle, endpoint, key, chunk)
    except StoreError:
        raise
    except Exception as e:  # noqa: BLE001 - one line naming the endpoint
        raise service.why(e, endpoint) from None


def get(handle, endpoint: Endpoint, key: str, stats: Requests) -> bytes:
    """One GET of ``key`` through the service's client, counted in ``stats``; a failure is counted, then
    raised as one line."""
    service = services.of(endpoint)
    return counted(stats, endpoint, key, lambda k: service.get(handle, endpoint, k))


def counted(stats: Requests, endpoint: Endpoint, key: str, fetch: Callable[[str], bytes]) -> bytes:
    """``fetch(key)``, one GET by any object client, counted in ``stats`` (its latency, bytes and the
    requests in flight); a failure is counted, then raised as one line naming the endpoint."""
    with stats._lock:
        stats.in_flight += 1
        stats.live_max = max(stats.live_max, stats.in_flight)
    start = time.monotonic()
    try:
        body = fetch(key)
    except Exception as e:  # noqa: BLE001 - counted, then one line naming the endpoint
        failed = services.of(endpoint).why(e, endpoint)
        end = time.monotonic()
        with stats._lock:
            stats.errors += 1
            stats.in_flight -= 1
            stats.busy_s += end - start
            stats.made.append((start, end, 0, str(failed)))
        raise failed from None
    end = time.monotonic()
    with stats._lock:
        stats.latencies_s.append(end - start)
        stats.bytes += len(body)
        stats.in_flight -= 1
        stats.busy_s += end - start
        stats.made.append((start, end, len(body), None))
    return body
