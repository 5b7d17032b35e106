"""Section III-C: the AlexNet mini-app with a checkpoint every ``every`` steps, flushed before
training resumes, written straight to a tier or through a burst buffer (fast tier, drained in the
background to the slow tier), synchronously or with TensorFlow's asynchronous checkpoint.

What is framework-specific (the model, its training step and input, how one checkpoint is written) is an
``Engine`` that each framework's checkpoint module gives (``Framework.engines["checkpoint"]``: its
``engine(cfg)`` and ``fresh(shape)``), with a ``Saver`` of its own; the targets, flushes, manifests, drain,
retention and clean-up here are the same for every framework.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jobs import interrupts, owned
from jobs.data import loading
from jobs.data.datasets import Dataset
from jobs.storage import cache
from jobs.workloads.alexnet.settings import TrainSettings
from jobs.workloads.checkpoint import recovery as ckpt_recovery
from jobs.workloads.checkpoint import store as ckpt_store
from jobs.workloads.checkpoint.target import choose_target

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckpointSettings:
    train: TrainSettings
    every: int  # steps between checkpoints
    target: str  # fast | slow | burst_buffer
    fast_root: Path | None  # the fast tier (its storage root); checkpoints go under iocampaign/checkpoints
    slow_root: Path  # the slow tier (its storage root)
    flush: str  # fsync | syncfs
    mode: str  # sync | async
    max_to_keep: int
    tag: str  # this run's name: its folder and file prefix
    keep: bool = False  # checkpoint.keep: the run's checkpoints stay after it (else removed once recorded)
    # the slow tier as a bucket (storage@checkpoint.slow=s3): a ``bucket.Bucket`` the burst buffer drains to;
    # None: the run's folder under slow_root
    bucket: Any = None

    def slow(self):
        """Where the run's checkpoints go on the slow tier: its bucket, or its folder under slow_root."""
        if self.bucket is not None:
            return self.bucket
        return ckpt_store.Folder(ckpt_dir(self.slow_root) / self.tag, self.tag)

    def facts(self, **more) -> dict:
        """What recovery must know of the run should it be killed (``recovery.RUN_FACTS``)."""
        where = {"bucket": self.bucket.url} if self.bucket is not None else {}
        return {"max_to_keep": self.max_to_keep, "keep": self.keep, **where, **more}


class CheckpointError(RuntimeError):
    """The run's checkpoints cannot go where they were asked to."""


SUBDIR = "checkpoints"  # in the tool's folder on the tier (jobs.owned)


def ckpt_dir(tier_root: Path) -> Path:
    """Where a tier holds checkpoints: one folder per run below this, made and checked so that no other
    user can steer it (jobs.owned)."""
    return owned.under_tool_folder(tier_root, SUBDIR, setting="checkpoint")


