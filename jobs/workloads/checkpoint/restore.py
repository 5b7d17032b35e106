"""Restore, verified cold (``checkpoint.restore=true``): after a checkpoint run, its last durable
checkpoint on each tier that holds one is evicted from the page cache, read back by its framework (the
``fresh`` of its checkpoint engine) into a new AlexNet and Adam, and checked: the restored
weights against the weights saved at that step (kept in memory at the save), and the files against
their manifest's checksums where it has them (the burst buffer's drained copies). What a restart would
see: the fast tier's copy while it is fresh, the slow tier's after it was reclaimed (MLPerf Storage's
rule: write, clear the cache, read).
"""

from __future__ import annotations

import time
from pathlib import Path

from jobs.data import loading
from jobs.metrics import MB
from jobs.workloads.checkpoint import store as ckpt_store


class Snapshot(dict):
    """The weights saved at one step (the run's last checkpoint), for the restore to compare with."""

    def __init__(self, step: int):
        super().__init__()
        self.step = step

    def wants(self, step: int) -> bool:
        return step == self.step


def last_durable(folder: Path, tag: str) -> Path | None:
    """The newest checkpoint of the run in ``folder`` whose manifest and files are complete."""
    done = ckpt_store.complete(folder, tag) if folder.exists() else []
    return done[-1] if done else None


def restore_cold(prefix: Path, tier: str, backend, shape: dict, expected: list | None, fresh) -> dict:
    """Evict ``prefix``'s files, restore them into a new model (timed), then verify; one entry of the
    run's ``restores``. ``backend``: the tier's kind of storage (``jobs.storage.backends.backend.Backend``),
    which makes the read cold and says what the counters prove of it. ``shape``: num_classes, side, width,
    seed of the model; ``fresh(shape)``: the framework's new model, as a function restoring a prefix into it
    (built before the timer)."""

    from jobs.observe import provenance

    files = ckpt_store.files_of(prefix)
    size = sum(f.stat().st_size for f in files)
    load = fresh(shape)
    resident = backend.evict(files)
    rb0, _ = loading.read_counters()
    t0 = time.perf_counter()
    restored = load(prefix)
    seconds = time.perf_counter() - t0
    rb1, _ = loading.read_counters()
    device = loading.delta(rb0, rb1)
    man = ckpt_store.read_manifest(prefix) or {}
    summed = any("sha256" in m for m in man.get("files", {}).values())
    fs_type = provenance.mount_of(str(prefix.parent)).fs_type
    return {
        **_entry(tier, prefix.name, man, size, seconds, device, resident),
        "cache_state": backend.judged("cold", fs_type, device, size, f"checkpoint.{tier}"),
        "weights_equal": _equal(expected, restored),
        "checksums": ("match" if ckpt_store.verify(prefix, man, checksums=True) else "MISMATCH")
        if summed
        else "none",
    }


def _entry(tier: str, name: str, man: dict, size: int, seconds: float, device, resident) -> dict:
    """The figures every restore records, wherever it read from."""
    return {
        "tier": tier,
        "prefix": name,
        "step": man.get("step"),
        "bytes": size,
        "restore_s": seconds,
        "restore_mb_s": size / seconds / MB,
        "bytes_read_device": device,
        "resident_bytes_before": resident,
    }


def _equal(expected: list | None, restored: list) -> bool | None:
    """The restored weights against those saved (None: nothing saved to compare with)."""
    import numpy as np

    if expected is None:
        return None
    return len(expected) == len(restored) and all(np.array_equal(a, b) for a, b in zip(expected, restored))


def after_run(folders: list[tuple], tag: str, shape: dict, snapshot: Snapshot | None, fresh) -> list[dict]:
    """Restore the last durable checkpoint of each (tier, folder, its kind's ``Backend``) that holds one,
    fast tier first."""
    out = []
    for tier, folder, backend in folders:
        prefix = last_durable(folder, tag)
        if prefix is None:
            continue
        step = (ckpt_store.read_manifest(prefix) or {}).get("step")
        expected = snapshot.get(step) if snapshot is not None else None
        out.append(restore_cold(prefix, tier, backend, shape, expected, fresh))
    return out


def from_bucket(bucket, store, into: Path, shape: dict, snapshot: Snapshot | None, fresh, backend):
    """Restore the bucket's last complete checkpoint as a restart from the store does: its objects
    fetched by GETs into a folder of the run's (``into``) and loaded, timed together, from a server whose
    files were evicted first; the files checked against the manifest's checksums. One entry of the
    run's ``restores``, or None when the bucket holds no complete checkpoint. ``backend``: the slow tier's
    kind of storage (``jobs.storage.backends.backend.Backend``), which says how a cold read is proven."""
    import tempfile

    from jobs.observe import provenance
    from jobs.storage.objectstore.tier import REMOTE

    names = bucket.complete()
    if not names:
        return None
    man = bucket.manifest(names[-1]) or {}
    size = sum(m["bytes"] for m in man.get("files", {}).values())
    expected = snapshot.get(man.get("step")) if snapshot is not None else None
    load = fresh(shape)
    resident = bucket.evict_server()
    before = store.counters()
    with tempfile.TemporaryDirectory(dir=into, prefix="restore-") as d:
        t0 = time.perf_counter()
        prefix, man = bucket.fetch(names[-1], Path(d))
        restored = load(prefix)
        seconds = time.perf_counter() - t0
        device = store.disk_bytes_since(before)
        checksums = "match" if ckpt_store.verify(prefix, man, checksums=True) else "MISMATCH"
    if store.server is not None:
        fs_type = provenance.mount_of(str(store.server.data_dir)).fs_type
        state = backend.judged("cold", fs_type, device, size, "checkpoint.slow")
    else:
        state = REMOTE
    return {
        **_entry("slow", names[-1], man, size, seconds, device, resident),
        "cache_state": state,
        "weights_equal": _equal(expected, restored),
        "checksums": checksums,
        "source": bucket.url,
    }


def metrics(restores: list[dict]) -> dict:
    """The run's restore figures: those of the durable tier (the slow one when both hold a copy)."""
    if not restores:
        return {}
    r = restores[-1]
    fast = [x for x in restores[:-1] if x["tier"] == "fast"]
    return {
        "restore_s": r["restore_s"],
        "restore_mb_s": r["restore_mb_s"],
        "restore_device_read_ratio": r["bytes_read_device"] / r["bytes"]
        if r["bytes_read_device"] is not None and r["bytes"]
        else None,
        "restore_fast_s": fast[0]["restore_s"] if fast else None,
    }
