"""A cell's runs, warm-ups first, each from the requested cache state (the caller holds the locks):
one run executed the way its cell runs (in this process, as tasks, or as the consumer of a tf.data
service), observed, and assembled into its record (``jobs.runner.result``)."""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs import interrupts, records, workloads
from jobs.execution import memlimit, pernode
from jobs.execution.placement import Placement
from jobs.runner.result import RunParts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Session:
    """What every run of a cell shares, built once where the runs read (``jobs.runner``): the dataset as
    they read it and its folder, provenance, and the back-end of the tier they read (the storage's, or
    the stage's) with its open store. A step that moves where the runs read (a staged copy, an object
    store) makes a new one, with its parts added to the provenance; none is changed."""

    w: workloads.Workload
    cell: Any  # jobs.cell.Cell
    job_dir: Path
    first_run: int  # the number of the first measured run (trace.runs=extra: repeats + 1)
    ds: Any  # jobs.data.datasets.Dataset, where the runs read it
    data_dir: str
    prov: dict
    backend: Any  # jobs.storage.backends.Backend where the runs read: what a cold cache can mean there
    store: Any = None  # storage.kind=object: the open store (jobs.storage.objectstore.tier.Store)
    tier_key: str = "storage"  # where that tier sits in the config: storage, or stage once staged

    @property
    def cfg(self):
        return self.cell.config


@dataclass(frozen=True)
class Where:
    """Where the runs read and how their processes start."""

    fs_type: str  # the file system the data is read from
    disk: str | None  # its block device (None: not a block device)
    placement: Placement
    exclusive: frozenset  # devices of tiers the cell built and holds alone
    svc: Any = None  # the cell's tf.data service, when it has one


def run_all(s: Session) -> tuple[list[dict], dict]:
    """The cell's runs, warm-ups first (a run's record is built once it has ended), and what the memory
    limit of ``platform.memory_limit_gb`` adds to the provenance (nothing without one)."""
    from jobs.observe import trace
    from jobs.storage import cache
    from jobs.storage.modeled import mount as modeled

    fs_type = records.read_mount(s.prov)["fs_type"]
    if not s.backend.evicts and fs_type not in cache.MEMORY_FS:
        log.warning(
            "storage=%s is of kind %s, whose reads leave nothing to evict, but %s is on %s: runs are judged "
            "as %s",
            s.cfg.storage.name,
            s.cfg.storage.kind,
            s.data_dir,
            fs_type,
            fs_type,
        )
    if s.ds.skipped:
        log.warning(
            "%d listed files are not regular files and are skipped (counted as dropped), e.g. %s",
            len(s.ds.skipped),
            list(s.ds.skipped[:3]),
        )
    exclusive = {os.path.basename(t["loop"]) for t in s.prov.get("emulated_tiers", [])}
    exclusive |= {modeled.PREFIX + t["mount"] for t in s.prov.get("modeled_tiers", [])}
    remote = s.store is not None and s.store.server is None  # a user's S3 endpoint: its disks are not ours
    disk = None if remote else trace.device_of(s.data_dir)
    where = Where(fs_type, disk, Placement.of(s.cfg), frozenset(exclusive))
    with memlimit.limited(s.cfg.platform.memory_limit_gb) as memory:  # filled in as it ends
        runs = _served(s, where)
    return runs, memory


def _served(s: Session, where: Where) -> list[dict]:
    """The runs, with the cell's tf.data service up for all of them where it has one (ended with them)."""
    if where.placement.service_workers:
        from jobs.execution import service

        p = where.placement
        with service.running(p.service_workers, s.job_dir / service.SUBDIR, p.service_step()) as svc:
            return _loop(s, Where(where.fs_type, where.disk, p, where.exclusive, svc))
    return _loop(s, where)


def _loop(s: Session, where: Where) -> list[dict]:
    from jobs.storage import locks

    parts, states, ctx = [], [], None
    for k in range(s.cfg.warmup + s.cfg.repeats):
        part, ctx = _one(s, where, k)
        locks.check_held()  # a lock file removed during the run: the cell fails now, not at its end
        state = _cache_state(s, where, part)
        parts.append(part)
        states.append(state)
        _log(s, part, state, k)
    extra = _probe(s, ctx) if s.first_run == 1 and parts else {}  # once per cell: the measured runs'
    return [p.record(st, {} if p.warmup else extra) for p, st in zip(parts, states)]


