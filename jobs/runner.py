"""The generic run loop of a cell, for any registered workload, outside Hydra.

Under the locks of the tiers and devices the cell touches: build its emulated tiers, list or
generate its dataset, then run warm-ups and repeats, each from the requested cache state (evicted
and verified, or warmed), classify what each run actually had, and return the runs with the dataset
summary and provenance. ``campaign.cell`` wraps this into the cell's record; benchmarks call it
directly with a resolved config.
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
from dataclasses import asdict
from pathlib import Path

from jobs import interrupts, records, workloads
from jobs.configview import View
from jobs.execution import pernode
from jobs.execution.placement import Placement

log = logging.getLogger(__name__)


def dataset_summary(ds, prov: dict | None = None) -> dict:
    return {
        **({"stage": prov["stage"]} if prov and prov.get("stage") else {}),
        "name": ds.name,
        "source": ds.source,
        "location": ds.location,
        "files": len(ds.files),
        "classes": ds.num_classes,
        "total_bytes": ds.total_bytes,
        "median_file_bytes": statistics.median(ds.sizes) if ds.sizes else 0,
        "skipped_not_regular": len(ds.skipped),
        "skipped_files": list(ds.skipped[:50]),
        "format": ds.format,
        "containers": len(ds.containers),
        "stored_bytes": ds.stored_bytes,
        "stored_in": os.path.dirname(ds.storage_files[0]) if ds.storage_files else ds.location,
    }


def measure(config: dict, job_dir: Path, first_run: int = 1) -> tuple[list[dict], dict, dict]:
    """Every run of the cell whose resolved config is ``config`` (warm-ups first) with its cache
    evidence; plus dataset summary and provenance. ``first_run`` numbers the first measured run (the
    extra traced run of ``trace.runs=extra`` is run ``repeats + 1``). Everything that writes on a tier
    (its set-up, the dataset's generation, the runs, the tear-down) happens under the locks of the
    tiers and devices the cell touches."""
    from jobs.data import datasets, formats
    from jobs.execution import traced
    from jobs.observe import provenance
    from jobs.storage import cache, locks

    if (config.get("trace") or {}).get("posix") and not traced.inside():  # in a child started with the tracer
        # or untraced here, then one more run in a child
        extra = config["trace"].get("runs", "all") == "extra"
        return traced.with_extra_run(config, job_dir, measure) if extra else traced.measure(config, job_dir)
    cfg = View(config)
    w = workloads.get(cfg.workload.kind)
    if (
        w.in_tensorflow
    ):  # before the locks: the import holds no device; its start-up lines go to the cell's folder
        from jobs.execution import tfstart

        tfstart.import_quietly(job_dir / tfstart.LOG, keras=w.uses_keras)
    tiers_of = w.tiers(cfg) + ([cfg.stage] if cfg.get("stage") is not None else [])
    root = str(cfg.storage.root)
    lock_dir = str(cfg.platform.lock_dir)
    timeout = float(cfg.platform.lock_timeout_min) * 60
    built = {
        locks.tier_lock_path(
            lock_dir, st.name
        ): f"{'modelled' if st.get('model') else 'emulated'} tier {st.name}"
        for st in tiers_of
        if st.get("emulate") is not None or st.get("model") is not None
    }
    with locks.all_of(built, timeout) as tier_wait, _tier(cfg, tiers_of) as (tier, all_tiers, modeled):
        if not isinstance(
            config.get("dataset"), dict
        ):  # a workload that reads no dataset (needs_dataset=False)
            ds = datasets.Dataset("", "none", root, (), (), (), 0)
            written = False
        else:  # a synthetic set is generated, a converted one written, on storage.root
            written = (
                str(cfg.dataset.source) == "synthetic" or str(cfg.dataset.get("format") or "files") != "files"
            )
            ds = None if written else datasets.resolve(cfg.dataset, root, int(cfg.seed))  # lists only
        measured = [root if written or not ds.files else os.path.dirname(ds.files[0])]
        measured += [str(st.root) for st in tiers_of[1:] if os.path.isdir(str(st.root))]
        with locks.all_of(locks.devices(lock_dir, measured), timeout) as device_wait:
            if ds is None:
                ds = datasets.resolve(cfg.dataset, root, int(cfg.seed))  # generates under the lock
            if isinstance(config.get("dataset"), dict):
                ds = formats.ensure(
                    ds,
                    str(cfg.dataset.get("format") or "files"),
                    float(cfg.dataset.get("shard_mb") or 128.0),
                    datasets.cache_dir(root, formats.CONVERTED),
                )
            data_dir = os.path.dirname(ds.storage_files[0]) if ds.storage_files else root
            prov = provenance.collect(root, data_dir, w.packages)
            prov["device_lock_wait_s"] = tier_wait + device_wait
            if modeled:
                prov["modeled_tiers"] = [asdict(t) for t in modeled]
            if not all_tiers:
                return (
                    _staged_runs(w, cfg, config, job_dir, ds, data_dir, prov, first_run),
                    dataset_summary(ds, prov),
                    prov,
                )
            from jobs.storage import tiers

            if tier is not None:
                prov["emulated_tier"] = asdict(tier)
            prov["emulated_tiers"] = [asdict(t) for t in all_tiers]
            cache.evict(ds.storage_files)  # flush the freshly written set before the throttle applies
            cg = tiers.join_all(all_tiers)
            try:
                runs = _staged_runs(w, cfg, config, job_dir, ds, data_dir, prov, first_run)
            finally:
                tiers.leave_all(cg)
    return runs, dataset_summary(ds, prov), prov


def _staged_runs(
    w: workloads.Workload, cfg, config: dict, job_dir: Path, ds, data_dir: str, prov: dict, first_run: int
):
    """The runs, reading a copy staged on ``cfg.stage`` first when one is asked for (the copy's time
    goes into provenance, not into the runs; the copy is removed when the runs end)."""
    stage = cfg.get("stage")
    if stage is None:
        return _runs(w, cfg, config, job_dir, ds, data_dir, prov, str(cfg.storage.kind), first_run)
    from jobs.data import staging
    from jobs.observe import provenance

    staged, facts = staging.stage_in(ds, str(stage.root))
    log.info(
        "staged %d files (%.0f MB) from %s to %s (storage@stage=%s) in %.2f s (%.0f MB/s)",
        facts["stage_files"],
        facts["stage_bytes"] / 1e6,
        data_dir,
        facts["staged_to"],
        stage.name,
        facts["stage_s"],
        facts["stage_mb_s"] or 0,
    )
    prov["stage"] = {"storage": str(stage.name), "kind": str(stage.kind), **facts}
    prov["source_mount"] = prov.get("data_mount")
    prov["data_mount"] = asdict(provenance.mount_of(facts["staged_to"]))
    try:
        return _runs(w, cfg, config, job_dir, staged, facts["staged_to"], prov, str(stage.kind), first_run)
    finally:
        staging.remove(facts["staged_to"])


@contextlib.contextmanager
def _tier(cfg, tiers_of: list):
    """The emulated and modelled tiers of the cell, set up for the cell and torn down after it; yields
    the storage's own emulated tier (or None), all emulated tiers, and the modelled ones."""
    from jobs.storage import tiers
    from jobs.storage.modeled import mount

    built: dict[str, tiers.Tier] = {}
    modeled: dict[str, mount.ModeledTier] = {}
    try:
        for st in tiers_of:
            if st.get("model") is not None and st.name not in modeled:
                modeled[st.name] = mount.setup(
                    st.name, str(st.model.backing_dir), str(st.root), mount.geometry_of(st.model)
                )
                log.info(
                    "modelled tier %s: %s served by a FUSE layer over %s (%s)",
                    st.name,
                    st.root,
                    modeled[st.name].backing,
                    st.description,
                )
            emulate = st.get("emulate")
            if emulate is None or st.name in built:
                continue
            built[st.name] = tiers.setup(
                st.name,
                str(emulate.image_dir),
                str(st.root),
                float(emulate.size_gb),
                float(emulate.read_mb_s),
                float(emulate.write_mb_s),
                int(emulate.get("read_iops") or 0),
                int(emulate.get("write_iops") or 0),
            )
            t = built[st.name]
            log.info(
                "emulated tier %s: %s on %s (%s), throttled by %s to %.0f MB/s read, %.0f MB/s write, %s read, "
                "%s write requests/s",
                t.name,
                t.mount,
                t.loop,
                t.dev,
                t.throttle,
                emulate.read_mb_s,
                emulate.write_mb_s,
                t.read_iops or "any",
                t.write_iops or "any",
            )
        yield built.get(cfg.storage.name), list(built.values()), list(modeled.values())
    finally:
        for t in built.values():
            tiers.teardown(t)
        for m in modeled.values():
            mount.teardown(m)


def _skipped_as_dropped(ds, result: dict) -> None:
    """Files the listing skipped (FIFOs, sockets, devices: reading them could block forever) count
    as dropped, like the unreadable files ignore_errors removes."""
    if ds.skipped:
        result["images_dropped"] += len(ds.skipped)
        result["dropped_files"] = [*ds.skipped, *result.get("dropped_files", [])][:50]


def _runs(
    w: workloads.Workload,
    cfg,
    config: dict,
    job_dir: Path,
    ds,
    data_dir: str,
    prov: dict,
    kind: str,
    first_run: int,
):
    """The cell's runs, warm-ups first, each from the requested cache state (the caller holds the locks)."""
    from jobs.observe import trace
    from jobs.storage import cache

    fs_type = (prov["data_mount"] or prov["storage_mount"])["fs_type"]
    requested = str(cfg.cache)
    if kind == "memory" and fs_type not in cache.MEMORY_FS:
        log.warning(
            "storage=%s describes a memory tier, but %s is on %s: runs are judged as %s",
            cfg.storage.name,
            data_dir,
            fs_type,
            fs_type,
        )
    if ds.skipped:
        log.warning(
            "%d listed files are not regular files and are skipped (counted as dropped), e.g. %s",
            len(ds.skipped),
            list(ds.skipped[:3]),
        )
    disk = trace.device_of(data_dir)
    where = Placement.of(cfg)
    if where.service_workers:  # the tf.data service of the cell: up for all its runs, ended with them
        from jobs.execution import service

        with service.running(where.service_workers, job_dir / service.SUBDIR, where.service_step()) as svc:
            return _loop(
                w, cfg, config, job_dir, ds, prov, kind, requested, fs_type, disk, svc, where, first_run
            )
    return _loop(w, cfg, config, job_dir, ds, prov, kind, requested, fs_type, disk, None, where, first_run)


def _execute(w: workloads.Workload, ctx, where: Placement, svc, cold: bool) -> tuple[dict, dict]:
    """One run, the way its cell runs: ``where.tasks`` processes each reading its shard (locally, or as
    a Slurm job step inside the cell's job), the consumer of the cell's tf.data service (watched), or
    in this process. Returns (result, the merged per-task figures; empty for one process)."""
    if where.tasks > 1:
        from jobs.execution import tasks

        folder = ctx.job_dir / tasks.SUBDIR / ctx.tag
        result = tasks.run(
            ctx.config,
            ctx.ds,
            where.tasks,
            ctx.seed,
            ctx.run,
            folder,
            where.timeout_s,
            cold=cold,
            step=where.task_step(folder),
            marks=ctx.marks,
            disk=ctx.disk,
            silence_s=where.silence_s,
        )
        return result, {k: result.pop(k) for k in tasks.MERGED_KEYS}
    if svc:
        from jobs.execution import service

        return service.watched(w.run_once, ctx, svc), {}
    # a signal inside TensorFlow's bindings would surface as another error: it waits for the run's check()
    with interrupts.deferred() if w.in_tensorflow else contextlib.nullcontext():
        return w.run_once(ctx), {}


def _loop(
    w: workloads.Workload,
    cfg,
    config: dict,
    job_dir: Path,
    ds,
    prov: dict,
    kind: str,
    requested: str,
    fs_type: str,
    disk: str | None,
    svc,
    where: Placement,
    first_run: int,
) -> list[dict]:
    from jobs.execution.traced import inside
    from jobs.observe import posix, usage
    from jobs.storage import cache
    from jobs.storage.modeled import liveness
    from jobs.storage.modeled import mount as modeled

    traced = inside()
    exclusive = {os.path.basename(t["loop"]) for t in prov.get("emulated_tiers", [])}
    exclusive |= {modeled.PREFIX + t["mount"] for t in prov.get("modeled_tiers", [])}
    runs: list[dict] = []
    for k in range(cfg.warmup + cfg.repeats):
        warmup = k < cfg.warmup
        run = k + first_run - cfg.warmup  # measured runs are 1..repeats; warm-ups are <= 0
        with liveness.watched(prov.get("modeled_tiers"), run):  # a run whose modelled tier died fails
            if requested == "cold":
                resident = cache.evict(
                    ds.storage_files, drop_caches=bool(cfg.drop_caches)
                ).resident_bytes_after
            else:
                cache.warm(ds.storage_files)
                resident, _ = cache.residency(ds.storage_files)
            started = records.now()
            seed = int(cfg.seed) + k
            ctx = workloads.RunContext(
                ds, cfg, config, seed, job_dir, run, disk, service=svc.address if svc else None
            )
            io0 = svc and svc.counters()
            with posix.window(job_dir, ctx.tag, disk) if traced else contextlib.nullcontext({}) as window:
                before = usage.snapshot(disk)
                result, multi = _execute(w, ctx, where, svc, cold=requested == "cold")
                after = usage.snapshot(disk)
        if multi:
            resident = multi["task_resident_bytes_before"]  # each task's shard, on its own node
        workloads.check_result(w, result)
        result.update(multi, **window)
        if svc:
            svc.add_counters(io0, result)
        timed = "start" in ctx.marks and "end" in ctx.marks  # the workload marked its timed interval
        # a multi-task run may keep threads x tasks per node cores busy on each of its nodes
        par = w.parallelism(cfg, result)
        used = usage.between(
            *((ctx.marks["start"], ctx.marks["end"]) if timed else (before, after)),
            par * where.per_node if par else None,
            where.tasks // where.per_node,
        )
        result.update(
            {k: v for k, v in used.items() if k != "wall_s"},
            run_wall_s=after.t - before.t,
            usage_over="timed interval" if timed else "whole run",
        )
        _skipped_as_dropped(ds, result)
        if disk in exclusive and before.disk and after.disk:
            # a tier the cell built and holds alone: its own counter is the data's (the process-wide one
            # would also count checkpoint files read on other tiers; a modelled drive has only its own)
            result["bytes_read_device"] = (after.disk[1] - before.disk[1]) * usage.SECTOR
        state = cache.classify(
            requested, kind, fs_type, result["bytes_read_device"], result["bytes_consumed"]
        )
        state = pernode.cache_state(result.get("per_node"), state, requested, kind, fs_type)
        runs.append(
            {
                "run": run,
                "warmup": warmup,
                "started_at": started,
                "shuffle_seed": seed,
                "cache_requested": requested,
                "cache_state": state,
                "resident_bytes_before": resident,
                **result,
            }
        )
        _log(w, warmup, k, cfg, result, state, first_run)
    if first_run == 1:  # the once-per-cell figures belong to the measured runs, not to an extra traced one
        _probe(w, ctx, requested, runs)
    return runs


def _probe(w: workloads.Workload, ctx, requested: str, runs: list[dict]) -> None:
    """The workload's once-per-cell measurements (``Workload.probe``), with the cache as the runs had it,
    added to every measured run."""
    from jobs.storage import cache

    if type(w).probe is workloads.Workload.probe or not runs:
        return
    if requested == "cold":
        cache.evict(ctx.ds.storage_files, drop_caches=bool(ctx.cfg.drop_caches))
    else:
        cache.warm(ctx.ds.storage_files)
    with interrupts.deferred() if w.in_tensorflow else contextlib.nullcontext():
        extra = w.probe(ctx)
    log.info("once per cell: %s", ", ".join(f"{k} {v:.3g}" for k, v in extra.items()) or "nothing")
    for run in runs:
        if not run["warmup"]:
            run.update(extra)


def _log(w: workloads.Workload, warmup: bool, k: int, cfg, result: dict, state: str, first_run: int) -> None:
    ratio = (
        f"{result['bytes_read_device'] / result['bytes_consumed']:.0%} of consumed from the device"
        if result["bytes_read_device"] is not None and result["bytes_consumed"]
        else "device bytes not counted"
    )
    # trace.runs=extra: run repeats+1
    what = "warm-up" if warmup else "run" if first_run == 1 else "extra traced run"
    log.info(
        "%s %d/%d: %s, %d images (%d dropped), cache %s (%s)",
        what,
        k + 1 if warmup else k + first_run - cfg.warmup,
        cfg.warmup if warmup else cfg.repeats + first_run - 1,
        w.describe(result),
        result["images"],
        result["images_dropped"],
        state,
        ratio,
    )
    if result["images_dropped"] and result.get("dropped_files"):
        log.warning(
            "%d files dropped by ignore_errors, e.g. %s",
            result["images_dropped"],
            result["dropped_files"][:3],
        )
