"""One replay run on an object store (``storage=s3``, ``storage=azure``): the trace's reads and writes as
requests of the store's service.

The runner has put the made files into the store as the cell's dataset, one object each. A read becomes a
ranged GET of its file's object at the recorded offset and size; a write becomes a PUT of an object that
holds that write's bytes (an object is written whole: the request count and sizes are the trace's), under
the run's own prefix in the tool's, deleted after the run. Every request is counted as the store's other
readers count theirs (latency, bytes, requests in flight). Opens, closes, syncs, seeks, metadata calls
and reads that found a file's end (a store has no such request) are counted as skipped. The threads and the
modes are the file replay's (``issue``).
"""

from __future__ import annotations

import threading
import time

from jobs.storage.objectstore import objects, services
from jobs.workloads.replay.issue import READ, WRITE, Plan, Tally, joined, summed


def run(p: Plan, store, keys: list[str | None], out_prefix: str, recorded: bool) -> tuple[Tally, float, int]:
    """Issue the plan's reads and writes as requests (``keys``: each file index's object, None for a file
    the run only writes); (what they did, seconds, calls skipped)."""
    tallies = [Tally() for _ in p.threads]
    skipped = [0] * len(p.threads)
    stop = threading.Event()
    t0 = time.perf_counter()
    workers = [
        threading.Thread(
            target=_thread,
            args=(p, calls, store, keys, out_prefix, recorded, stop, t0, tallies[k], skipped, k),
        )
        for k, calls in enumerate(p.threads)
    ]
    for w in workers:
        w.start()
    joined(workers, stop)
    seconds = time.perf_counter() - t0
    return summed(tallies), seconds, sum(skipped)


def _thread(p: Plan, calls, store, keys, out_prefix, recorded, stop, t0, tally: Tally, skipped, k) -> None:
    ep, handle, stats = store.endpoint, store.client, store.requests
    service = services.of(ep)
    payload = b""
    try:
        for code, f, offset, size, start in calls:
            if stop.is_set():
                return
            if recorded:
                wait = t0 + start - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            if code == READ and size > 0 and keys[f] is not None:
                first = max(offset, 0)
                body = objects.counted(
                    stats, ep, keys[f], lambda key, a=first, n=size: service.get_range(handle, ep, key, a, n)
                )
                tally.reads += 1
                tally.bytes_read += len(body)
            elif code == WRITE and size > 0:
                if len(payload) < size:
                    payload = bytes(size)
                key = f"{out_prefix}/{f:06d}.{max(offset, 0)}.{tally.writes}"
                body = memoryview(payload)[:size]
                objects.counted(stats, ep, key, lambda key, b=body: _put(service, handle, ep, key, b))
                tally.writes += 1
                tally.bytes_written += size
            else:
                skipped[k] += 1
                continue
            tally.calls += 1
    except Exception as e:  # noqa: BLE001 - the store's one line (objects.counted names the endpoint)
        tally.errors.append(f"{e} (a replayed {'read' if code == READ else 'write'} of {p.name(f)})")
        stop.set()


def _put(service, handle, endpoint, key: str, body) -> bytes:
    service.put(handle, endpoint, key, bytes(body))
    return b""