def _one(s: Session, where: Where, k: int) -> tuple[RunParts, Any]:
    """Run ``k`` of the cell (warm-ups first), from the requested cache state, observed."""
    from jobs.data import read_errors
    from jobs.execution.traced import inside
    from jobs.observe import posix, quiet, usage
    from jobs.storage.modeled import liveness

    cfg, warmup = s.cfg, k < s.cfg.warmup
    run = k + s.first_run - cfg.warmup  # measured runs are 1..repeats; warm-ups are <= 0
    quiet_wait_s = quiet.wait(cfg.platform.wait_quiet, cfg.platform.wait_quiet_max_s)
    with liveness.watched(s.prov.get("modeled_tiers"), run):  # a run whose modelled tier died fails
        if cfg.cache == "cold":
            resident = s.backend.evict(s.ds.storage_files, cfg.drop_caches)
        else:
            resident = s.backend.warm(s.ds.storage_files)
        started, seed = records.now(), cfg.seed + k
        svc = where.svc
        ctx = workloads.RunContext(
            s.ds, s.cell, seed, s.job_dir, run, where.disk, service=svc.address if svc else None
        )
        io0 = svc and svc.counters()
        traced = posix.window(s.job_dir, ctx.tag, where.disk) if inside() else contextlib.nullcontext({})
        store, served = s.store, None
        with traced as window:
            if store is not None:
                store.begin_run()
                served = store.counters()
            before = usage.snapshot(where.disk)
            try:
                result, merged = _execute(s.w, ctx, where, cold=cfg.cache == "cold")
            except Exception as e:
                if store is not None:
                    store.end_run()  # the store's own error when it made the run fail (the server died)
                if isinstance(e, read_errors.ReadFailed):  # named for the tier the run read (or its stage)
                    tier = s.prov.get("stage", {}).get("storage") or cfg.storage.name
                    raise read_errors.named(e, tier, run) from e
                raise
            after = usage.snapshot(where.disk)
    workloads.check_result(s.w, result)
    figures = {**result, **merged, **window}
    if store is not None:
        store.end_run()
    if store is not None and s.w.store_figures(s.cfg):  # it read the dataset (a baseline counts its own)
        figures.update(store.run_figures(served, result.get("seconds") or after.t - before.t))
    if svc:  # the workers read the data: their bytes join the consumer's
        svc.add_counters(io0, figures)
    timed = "start" in ctx.marks and "end" in ctx.marks  # the workload marked its timed interval
    # a multi-task run may keep threads x tasks per node cores busy on each of its nodes
    par = s.w.parallelism(cfg, figures)
    p = where.placement
    used = usage.between(
        *((ctx.marks["start"], ctx.marks["end"]) if timed else (before, after)),
        par * p.per_node if par else None,
        p.tasks // p.per_node,
        figures.get("server_cpu_s") or 0.0,  # the embedded S3 server's CPU is the cell's, not another's
    )
    own = where.disk in where.exclusive and before.disk and after.disk
    part = RunParts(
        run=run,
        warmup=warmup,
        started_at=started,
        shuffle_seed=seed,
        cache_requested=cfg.cache,
        # a multi-task run: each task's shard, on its own node
        resident_bytes_before=merged["task_resident_bytes_before"] if merged else resident,
        figures=figures,
        usage={k: v for k, v in used.items() if k != "wall_s"},
        run_wall_s=after.t - before.t,
        quiet_wait_s=quiet_wait_s,
        usage_over="timed interval" if timed else "whole run",
        skipped=tuple(s.ds.skipped),
        # a tier the cell built and holds alone: its own counter is the data's (the process-wide one would
        # also count checkpoint files read on other tiers; a modelled drive has only its own)
        device_bytes=(after.disk[1] - before.disk[1]) * usage.SECTOR if own else None,
    )
    return part, ctx


def _cache_state(s: Session, where: Where, part: RunParts) -> str:
    """What the run's device counters prove of its cache (per node for a multi-node run)."""
    reading = part.reading()
    requested, fs = s.cfg.cache, where.fs_type
    device, consumed = reading["bytes_read_device"], reading["bytes_consumed"]
    state = s.backend.judged(requested, fs, device, consumed, s.tier_key)
    return pernode.cache_state(reading.get("per_node"), state, requested, s.backend, fs, s.tier_key)


def _execute(w: workloads.Workload, ctx, where: Where, cold: bool) -> tuple[dict, dict]:
    """One run, the way its cell runs: ``placement.tasks`` processes each reading its shard (locally, or
    as a Slurm job step inside the cell's job), the consumer of the cell's tf.data service (watched), or
    in this process. Returns (result, the merged per-task figures; empty for one process)."""
    p = where.placement
    if p.tasks > 1:
        from jobs.execution import tasks

        result = tasks.run(ctx, p, cold=cold)
        return result, {k: result.pop(k) for k in tasks.MERGED_KEYS}
    if where.svc:
        from jobs.execution import service

        return service.watched(w.run_once, ctx, where.svc), {}
    # a signal inside TensorFlow's bindings would surface as another error: it waits for the run's check()
    with interrupts.deferred() if w.in_tensorflow else contextlib.nullcontext():
        return w.run_once(ctx), {}


def _probe(s: Session, ctx) -> dict:
    """The workload's once-per-cell measurements (``Workload.probe``), with the cache as the runs had it,
    for every measured run."""
    if type(s.w).probe is workloads.Workload.probe:
        return {}
    if s.cfg.cache == "cold":
        s.backend.evict(s.ds.storage_files, s.cfg.drop_caches)
    else:
        s.backend.warm(s.ds.storage_files)
    with interrupts.deferred() if s.w.in_tensorflow else contextlib.nullcontext():
        extra = s.w.probe(ctx)
    log.info("once per cell: %s", ", ".join(f"{k} {v:.3g}" for k, v in extra.items()) or "nothing")
    return extra


def _log(s: Session, part: RunParts, state: str, k: int) -> None:
    result, cfg = part.reading(), s.cfg
    ratio = (
        f"{result['bytes_read_device'] / result['bytes_consumed']:.0%} of consumed from the device"
        if result["bytes_read_device"] is not None and result["bytes_consumed"]
        else "device bytes not counted"
    )
    # trace.runs=extra: run repeats+1
    what = "warm-up" if part.warmup else "run" if s.first_run == 1 else "extra traced run"
    images = f"{result['images']} images ({result['images_dropped']} dropped), " if s.w.reads_images else ""
    log.info(
        "%s %d/%d: %s, %scache %s (%s)",
        what,
        k + 1 if part.warmup else k + s.first_run - cfg.warmup,
        cfg.warmup if part.warmup else cfg.repeats + s.first_run - 1,
        s.w.describe(result),
        images,
        state,
        ratio,
    )
    if result["images_dropped"] and result.get("dropped_files"):
        log.warning(
            "%d files dropped by ignore_errors, e.g. %s",
            result["images_dropped"],
            result["dropped_files"][:3],
        )
