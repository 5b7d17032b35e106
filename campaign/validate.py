"""Checks that types cannot express, in one place; each failure is one line naming the setting.

The checks read a planned cell's typed config (``jobs.cell.Cell``), so that planning thousands of cells
costs no DictConfig traversal; a memo shared across one planning pass keeps a storage root from being
probed, or a dataset folder listed, once per cell.
"""

from __future__ import annotations

import os

from campaign import colocation, limits
from campaign.errors import ConfigError
from jobs import frameworks
from jobs.cell import select
from jobs.observe import accelerator
from jobs.storage import backends, roots
from jobs.storage.objectstore import needs as objectstore
from jobs.storage.roots import elsewhere, memoised, storage_root

__all__ = ["ConfigError", "check", "storage_root"]


def _dataset_size(cfg, memo: dict | None = None) -> int:
    """Images the cell will read, listing a real dataset (raises ConfigError for an empty one)."""
    return memoised(memo, ("dataset", elsewhere(cfg), repr(cfg.dataset)), lambda: _list_dataset(cfg))


def _list_dataset(cfg) -> int:
    from jobs.data import datasets

    source = cfg.dataset.source
    n = cfg.dataset.num_images
    if source == "synthetic":
        path = cfg.dataset.path
        if path:
            what = (
                "a folder: add dataset.source=folder"
                if os.path.isdir(path)
                else "a file: add dataset.source=filelist"
                if os.path.isfile(path)
                else "not there: fix it, or add dataset.source=folder|filelist"
            )
            raise ConfigError(
                f"dataset.path={path} is set, but dataset.source=synthetic would measure generated "
                f"images instead; the path is {what}"
            )
        return n
    if elsewhere(cfg) and cfg.dataset.path:
        return n  # the nodes' folder, not this machine's: listed on the nodes
    try:
        if not cfg.dataset.path:
            raise datasets.DatasetError(f"dataset.path is required with dataset.source={source}")
        items = (datasets.from_folder if source == "folder" else datasets.from_filelist)(cfg.dataset.path)
        if not datasets.has_images(items):
            raise datasets.DatasetError(f"dataset.path={cfg.dataset.path} holds no images")
    except datasets.DatasetError as e:
        raise ConfigError(str(e)) from None
    return min(n, len(items))


def _prefetch_to(cfg, workload) -> None:
    if cfg.prefetch_to != "device":
        return
    if not workload.prefetches_to_device:
        raise ConfigError(
            f"prefetch_to=device: workload={cfg.workload.name} has no training device to prefetch to "
            "(workload=alexnet or alexnet_small has); use prefetch_to=host"
        )
    if cfg.prefetch < 1:
        raise ConfigError(
            "prefetch_to=device needs prefetch=1 or more (batches to hold in the device's memory)"
        )


def check(cell, memo: dict | None = None) -> None:
    """Raise ConfigError for the first setting of a cell (``jobs.cell.Cell``) that cannot run. ``memo``:
    a dict shared across one planning pass, so file-system checks run once per distinct tier and dataset."""
    cfg = cell.config
    if cfg.platform.needs_account and not cfg.platform.account:
        raise ConfigError(
            f"platform.account is not set: platform={cfg.platform.name} needs your allocation, "
            "e.g. platform.account=2024-1-23"
        )
    limits.threads(cfg)
    limits.bounds(cfg, checked=None if memo is None else memo.setdefault("bounded sections", {}))
    from jobs import workloads

    try:
        workload = workloads.get(cfg.workload.kind)
    except KeyError as e:
        raise ConfigError(e.args[0]) from None
    workload.check(cfg)
    _samples(cfg, workload)
    frameworks.check(cfg, workload.engines, gpu=not roots.runs_here(cfg) or accelerator.gpu_driver())
    _prefetch_to(cfg, workload)
    _trace(cfg, workload)
    _service_is_the_presets(cell.overrides)
    objectstore.check(cfg, workload, here=not elsewhere(cfg), able=_able("object_readers"))
    colocation.tiers(cfg, memo)
    colocation.modelled_apart(cfg, _tier_keys(cfg, workload))
    if cfg.shuffle_buffer is not None and cfg.shuffle == "none":
        raise ConfigError(
            f"shuffle_buffer={cfg.shuffle_buffer} has no effect with shuffle=none: leave it unset, or "
            "choose shuffle=global|local"
        )
    n = _images(cfg, workload, memo)
    _tasks(cfg, n)
    _batches(cfg, workload, n)
    colocation.data_on_its_tier(cfg)
    if not elsewhere(cfg):  # this machine's free space says nothing of the nodes'
        memoised(memo, limits.space_key(cell), lambda: limits.dataset_fits(cfg))
    _service(cfg)
    _platform(cfg, memo)
    if cfg.drop_caches and os.geteuid() != 0 and not elsewhere(cfg):
        raise ConfigError(
            "drop_caches=true needs root (it writes /proc/sys/vm/drop_caches); "
            "leave it false to evict per file"
        )