class Saver:
    """Saves one run's checkpoints into ``folder``: sync (write, flush, manifest) or, where the framework
    has one, asynchronous (the write finished and flushed in a background thread), then hands them to the
    burst buffer's drain or retention. A framework's saver writes one checkpoint (``_write``), copies the
    values a restore must give back (``_weights``) and, for ``checkpoint.mode=async``, starts a write and
    waits for it (``_write_async``, ``_settle``)."""

    def __init__(
        self, s: CheckpointSettings, model, opt, folder: Path, target: str, drain, snapshots: dict | None
    ):
        self.s, self.model, self.opt, self.folder, self.target = s, model, opt, folder, target
        self.drain, self.snapshots = drain, snapshots
        self.pending: list[threading.Thread] = []
        self.checkpoints: list[dict] = []
        self._open()

    def _open(self) -> None:
        """Set up what the saves of this run share (called once, at the start)."""

    def _write(self, step: int) -> Path:
        """Write the checkpoint of ``step`` synchronously; its prefix (``store.files_of`` finds its files)."""
        raise NotImplementedError

    def _weights(self) -> list:
        """The values a restore must give back, copied (``restore.Snapshot``)."""
        raise NotImplementedError

    def _write_async(self, step: int) -> tuple[Any, Path]:
        """Start the checkpoint of ``step`` in the background: (a handle for ``_settle``, its prefix)."""
        raise CheckpointError(f"checkpoint.mode={self.s.mode}: this framework's checkpoints are synchronous")

    def _settle(self, handle) -> None:
        """Wait until the background write ``handle`` (``_write_async``'s) has reached its files."""
        raise NotImplementedError

    def _durable(self, prefix: Path, step: int) -> None:
        if self.drain is not None:
            # the step a restore will read (restore.Snapshot.step) keeps its fast copy: a restart while it
            # is fresh
            self.drain.put(prefix, keep_fast=step == getattr(self.snapshots, "step", None))
        else:
            ckpt_store.retain(self.folder, self.s.tag, self.s.max_to_keep)

    def _finish_async(self, obj, prefix: Path, entry: dict) -> None:
        t0 = time.perf_counter()
        self._settle(obj)  # the background write has reached the files
        files = ckpt_store.files_of(prefix)
        ckpt_store.flush(files, self.s.flush)
        ckpt_store.write_manifest(prefix, entry["step"])
        entry.update(
            flush_s=time.perf_counter() - t0,
            bytes=sum(f.stat().st_size for f in files),
            durable_at=time.time(),
        )
        cache.evict(files)  # as after a sync save: the next one starts from the same memory state
        self._durable(prefix, entry["step"])

    def save(self, step: int) -> None:
        if self.snapshots is not None and getattr(self.snapshots, "wants", lambda _: True)(step):
            self.snapshots[step] = self._weights()
        entry = {"step": step, "tier": "fast" if self.target in ("fast", "burst_buffer") else "slow"}
        t0 = time.perf_counter()
        self.join()  # an async save waits for the one before it
        if self.s.mode == "async":
            obj, prefix = self._write_async(step)
            entry["stall_s"] = time.perf_counter() - t0
            th = threading.Thread(target=self._finish_async, args=(obj, prefix, entry))
            th.start()
            self.pending.append(th)
        else:
            prefix = self._write(step)
            t1 = time.perf_counter()
            files = ckpt_store.files_of(prefix)
            ckpt_store.flush(files, self.s.flush)
            ckpt_store.write_manifest(prefix, step)
            t2 = time.perf_counter()
            entry.update(
                save_s=t1 - t0,
                flush_s=t2 - t1,
                stall_s=t2 - t0,
                bytes=sum(f.stat().st_size for f in files),
                durable_at=time.time(),
            )
            # Outside the timer, on every target: drop the durable checkpoint from the page cache, so each
            # save starts from the same memory state. Without this, direct targets keep every checkpoint
            # resident while the burst buffer's drain frees its copies, and the next buffered save ran
            # 3-7x faster for that reason alone (issue 12).
            cache.evict(files)
            self._durable(prefix, step)
        self.checkpoints.append(entry)

    def join(self, timeout: float | None = None) -> None:
        for p in self.pending:
            p.join(timeout)
        self.pending.clear()


def _writers(
    s: CheckpointSettings,
    model,
    opt,
    target: str,
    folder: Path,
    slow,
    snapshots: dict | None,
    saver: type,
):
    """(locks held on the run's folders, the burst buffer's drain or None, the saver) of a run with
    checkpoints (``slow``: ``s.slow()``)."""
    # the run's folders are made here, and must not exist (the tag is unique per run): clean-up after a
    # failure then removes only what this run wrote
    locks = [ckpt_recovery.RunLock(folder, new=True)]
    drain = None
    if target == "burst_buffer":
        (folder / ckpt_store.BURST_MARK).touch()
        if s.bucket is None:
            locks.append(ckpt_recovery.RunLock(slow.path, new=True))
        else:
            s.bucket.write_facts(**s.facts())
        drain = ckpt_store.Drain(slow, s.max_to_keep, s.flush)
    for lk in locks:  # what recovery needs to know should this run be killed
        ckpt_recovery.write_run_facts(lk.folder, **s.facts())
    return locks, drain, saver(s, model, opt, folder, target, drain, snapshots)


@dataclass(frozen=True)
class Engine:
    """What a checkpoint run needs from its framework."""

    # (dataset, TrainSettings) -> (device, model, optimizer, step(x, y) -> loss, iterator of
    # (images, indices, nbytes, labels))
    trainer: Callable
    saver: type  # the Saver that writes one checkpoint of the model and optimizer
    parameters: Callable  # model -> its parameter count
    end: Callable = lambda it: None  # the iterator's read-ahead stopped (its readers joined)
    close: Callable = lambda: None  # what the run's input opened, closed once the run is done (HDF5 files)
    # (iterator, dataset, TrainSettings, the training loop's figures) -> the images the run dropped as
    # unreadable; ReadFailed when a read failed (its storage went away), not an image's content
    dropped: Callable = lambda it, ds, t, run: 0


