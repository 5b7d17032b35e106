"""Run one campaign cell: validate, prepare the cache, measure every run, write the record."""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
import time
import traceback
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from campaign import errors, outputs, validate
from campaign.plan import cell_id, resolved
from jobs import records

log = logging.getLogger(__name__)


def _dataset_summary(ds) -> dict:
    return {
        "name": ds.name,
        "source": ds.source,
        "location": ds.location,
        "files": len(ds.files),
        "classes": ds.num_classes,
        "total_bytes": ds.total_bytes,
        "median_file_bytes": statistics.median(ds.sizes) if ds.sizes else 0,
        "skipped_not_regular": len(ds.skipped),
        "skipped_files": list(ds.skipped[:50]),
    }


def _microbench_run(ds, cfg: DictConfig, config: dict, seed: int, job_dir: Path, run: int, disk) -> dict:
    from jobs import microbench

    settings = microbench.RunSettings(
        pipeline=config["workload"]["pipeline"],
        threads=validate.threads_value(cfg.threads),
        batch_size=int(cfg.batch_size),
        prefetch=int(cfg.prefetch),
        image_side=int(cfg.workload.image_side),
        batches=cfg.workload.batches,
        seed=seed,
        read_delay_ms=float(cfg.workload.read_delay_ms),
    )
    return microbench.run_once(ds, settings).as_dict()


def _alexnet_run(ds, cfg: DictConfig, config: dict, seed: int, job_dir: Path, run: int, disk) -> dict:
    from jobs import alexnet, trace

    settings = alexnet.TrainSettings(
        threads=validate.threads_value(cfg.threads),
        batch_size=int(cfg.batch_size),
        prefetch=int(cfg.prefetch),
        image_side=int(cfg.workload.image_side),
        width=float(cfg.workload.width),
        steps=cfg.workload.steps,
        seed=seed,
        device=config["workload"]["device"],
        read_delay_ms=float(cfg.workload.read_delay_ms),
    )
    tag = f"run{run}" if run > 0 else f"warmup{1 - run}"
    tracer = trace.Tracer(disk, float(cfg.workload.trace_interval_s)).start()
    try:
        result = alexnet.run_once(ds, settings, steps_csv=job_dir / f"steps_{tag}.csv").as_dict()
    finally:
        tracer.stop()
    tracer.mark(trace.FIRST, result.pop("t_first_iterator_call"))
    tracer.mark(trace.LAST, result.pop("t_last_iterator_call"))
    tracer.write(job_dir / f"trace_{tag}.csv")
    result["trace_file"] = f"trace_{tag}.csv"
    result["trace_device"] = disk or "all disks"
    result["steps_file"] = f"steps_{tag}.csv"
    return result


def _baseline_run(ds, cfg: DictConfig, config: dict, seed: int, job_dir: Path, run: int, disk) -> dict:
    from jobs import baseline

    settings = baseline.BaselineSettings(
        root=str(cfg.storage.root), file_gb=float(cfg.workload.file_gb),
        small_file_threads=tuple(int(t) for t in cfg.workload.small_file_threads),
    )
    return baseline.run_once(ds, settings, disk, tag=f"run{run}")