# where a tier's service may be set: a preset's own YAML only (storage=s3, storage=azure)
_SERVICE_KEYS = ("storage.service", "checkpoint.slow.service")


def _samples(cfg, workload) -> None:
    """A set of arrays (``dataset.samples=arrays``: raw volumes) that is not a synthetic set, or that a
    workload that decodes images would read."""
    dataset = cfg.dataset
    if dataset is None or str(dataset.samples) != "arrays":
        return
    if str(dataset.source) != "synthetic":
        raise ConfigError(
            f"dataset.samples=arrays: dataset.source={dataset.source} holds your own files, read as they "
            "are; arrays are a synthetic set's (dataset.samples=images, or dataset.source=synthetic)"
        )
    if workload.decodes(cfg):
        raise ConfigError(
            f"dataset.samples=arrays: workload={cfg.workload.name} decodes images, and arrays are read "
            "whole, never decoded (workload=readonly or workload=emulated reads them)"
        )


def _service_is_the_presets(overrides) -> None:
    """An object store's service is its preset's: ``storage=azure storage.service=s3`` would measure
    SeaweedFS through boto3 and label the rows azure (found by a red team). A store of another service is
    another preset, chosen by its name."""
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        if key in _SERVICE_KEYS:
            raise ConfigError(
                f"{o}: the service an object store speaks is its preset's; choose the preset instead "
                "(storage=s3 or storage=azure; storage@checkpoint.slow=s3)"
            )


def _platform(cfg, memo: dict | None) -> None:
    """Where and how long the cell runs: workers, time limit, the shared lock folder, Slurm's fields."""
    from jobs.storage import locks

    limits.workers(cfg)
    if not elsewhere(cfg):
        memoised(
            memo,
            ("lock_dir", cfg.platform.lock_dir),
            lambda: locks.check_dir(cfg.platform.lock_dir),
        )
    if cfg.platform.kind == "slurm":
        from campaign.slurm import params

        params.check(cfg.platform)
    if cfg.platform.memory_limit_gb is not None and not elsewhere(cfg):
        from jobs.execution import memlimit

        why = memoised(memo, ("memory limit",), memlimit.available)
        if why is not None:
            raise ConfigError(f"{memlimit.SETTING}={cfg.platform.memory_limit_gb}: {why}")
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if cfg.platform.memory_limit_gb * 1e9 >= total:
            raise ConfigError(
                f"{memlimit.SETTING}={cfg.platform.memory_limit_gb} is not below this machine's memory "
                f"({total / 1e9:.1f} GB): it would limit nothing; give less, or leave it unset"
            )


def _tier_keys(cfg, workload) -> tuple[str, ...]:
    """The settings that hold the tiers a cell builds (its workload's, and the stage), when one is
    modelled."""
    named = {"storage": cfg.storage, "checkpoint.slow": cfg.checkpoint.slow}
    named["checkpoint.fast"] = cfg.checkpoint.fast
    if not any(t is not None and t.model is not None for t in (*named.values(), cfg.stage)):
        return ()  # most cells: nothing to compare, and planning stays cheap
    built = {id(st) for st in workload.tiers(cfg)}
    keys = [k for k, st in named.items() if id(st) in built]
    return (*keys, "stage") if cfg.stage is not None else tuple(keys)


def _images(cfg, workload, memo: dict | None) -> int | None:
    """Images a run reads (None: the workload reads no dataset); the dataset is there and holds a batch."""
    if cfg.dataset is None:
        if workload.needs_dataset:
            raise ConfigError(
                f"workload={cfg.workload.name} reads a dataset and has none: add dataset=imagenet_subset "
                "(or caltech101, or dataset.source=folder dataset.path=...)"
            )
        return None
    n = _dataset_size(cfg, memo)
    if cfg.batch_size > n:
        raise ConfigError(
            f"batch_size={cfg.batch_size} is larger than the dataset ({n} images; see dataset.num_images"
            + ("" if cfg.dataset.source == "synthetic" else f" and dataset.path={cfg.dataset.path}")
            + ")"
        )
    return n


TRACE_RUNS = ("all", "extra")


def _trace(cfg, workload) -> None:
    """trace.posix=true: the workload's I/O is TensorFlow's, and dftracer's preload library is here;
    trace.runs names which runs are traced, and only for a traced cell."""
    runs = cfg.trace.runs
    if runs not in TRACE_RUNS:
        raise ConfigError(
            f"trace.runs={runs} is not one of {', '.join(TRACE_RUNS)} (all: every run traced; extra: the "
            "measured runs untraced and one more run traced for its calls)"
        )
    if not cfg.trace.posix:
        if runs != "all":
            raise ConfigError(
                f"trace.runs={runs} names the runs trace.posix=true traces; add trace.posix=true (or leave "
                "trace.runs out)"
            )
        return
    if not workload.posix_traceable:
        raise ConfigError(
            f"trace.posix=true traces a framework's I/O; workload={cfg.workload.name} does not use one "
            "(leave trace.posix=false for it)"
        )
    if elsewhere(cfg):
        return  # dftracer's library is the nodes'
    from jobs.execution import traced
    from jobs.observe import posix

    try:
        traced.preload_library()
    except posix.PosixTraceError as e:
        raise ConfigError(str(e)) from None