def run_once(
    ds: Dataset,
    s: CheckpointSettings,
    engine: Engine,
    with_checkpoints: bool = True,
    snapshots: dict | None = None,
    mark=lambda name: None,
    finish: bool = True,
) -> dict:
    """Train ``s.train.steps`` steps; checkpoint every ``s.every`` unless ``with_checkpoints`` is false
    (the same run's baseline). Returns the run's metrics and one entry per checkpoint. ``snapshots``,
    when given, receives every saved step's model weights (for tests that restore and compare);
    ``mark(name)`` is called with "start" and "end" around the training loop (the usage window).
    ``finish=False``: the caller marks the run's folders finished (``mark_finished``) or removes them.
    ``engine``: the framework's model, input and saver."""
    device, model, opt, step_fn, it = engine.trainer(ds, s.train)
    steps = s.train.steps or len(ds.files) // s.train.batch_size
    try:
        target, fallback = choose_target(s, model, steps, with_checkpoints)
        if with_checkpoints and target == "slow" and s.bucket is not None:
            raise CheckpointError(
                f"checkpoints cannot go straight to the bucket {s.bucket.url} (a framework writes files), "
                f"only through the burst buffer, and its fast tier is unusable: {fallback}"
            )
        slow = s.slow()
        fast_dir = ckpt_dir(s.fast_root) / s.tag if s.fast_root is not None else None
        folder = slow.path if target == "slow" else fast_dir
        locks, drain, saver = (
            _writers(s, model, opt, target, folder, slow, snapshots, engine.saver)
            if with_checkpoints
            else ([], None, None)
        )
    except BaseException:
        engine.end(it)  # a DataLoader's workers started with the iterator: none outlives a failed set-up
        raise
    rb0, _ = loading.read_counters()
    mark("start")
    t_start = time.perf_counter()
    try:
        run = _train(it, step_fn, steps, saver, s.every)
        if saver is not None:
            saver.join()
        t_train_end, wall_train_end = time.perf_counter(), time.time()
        engine.end(it)
        mark("end")  # after the join: a worker's CPU time is in RUSAGE_CHILDREN only once it is waited for
        rb1, _ = loading.read_counters()  # before finish() reaps the drain: a reaped child's reads join ours
        # a read that failed fails the run here, before its checkpoints are drained or kept (``_discard``)
        dropped = engine.dropped(it, ds, s.train, run)
        drained = drain.finish() if drain is not None else []
        t_drained = time.perf_counter()
    except BaseException:
        engine.end(it)
        _discard(drain, saver, locks, s.bucket)
        raise
    finally:
        for lk in locks:
            lk.release()
    # the run ended: recovery never removes what it left (checkpoint.keep, or a caller's)
    for lk in locks if finish else []:
        ckpt_recovery.write_run_facts(lk.folder, **s.facts(finished=True))
    if finish and with_checkpoints and s.bucket is not None:
        s.bucket.write_facts(**s.facts(finished=True))
    engine.close()
    if target == "burst_buffer" and not ckpt_store.prefixes(folder, s.tag):
        shutil.rmtree(folder, ignore_errors=True)  # drained: the fast tier is left clean
    checkpoints = saver.checkpoints if saver is not None else []
    return {
        **_timings(
            checkpoints,
            drained,
            run["stall"],
            t_train_end - t_start,
            (t_drained - t_train_end) if drain is not None else 0.0,
            run["first_step_s"],
        ),
        "steps": run["steps"],
        "train_ended_at": wall_train_end,
        "checkpoints": checkpoints,
        "durable": _durable(slow, fast_dir, s.tag),
        "target": s.target,
        "effective_target": target if with_checkpoints else None,
        "fallback": fallback,
        "mode": s.mode,
        "flush": s.flush,
        "device": device,
        "parameters": engine.parameters(model),
        "final_loss": run["loss"],
        "checkpoint_dir": str(folder) if with_checkpoints else None,
        "images": run["images"],
        "images_dropped": dropped,
        "bytes_consumed": run["consumed"],
        # the drain's reads are another process's; this process's device reads are the images'
        "bytes_read_device": loading.delta(rb0, rb1),
    }


def _discard(drain, saver, locks: list, bucket=None) -> None:
    """A failed run (a tier that filled up, an interrupt) leaves none of its checkpoints behind: the
    drain stops, and the folders this run made (``RunLock(new=True)``) go, and its objects in the bucket
    (``bucket``), nothing else."""
    if drain is not None:
        drain.abort()
    if saver is not None:
        saver.join(60)
        for lk in locks:
            shutil.rmtree(lk.folder, ignore_errors=True)
        if bucket is not None:
            _remove_objects(bucket)


def _remove_objects(bucket) -> int:
    """Remove the run's objects from its bucket; a store that no longer answers (killed, the reason the
    run failed) is logged, not raised over the run's own error. Returns the bytes removed."""
    from jobs.storage.objectstore.client import StoreError

    try:
        return bucket.remove_all()
    except StoreError as e:
        log.warning("the run's checkpoints in %s could not be removed: %s", bucket.url, e)
        return 0