def _checkpoint_run(ds, cfg: DictConfig, config: dict, seed: int, job_dir: Path, run: int, disk) -> dict:
    """The same training twice: without checkpoints (the run's baseline), then with them, traced."""
    from jobs import alexnet, cache, checkpoint, ckpt_store, trace

    ck = cfg.checkpoint
    settings = checkpoint.CheckpointSettings(
        train=alexnet.TrainSettings(
            threads=validate.threads_value(cfg.threads), batch_size=int(cfg.batch_size), prefetch=int(cfg.prefetch),
            image_side=int(cfg.workload.image_side), width=float(cfg.workload.width), steps=cfg.workload.steps,
            seed=seed, device=config["workload"]["device"],
        ),
        every=int(ck.every),
        target=config["checkpoint"]["target"],
        fast_root=Path(str(ck.fast.root)),
        slow_root=Path(str(ck.slow.root)),
        flush=config["checkpoint"]["flush"],
        mode=config["checkpoint"]["mode"],
        max_to_keep=int(ck.max_to_keep),
        tag=f"ckpt_{cell_id(config)}_{'r' if run > 0 else 'w'}{abs(run)}_{os.getpid()}",
    )
    recovered = ckpt_store.recover_all(checkpoint.ckpt_dir(settings.fast_root), checkpoint.ckpt_dir(settings.slow_root),
                                       settings.flush)
    if recovered:
        log.warning("recovered checkpoints left by an earlier, interrupted run: %s", recovered)
    base = checkpoint.run_once(ds, settings, with_checkpoints=False)
    cache.evict(ds.files)
    slow_disk = trace.device_of(str(settings.slow_root)) if settings.slow_root.exists() else None
    tag = f"run{run}" if run > 0 else f"warmup{1 - run}"
    tracer = trace.Tracer(slow_disk, float(cfg.workload.trace_interval_s)).start()
    t0 = time.perf_counter()
    try:
        result = checkpoint.run_once(ds, settings)
    finally:
        tracer.stop()
    tracer.mark(trace.FIRST, t0)
    tracer.mark("end_of_training", t0 + result["runtime_s"])
    tracer.mark("drain_finished", t0 + result["runtime_s"] + result["drain_after_end_s"])
    tracer.write(job_dir / f"trace_{tag}.csv")
    result.update(baseline_runtime_s=base["runtime_s"], trace_file=f"trace_{tag}.csv",
                  trace_device=slow_disk or "all disks", recovered=recovered)
    return result


RUNNERS = {"microbench": _microbench_run, "alexnet": _alexnet_run, "baseline": _baseline_run,
           "checkpoint": _checkpoint_run}


def _log_run(warmup: bool, k: int, cfg: DictConfig, result: dict, state: str) -> None:
    ratio = (
        f"{result['bytes_read_device'] / result['bytes_consumed']:.0%} of consumed from the device"
        if result["bytes_read_device"] is not None and result["bytes_consumed"]
        else "device bytes not counted"
    )
    if "checkpoints" in result:
        if cfg.workload.steps and result["steps"] < cfg.workload.steps:
            log.warning("the data ran out after %d of workload.steps=%d steps (one epoch of %d images at batch %d)",
                        result["steps"], cfg.workload.steps, result["images"], cfg.batch_size)
        log.info("%s %d: %.2f s runtime (%.2f s without checkpoints), %d checkpoints to %s, median stall %s s, "
                 "drain after training %.2f s%s", "warm-up" if warmup else "run",
                 k + 1 if warmup else k + 1 - cfg.warmup, result["runtime_s"], result["baseline_runtime_s"],
                 len(result["checkpoints"]), result["effective_target"],
                 f"{result['median_stall_s']:.3f}" if result["median_stall_s"] is not None else "-",
                 result["drain_after_end_s"], f"; FALLBACK: {result['fallback']}" if result["fallback"] else "")
        return
    if "seq_read_mb_s" in result:
        small = ", ".join(f"{t}: {v:.0f}" for t, v in result["small_read_mb_s"].items())
        log.info("%s %d: %s read %.0f MB/s, write %.0f MB/s; small files by readers {%s} MB/s; cache %s",
                 "warm-up" if warmup else "run", k + 1 if warmup else k + 1 - cfg.warmup, result["tool"],
                 result["seq_read_mb_s"], result["seq_write_mb_s"], small, state)
        return
    what = (
        f"{result['runtime_s']:.2f} s runtime ({result['data_wait_s']:.2f} s waiting for data, "
        f"{result['compute_s']:.2f} s computing, first step {result['first_step_s']:.2f} s) on {result['device']}"
        if "runtime_s" in result
        else f"{result['images_per_s']:.0f} images/s, {result['mb_per_s']:.1f} MB/s"
    )
    log.info(
        "%s %d/%d: %s, %d images (%d dropped), cache %s (%s)",
        "warm-up" if warmup else "run",
        k + 1 if warmup else k + 1 - cfg.warmup,
        cfg.warmup if warmup else cfg.repeats,
        what,
        result["images"],
        result["images_dropped"],
        state,
        ratio,
    )
    if result["images_dropped"]:
        log.warning("%d files dropped by ignore_errors, e.g. %s", result["images_dropped"], result["dropped_files"][:3])


