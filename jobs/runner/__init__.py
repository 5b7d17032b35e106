"""The generic run loop of a cell, for any registered workload, outside Hydra.

Under the locks of the tiers and devices the cell touches: build its emulated and modelled tiers,
list or generate its dataset, then run warm-ups and repeats (``jobs.runner.runs``), each from the
requested cache state (evicted and verified, or warmed), classify what each run actually had, and
return the runs with the dataset summary and provenance. ``campaign.cell`` wraps this into the
cell's record; benchmarks call it directly with a planned ``jobs.cell.Cell``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
from dataclasses import asdict, replace
from pathlib import Path

from jobs import frameworks, interrupts, workloads
from jobs.runner.runs import Session, run_all
from jobs.storage import backends
from jobs.storage.objectstore import clients

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


def measure(cell, job_dir: Path, first_run: int = 1) -> tuple[list[dict], dict, dict]:
    """Every run of ``cell`` (a ``jobs.cell.Cell``; warm-ups first) with its cache evidence; plus
    dataset summary and provenance. ``first_run`` numbers the first measured run (the extra traced run
    of ``trace.runs=extra`` is run ``repeats + 1``). Everything that writes on a tier (its set-up, the
    dataset's generation, the runs, the tear-down) happens under the locks of the tiers and devices the
    cell touches."""
    from jobs.execution import traced

    cfg = cell.config
    if cfg.trace.posix and not traced.inside():  # in a child started with the tracer
        if cfg.trace.runs == "extra":  # or untraced here, then one more run in a child
            return traced.with_extra_run(cell, job_dir, measure)
        return traced.measure(cell, job_dir)
    w = workloads.get(cfg.workload.kind)
    # before the locks: the import holds no device; its start-up lines go to the cell's folder
    from jobs.execution import tfstart

    if tfstart.needed(w, cfg):
        tfstart.import_quietly(job_dir / tfstart.LOG, keras=w.uses_keras)
    from jobs.execution import nativelog

    # the C++ lines of its runs (TensorFlow's per op, CUDA's) in the cell's folder too, not on the terminal
    with nativelog.into(job_dir / nativelog.NAME):
        return _locked(w, cell, job_dir, first_run)


def _locked(w, cell, job_dir: Path, first_run: int) -> tuple[list[dict], dict, dict]:
    """The cell's runs under the locks of its built tiers, then of the devices it measures."""
    from jobs.data import datasets, inuse
    from jobs.storage import locks
    from jobs.storage.modeled import liveness

    cfg = cell.config
    tiers_of = w.tiers(cfg) + ([cfg.stage] if cfg.stage is not None else [])
    root, lock_dir = cfg.storage.root, cfg.platform.lock_dir
    timeout = cfg.platform.lock_timeout_min * 60
    built = {
        locks.tier_lock_path(lock_dir, st.name): f"{'modelled' if st.model else 'emulated'} tier {st.name}"
        for st in tiers_of
        if st.emulate is not None or st.model is not None
    }
    with (
        locks.all_of(built, timeout) as tier_wait,
        _tiers(cfg, tiers_of) as (tier, all_tiers, modeled),
        liveness.named(modeled),  # a layer that died before the runs is named, not its ENOTCONN
    ):
        if cfg.dataset is None:  # a workload that reads no dataset (needs_dataset=False)
            ds, written = datasets.Dataset("", "none", root, (), (), (), 0), False
        else:  # a synthetic set is generated, a converted one written, on storage.root
            written = cfg.dataset.source == "synthetic" or cfg.dataset.format != "files"
            ds = None if written else datasets.resolve(cfg.dataset, root, cfg.seed)  # lists only
        measured = [root if written or not ds.files else os.path.dirname(ds.files[0])]
        measured += [st.root for st in tiers_of[1:] if os.path.isdir(st.root)]
        # the tool's datasets the cell reads stay locked (shared) until it ends: a purge refuses them
        with locks.all_of(locks.devices(lock_dir, measured), timeout) as device_wait, inuse.reading():
            ds = _dataset(cfg, ds, w)
            data_dir = os.path.dirname(ds.storage_files[0]) if ds.storage_files else root
            prov = {
                **_provenance(cell, w, data_dir, tier_wait + device_wait, modeled),
                **_emulated_tiers(tier, all_tiers),
            }
            s = Session(w, cell, job_dir, first_run, ds, data_dir, prov, backends.of(cfg.storage))
            runs, s = _throttled(s, all_tiers) if all_tiers else _served_runs(s)
            return runs, dataset_summary(s.ds, s.prov), s.prov


def _dataset(cfg, listed, w):
    """The cell's dataset as its runs read it: generated under the lock where ``listed`` is None,
    converted to its format once; a workload's own files (``Workload.dataset``) where it reads no dataset."""
    from jobs.data import datasets, formats

    root = cfg.storage.root
    if cfg.dataset is None:
        return w.dataset(cfg) or listed
    ds = listed if listed is not None else datasets.resolve(cfg.dataset, root, cfg.seed)
    converted = datasets.cache_dir(root, formats.CONVERTED)
    return formats.ensure(ds, cfg.dataset.format, cfg.dataset.shard_mb, converted)


def _provenance(cell, w, data_dir: str, lock_wait_s: float, modeled: list) -> dict:
    """Where the runs read, what with (the framework's packages, the object client), how long the cell
    waited for its locks, and the modelled tiers it built."""
    from jobs.observe import provenance

    cfg = cell.config
    fw = frameworks.of(cfg)
    framework = (fw.package, *fw.companions) if w.uses_framework else ()
    client = clients.of(cfg, w.uses_framework) if backends.of(cfg.storage).requests else None
    if w.uses_framework and client is not None and not client.mounts:
        framework += (client.distribution,)  # the client the runs GET with
    prov = provenance.collect(
        cfg.storage.root, data_dir, (*frameworks.own_packages(fw, w.packages), *framework)
    )
    prov["device_lock_wait_s"] = lock_wait_s
    if modeled:
        prov["modeled_tiers"] = [asdict(t) for t in modeled]
    return prov


def _emulated_tiers(tier, all_tiers: list) -> dict:
    """The provenance of the cell's emulated tiers: the storage's own (``tier``, None if it is not one)
    and every one it built; nothing for a cell that built none."""
    if not all_tiers:
        return {}
    return {
        **({"emulated_tier": asdict(tier)} if tier is not None else {}),
        "emulated_tiers": [asdict(t) for t in all_tiers],
    }


def _throttled(s: Session, all_tiers: list) -> tuple[list[dict], Session]:
    """The runs with the cell's processes in its emulated tiers' I/O cgroups."""
    from jobs.storage import cache, tiers

    cache.evict(s.ds.storage_files)  # flush the freshly written set before the throttle applies
    cg = tiers.join_all(all_tiers)
    try:
        return _served_runs(s)
    finally:
        tiers.leave_all(cg)


def _served_runs(s: Session) -> tuple[list[dict], Session]:
    """The runs inside what the tier's kind serves them for all of them (``Backend.serving``): an object
    store's keys, or the dataset's files; with the session they read in."""
    from jobs.execution.placement import Placement

    with s.backend.serving(s, Placement.of(s.cfg)) as served:
        if served is None:  # the dataset's files, where they lie or staged
            return _file_runs(s)
        prov = {**s.prov, **served.prov}  # an object store: its keys, not files
        return _runs(replace(s, ds=served.ds, data_dir=served.data_dir, prov=prov, store=served.store))


def _file_runs(s: Session) -> tuple[list[dict], Session]:
    """The runs reading the dataset's files, from a copy staged on ``cfg.stage`` first when one is asked
    for (the copy's time goes into provenance, not into the runs; the copy is removed when the runs end)."""
    stage = s.cfg.stage
    if stage is None:
        return _runs(s)
    from jobs.data import staging
    from jobs.observe import provenance

    staged, facts = staging.stage_in(s.ds, stage.root)
    log.info(
        "staged %d files (%.0f MB) from %s to %s (storage@stage=%s) in %.2f s (%.0f MB/s)",
        facts["stage_files"],
        facts["stage_bytes"] / 1e6,
        s.data_dir,
        facts["staged_to"],
        stage.name,
        facts["stage_s"],
        facts["stage_mb_s"] or 0,
    )
    prov = {
        **s.prov,
        "stage": {"storage": stage.name, "kind": stage.kind, **facts},
        "source_mount": s.prov.get("data_mount"),
        "data_mount": asdict(provenance.mount_of(facts["staged_to"])),
    }
    s = replace(
        s, ds=staged, data_dir=facts["staged_to"], backend=backends.of(stage), prov=prov, tier_key="stage"
    )
    try:
        return _runs(s)
    finally:
        staging.remove(facts["staged_to"])


def _runs(s: Session) -> tuple[list[dict], Session]:
    """The runs of the session ``s``, and ``s`` with the memory limit's figures in its provenance."""
    runs, memory = run_all(s)
    return runs, replace(s, prov={**s.prov, **memory})


@contextlib.contextmanager
def _tiers(cfg, tiers_of: list):
    """The emulated and modelled tiers of the cell, set up for the cell and torn down after it; yields
    the storage's own emulated tier (or None), all emulated tiers, and the modelled ones."""
    from jobs.storage import tiers
    from jobs.storage.modeled import liveness, mount

    built: dict[str, tiers.Tier] = {}
    modeled: dict[str, mount.ModeledTier] = {}
    watches: list[liveness.Watch] = []  # each modelled layer asked, while mounted, whether it still answers
    try:
        for st in tiers_of:
            if st.model is not None and st.name not in modeled:
                geometry = mount.geometry_of(st.model)
                modeled[st.name] = mount.setup(st.name, st.model.backing_dir, st.root, geometry)
                watches.append(liveness.Watch(modeled[st.name], st.model.answer_s).start())
                log.info(
                    "modelled tier %s: %s served by a FUSE layer over %s (%s)",
                    st.name,
                    st.root,
                    modeled[st.name].backing,
                    geometry.summary(),
                )
            if st.emulate is not None and st.name not in built:
                built[st.name] = _emulated(st)
        yield built.get(cfg.storage.name), list(built.values()), list(modeled.values())
    finally:
        # a signal here waits for the tear-down's end: raised between the unmount and the loop device's
        # detach, it left the device attached (5 of 8 tries, SIGINT and SIGTERM)
        with interrupts.deferred():
            for w in watches:
                w.stop()
            for t in built.values():
                tiers.teardown(t)
            for m in modeled.values():
                mount.teardown(m)


def _emulated(st):
    """The emulated tier ``st`` set up: a throttled loop device mounted at its root."""
    from jobs.storage import tiers

    e = st.emulate
    t = tiers.setup(
        st.name,
        e.image_dir,
        st.root,
        e.size_gb,
        e.read_mb_s,
        e.write_mb_s,
        e.read_iops or 0,
        e.write_iops or 0,
    )
    log.info(
        "emulated tier %s: %s on %s (%s), throttled by %s to %.0f MB/s read, %.0f MB/s write, %s read, "
        "%s write requests/s",
        t.name,
        t.mount,
        t.loop,
        t.dev,
        t.throttle,
        e.read_mb_s,
        e.write_mb_s,
        t.read_iops or "any",
        t.write_iops or "any",
    )
    return t