def _train(it, step_fn, steps: int, saver, every: int) -> dict:
    """The timed training loop: ``steps`` steps (fewer when the data runs out), a checkpoint every
    ``every`` through ``saver`` (None: no checkpoints). The first step, graph tracing included, is
    timed apart."""
    run = {"stall": 0.0, "loss": float("nan"), "consumed": 0, "images": 0, "steps": 0, "first_step_s": 0.0}
    run |= {"seen": [], "exhausted": False}  # the images delivered, and whether the data ran out
    t0 = time.perf_counter()
    with interrupts.deferred():
        for k in range(1, steps + 1):
            interrupts.check()  # Ctrl-C and SIGTERM end the run here, between steps
            try:
                x, idx, nbytes, y = interrupts.waiting(next, it)
            except StopIteration:
                run["exhausted"] = True
                break
            if x is not None:  # None: every image of the batch was dropped as unreadable (DataLoader)
                # reading the loss back waits for the step
                run["loss"] = float(interrupts.waiting(step_fn, x, y))
            run["consumed"] += int(np.asarray(nbytes).sum())  # a tf.Tensor or a DataLoader's numpy array
            run["images"] += int(nbytes.shape[0])
            run["seen"].extend(int(i) for i in np.asarray(idx))
            run["steps"] = k
            if k == 1:
                run["first_step_s"] = time.perf_counter() - t0
            if saver is not None and k % every == 0:
                a = time.perf_counter()
                saver.save(k)
                run["stall"] += time.perf_counter() - a
    return run


def _run_folders(s: CheckpointSettings) -> list[Path]:
    """The run's own folders on both tiers: named by its tag, real folders (not links), holding the facts
    (``recovery.RUN_FACTS``) it writes into a folder it made. Nothing else is ever marked or removed."""
    folders = [ckpt_dir(root) / s.tag for root in _roots(s)]
    return [f for f in folders if f.is_dir() and not f.is_symlink() and ckpt_recovery.read_run_facts(f)]


def _roots(s: CheckpointSettings) -> list[Path]:
    """The tiers' roots under which the run has folders (a bucket is no folder)."""
    return [root for root in (None if s.bucket else s.slow_root, s.fast_root) if root is not None]


def mark_finished(s: CheckpointSettings) -> None:
    """The run is done with its folders (``run_once(finish=False)``, then a restore): recovery leaves them."""
    for folder in _run_folders(s):
        ckpt_recovery.write_run_facts(folder, **s.facts(finished=True))
    if s.bucket is not None:
        s.bucket.write_facts(**s.facts(finished=True))


def remove_run(s: CheckpointSettings) -> int:
    """Remove the run's checkpoints from both tiers (after the record has what was durable, or when the run
    failed after training); returns the bytes freed. Only the run's own folders (``_run_folders``) go,
    and its own objects in a bucket."""
    freed = _bytes_in_folders(s)
    for folder in _run_folders(s):
        shutil.rmtree(folder)
    return freed + (_remove_objects(s.bucket) if s.bucket is not None else 0)


def bytes_of_run(s: CheckpointSettings) -> int:
    """Bytes of the run's checkpoint files on both tiers (its objects, for a bucket)."""
    return _bytes_in_folders(s) + (s.bucket.bytes() if s.bucket is not None else 0)


def _bytes_in_folders(s: CheckpointSettings) -> int:
    return sum(
        f.stat().st_size
        for root in _roots(s)
        for f in (ckpt_dir(root) / s.tag).rglob("*")
        if f.is_file() and not f.is_symlink()
    )


def _timings(
    checkpoints: list[dict],
    drained: list[dict],
    stall: float,
    runtime: float,
    drain_after: float,
    first_step: float,
) -> dict:
    """The run's time figures; each checkpoint gains its drain's copy time and delay."""
    for entry in checkpoints:
        for d in drained:
            if d["step"] == entry["step"]:
                entry["drained_after_s"] = d["finished_at"] - entry["durable_at"]
                entry["copy_s"] = d["copy_s"]
    stalls = sorted(c["stall_s"] for c in checkpoints)
    return {
        "runtime_s": runtime,
        "first_step_s": first_step,
        "steady_runtime_s": runtime - first_step,
        "checkpoint_stall_s": stall,
        "median_stall_s": stalls[len(stalls) // 2] if stalls else None,
        "drain_after_end_s": drain_after,
        "drain_finished_at": max((d["finished_at"] for d in drained), default=None),
    }


def _durable(slow, fast_dir: Path | None, tag: str) -> dict:
    """Which complete checkpoints of the run each tier holds (``slow``: its ``Folder`` or bucket)."""
    return {
        "slow": slow.complete(),
        "fast": [p.name for p in ckpt_store.complete(fast_dir, tag)]
        if fast_dir is not None and fast_dir.exists()
        else [],
    }