def measure(cfg: DictConfig, config: dict, job_dir: Path) -> tuple[list[dict], dict, dict]:
    """Every run of the cell (warm-ups first) with its cache evidence; plus dataset and provenance.

    Everything that writes on a tier (its set-up, the dataset's generation, the runs, the tear-down)
    happens under the locks of the tiers and devices the cell touches.
    """
    from campaign import locks
    from jobs import cache, datasets, provenance

    root = str(cfg.storage.root)
    lock_dir = str(cfg.platform.lock_dir)
    timeout = float(cfg.platform.lock_timeout_min) * 60
    emulated = {locks.tier_lock_path(lock_dir, st.name): f"emulated tier {st.name}"
                for st in _tiers_of(cfg) if st.get("emulate") is not None}
    with locks.all_of(emulated, timeout) as tier_wait, _tier(cfg) as (tier, all_tiers):
        synthetic = str(getattr(cfg.dataset.source, "value", cfg.dataset.source)) == "synthetic"
        ds = None if synthetic else datasets.resolve(cfg.dataset, root, int(cfg.seed))  # lists only
        measured = [root if synthetic else os.path.dirname(ds.files[0])]
        measured += [str(st.root) for st in _tiers_of(cfg)[1:] if os.path.isdir(str(st.root))]
        with locks.all_of(locks.devices(lock_dir, measured), timeout) as device_wait:
            if ds is None:
                ds = datasets.resolve(cfg.dataset, root, int(cfg.seed))  # generates under the lock
            data_dir = os.path.dirname(ds.files[0])
            prov = provenance.collect(root, data_dir)
            prov["device_lock_wait_s"] = tier_wait + device_wait
            if not all_tiers:
                return _measure_runs(cfg, config, job_dir, ds, data_dir, prov), _dataset_summary(ds), prov
            from dataclasses import asdict

            from jobs import tiers

            if tier is not None:
                prov["emulated_tier"] = asdict(tier)
            prov["emulated_tiers"] = [asdict(t) for t in all_tiers]
            cache.evict(ds.files)  # flush the freshly written set before the throttle applies
            cg = tiers.join_all(all_tiers)
            try:
                runs = _measure_runs(cfg, config, job_dir, ds, data_dir, prov)
            finally:
                tiers.leave_all(cg)
    return runs, _dataset_summary(ds), prov


def _tiers_of(cfg: DictConfig) -> list[DictConfig]:
    """Every storage tier the cell touches: its data, and for checkpoints the fast and slow tiers."""
    out = [cfg.storage]
    if str(getattr(cfg.workload.kind, "value", cfg.workload.kind)) == "checkpoint":
        out += [cfg.checkpoint.slow, cfg.checkpoint.fast]
    return out


@contextlib.contextmanager
def _tier(cfg: DictConfig):
    """The emulated tiers of the cell, set up for the cell and torn down after it; yields the
    storage's own tier (or None) and the list of all of them."""
    from jobs import tiers

    built: dict[str, tiers.Tier] = {}
    try:
        for st in _tiers_of(cfg):
            emulate = st.get("emulate")
            if emulate is None or st.name in built:
                continue
            built[st.name] = tiers.setup(st.name, str(emulate.image_dir), str(st.root), float(emulate.size_gb),
                                         float(emulate.read_mb_s), float(emulate.write_mb_s))
            t = built[st.name]
            log.info("emulated tier %s: %s on %s (%s), throttled to %.0f MB/s read, %.0f MB/s write", t.name,
                     t.mount, t.loop, t.dev, emulate.read_mb_s, emulate.write_mb_s)
        yield built.get(cfg.storage.name), list(built.values())
    finally:
        for t in built.values():
            tiers.teardown(t)


def _skipped_as_dropped(ds, result: dict) -> None:
    """Files the listing skipped (FIFOs, sockets, devices: reading them could block forever) count
    as dropped, like the unreadable files ignore_errors removes."""
    if ds.skipped and "images_dropped" in result:
        result["images_dropped"] += len(ds.skipped)
        result["dropped_files"] = [*ds.skipped, *result.get("dropped_files", [])][:50]