def _tasks(cfg, n: int | None = None) -> None:
    """What a multi-task cell (platform.tasks_per_node > 1) can run, so far."""
    from jobs import workloads

    nodes, per_node = cfg.platform.nodes, cfg.platform.tasks_per_node
    if nodes * per_node == 1:
        return
    what = f"platform.nodes={nodes} platform.tasks_per_node={per_node}"
    if nodes > 1 and cfg.platform.kind != "slurm":
        raise ConfigError(
            f"{what}: a cell across several nodes is a Slurm job step (platform=slurm or a site preset); "
            "here, on one machine, use platform.nodes=1"
        )
    if nodes > 1 and not backends.of(cfg.storage).every_node:
        raise ConfigError(
            f"{what}: every node reads the dataset, but storage={cfg.storage.name} (kind {cfg.storage.kind}) "
            "is one machine's; a multi-node cell needs a shared file system "
            "(e.g. storage=lustre or storage=shared "
            "storage.root=<its scratch folder>)"
        )
    if not workloads.get(cfg.workload.kind).shardable:
        raise ConfigError(
            f"{what}: workload={cfg.workload.name} cannot split a run into tasks (multi-task cells run "
            f"workloads of kind {_able('shardable')} so far)"
        )
    if cfg.dataset is not None and cfg.dataset.format != "files":
        raise ConfigError(
            f"{what}: tasks shard one-file-per-image sets so far, not dataset.format={cfg.dataset.format}"
        )
    if cfg.trace.posix:
        raise ConfigError(f"{what}: trace.posix=true traces one process; leave it false for multi-task cells")
    if n is not None and n // (nodes * per_node) < cfg.batch_size:
        raise ConfigError(
            f"{what}: each of the {nodes * per_node} tasks would read {n // (nodes * per_node)} of the "
            f"{n} images, fewer than batch_size={cfg.batch_size}; use fewer tasks or more images"
        )


def _batches(cfg, workload, n: int | None) -> None:
    """Enough full batches per run (or per task) for what the workload measures (``min_batches``)."""
    tasks = cfg.platform.nodes * cfg.platform.tasks_per_node
    if n is None or workload.min_batches <= 1:
        return
    got = n // tasks // cfg.batch_size
    if got < workload.min_batches:
        each = f"each of the {tasks} tasks" if tasks > 1 else "a run"
        raise ConfigError(
            f"workload={cfg.workload.name} needs {workload.min_batches} batches a run "
            "(the first is left out): "
            f"{each} would get {got} of batch_size={cfg.batch_size} from {n} images; use more images "
            "(dataset.num_images), a smaller batch_size or fewer tasks"
        )


def _able(capability: str) -> str:
    """The workloads (their kinds) that declare ``capability``."""
    from jobs import workloads

    return ", ".join(k for k in workloads.names() if getattr(workloads.get(k), capability)) or "no workload"


def _service(cfg) -> None:
    """What a cell on the tf.data service (input.service=true) can run, so far."""
    if not cfg.input.service:
        return
    from jobs import workloads

    if not workloads.get(cfg.workload.kind).service_ready:
        raise ConfigError(
            f"input.service=true: workload={cfg.workload.name} cannot read through the tf.data service "
            f"(the service runs workloads of kind {_able('service_ready')} so far)"
        )
    if cfg.dataset.format != "files":
        raise ConfigError(
            f"input.service=true: the service reads one-file-per-image sets so far, not "
            f"dataset.format={cfg.dataset.format}"
        )
    if select(cfg, "workload.batches") is not None or (select(cfg, "workload.read_delay_ms") or 0) > 0:
        raise ConfigError(
            "input.service=true reads whole passes without an added read delay: leave workload.batches "
            "and workload.read_delay_ms unset"
        )
    nodes, per_node = cfg.platform.nodes, cfg.platform.tasks_per_node
    if per_node > 1 or cfg.trace.posix:
        raise ConfigError(
            "input.service=true runs one consumer, untraced: leave platform.tasks_per_node=1 and "
            "trace.posix=false (the workers are the cell's other tasks)"
        )
    if cfg.input.workers < nodes:
        raise ConfigError(
            f"input.workers={cfg.input.workers} spreads the service over platform.nodes={nodes}: "
            "give at least one worker per node"
        )