def _measure_runs(cfg: DictConfig, config: dict, job_dir: Path, ds, data_dir: str, prov: dict) -> list[dict]:
    """The cell's runs, warm-ups first, each from the requested cache state (the caller holds the locks)."""
    from jobs import cache, trace

    fs_type = (prov["data_mount"] or prov["storage_mount"])["fs_type"]
    requested = config["cache"]
    if cfg.storage.kind == "memory" and fs_type not in cache.MEMORY_FS:
        log.warning("storage=%s describes a memory tier, but %s is on %s: runs are judged as %s", cfg.storage.name, data_dir, fs_type, fs_type)
    if ds.skipped:
        log.warning("%d listed files are not regular files and are skipped (counted as dropped), e.g. %s",
                    len(ds.skipped), list(ds.skipped[:3]))
    runner = RUNNERS[config["workload"]["kind"]]
    disk = trace.device_of(data_dir)
    runs: list[dict] = []
    for k in range(cfg.warmup + cfg.repeats):
        warmup = k < cfg.warmup
        if requested == "cold":
            resident = cache.evict(ds.files, drop_caches=bool(cfg.drop_caches)).resident_bytes_after
        else:
            cache.warm(ds.files)
            resident, _ = cache.residency(ds.files)
        started = records.now()
        seed = int(cfg.seed) + k
        result = runner(ds, cfg, config, seed, job_dir, k + 1 - cfg.warmup, disk)
        _skipped_as_dropped(ds, result)
        state = cache.classify(
            requested, cfg.storage.kind, fs_type, result["bytes_read_device"], result["bytes_consumed"]
        )
        runs.append(
            {
                "run": k + 1 - cfg.warmup,  # measured runs are 1..repeats; warm-ups are <= 0
                "warmup": warmup,
                "started_at": started,
                "shuffle_seed": seed,
                "cache_requested": requested,
                "cache_state": state,
                "resident_bytes_before": resident,
                **result,
            }
        )
        _log_run(warmup, k, cfg, result, state)
    return runs


def execute(cfg: DictConfig) -> None:
    """Hydra task function: run the cell whose config Hydra composed, and write its record."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    job_dir = hc.runtime.output_dir
    multirun = hc.mode == RunMode.MULTIRUN
    overrides = list(hc.overrides.task)
    on_slurm = str(getattr(cfg.platform.kind, "value", cfg.platform.kind)) == "slurm"
    if on_slurm and not multirun:
        logging.shutdown()
        outputs.remove_new()
        raise errors.Stop(f"campaign: platform={cfg.platform.name} runs cells as Slurm jobs: add -m (e.g. python -m "
                          f"campaign -m platform={cfg.platform.name} ...)", 2)
    try:
        validate.check(cfg)
    except errors.ConfigError as e:
        if multirun:
            raise  # the sweep's own check runs first; this only guards a cell launched another way
        logging.shutdown()
        outputs.remove_new()
        raise errors.Stop(f"campaign: {e}", 2) from None
    config = resolved(cfg)
    started = records.now()
    try:
        runs, dataset, prov = measure(cfg, config, Path(job_dir))
    except Exception as e:  # the cell failed: say so in its record, never leave it looking like a result
        from jobs import provenance

        rec = records.CellRecord(
            cell_id=cell_id(config),
            status=records.FAILED,
            config=config,
            overrides=overrides,
            runs=[],
            dataset={},
            provenance=provenance.collect(str(cfg.storage.root)),
            started_at=started,
            finished_at=records.now(),
            error={"type": type(e).__name__, "message": str(e), "traceback": traceback.format_exc()},
        )
        try:
            path = records.write(rec, job_dir)
        except (OSError, records.RecordError) as w:  # e.g. the disk that filled up holds the run folder too
            raise errors.Stop(f"campaign: the cell failed: {type(e).__name__}: {e}; its failed record could not be "
                              f"written either ({w})", 1) from None
        log.error("cell failed: %s: %s (record: %s)", type(e).__name__, e, path)
        if multirun and not on_slurm:
            return  # a local sweep goes on; a Slurm job must end FAILED
        if not multirun:
            raise errors.Stop(f"campaign: the cell failed: {type(e).__name__}: {e} (record: {path})", 1) from None
        raise
    rec = records.CellRecord(
        cell_id=cell_id(config),
        status=records.COMPLETED,
        config=config,
        overrides=overrides,
        runs=runs,
        dataset=dataset,
        provenance=prov,
        started_at=started,
        finished_at=records.now(),
    )
    path = records.write(rec, job_dir)
    log.info("record: %s", path)
