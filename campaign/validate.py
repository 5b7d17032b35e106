"""Checks that types cannot express, in one place; each failure is one line naming the setting.

The checks read a cell's resolved config as plain data (``plan.resolved``), so that planning
thousands of cells costs no DictConfig traversal; a memo shared across one planning pass keeps a
storage root from being probed, or a dataset folder listed, once per cell.
"""

from __future__ import annotations

import os
import tempfile

from campaign.errors import ConfigError
from jobs.configview import View

__all__ = ["ConfigError", "check", "storage_root", "threads_value", "View"]
MISSING = "???"


def threads_value(raw) -> int | str:
    """``threads`` as the pipeline takes it: a positive int or "autotune"."""
    if isinstance(raw, str) and raw.strip().lower() == "autotune":
        return "autotune"
    if isinstance(raw, bool):
        raise ConfigError(f"threads={raw} is not a number: give a positive integer or 'autotune'")
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"threads={raw} is not a number: give a positive integer or 'autotune'") from None
    if value < 1 or str(value) != str(raw).strip():
        raise ConfigError(f"threads={raw} must be a positive integer (num_parallel_calls) or 'autotune'")
    return value


def _at_least(cfg: View, key: str, low: int) -> None:
    value = cfg.select(key)
    if value is not None and value < low:
        raise ConfigError(f"{key}={value} must be at least {low}")


def _memo(memo: dict | None, key: tuple, fn):
    """``fn()``, or its earlier outcome (value or ConfigError) for ``key`` within one planning pass."""
    if memo is None:
        return fn()
    if key not in memo:
        try:
            memo[key] = (fn(), None)
        except ConfigError as e:
            memo[key] = (None, e)
    value, error = memo[key]
    if error is not None:
        raise error
    return value


def storage_root(cfg: View, storage: View | None = None, key: str = "storage", memo: dict | None = None) -> str:
    """Check the root of a storage tier (``key`` names it in messages: storage, checkpoint.slow, ...);
    returns it. Workloads that touch more tiers check theirs with this."""
    st = storage if storage is not None else cfg.storage
    return _memo(memo, ("root", key, repr(st._d)), lambda: _check_root(st, key))


def _check_root(st: View, key: str) -> str:
    if st.get("emulate") is not None:
        from jobs import tiers

        why = tiers.available()
        if why:
            raise ConfigError(
                f"{key}={st.name}: {why}; without root use storage=local, or a real device with "
                "storage=hdd|ssd|optane storage.root=<its mount point>"
            )
        if st.emulate.read_mb_s <= 0 or st.emulate.write_mb_s <= 0:
            raise ConfigError(f"{key}.emulate of {key}={st.name}: read_mb_s and write_mb_s must be positive")
        for iops in ("read_iops", "write_iops"):
            v = st.emulate.get(iops)
            if v is not None and v < 1:
                raise ConfigError(f"{key}.emulate.{iops}={v} must be a positive number of requests per second "
                                  f"({key}.emulate.{iops}=null: no limit)")
        image = os.path.join(str(st.emulate.image_dir), f"{st.name}.img")
        why = tiers.foreign(str(st.name), image, str(st.root), key)
        if why:
            raise ConfigError(f"{key}={st.name}: {why}")
        return str(st.root)  # the tier's mount point: made when the cell starts
    if st.root == MISSING:
        raise ConfigError(
            f"{key}.root is not set: {key}={st.name} needs the directory on that tier, "
            f"e.g. {key}.root=/mnt/{st.name}"
        )
    root = str(st.root)
    if not os.path.exists(root):
        raise ConfigError(f"{key}.root={root} does not exist ({key}={st.name})")
    if not os.path.isdir(root):
        raise ConfigError(f"{key}.root={root} is not a directory ({key}={st.name})")
    try:
        fd, probe = tempfile.mkstemp(prefix=".iocampaign-probe-", dir=root)
    except OSError as e:
        raise ConfigError(f"{key}.root={root} is not writable ({e.strerror}) ({key}={st.name})") from None
    os.close(fd)
    os.unlink(probe)
    for sub in TOOL_FOLDERS:  # where the tool keeps its own files on a tier: a file there would fail late
        p = os.path.join(root, sub)
        if os.path.lexists(p) and not os.path.isdir(p):
            raise ConfigError(f"{key}.root={root}: {p} is not a folder, and the tool keeps its files there; move it "
                              "away or choose another root")
    return root


TOOL_FOLDERS = ("iocampaign", "iocampaign/datasets", "iocampaign/datasets/converted", "iocampaign/staged",
                "iocampaign/checkpoints")


def _dataset_size(cfg: View, memo: dict | None = None) -> int:
    """Images the cell will read, listing a real dataset (raises ConfigError for an empty one)."""
    return _memo(memo, ("dataset", repr(cfg.dataset._d)), lambda: _list_dataset(cfg))


def _list_dataset(cfg: View) -> int:
    from jobs import datasets

    source = str(getattr(cfg.dataset.source, "value", cfg.dataset.source))
    n = int(cfg.dataset.num_images)
    if source == "synthetic":
        path = cfg.dataset.path
        if path:
            what = ("a folder: add dataset.source=folder" if os.path.isdir(path) else
                    "a file: add dataset.source=filelist" if os.path.isfile(path) else
                    "not there: fix it, or add dataset.source=folder|filelist")
            raise ConfigError(f"dataset.path={path} is set, but dataset.source=synthetic would measure generated "
                              f"images instead; the path is {what}")
        return n
    try:
        if not cfg.dataset.path:
            raise datasets.DatasetError(f"dataset.path is required with dataset.source={source}")
        items = (datasets.from_folder if source == "folder" else datasets.from_filelist)(cfg.dataset.path)
        if not datasets.has_images(items):
            raise datasets.DatasetError(f"dataset.path={cfg.dataset.path} holds no images")
    except datasets.DatasetError as e:
        raise ConfigError(str(e)) from None
    return min(n, len(items))


def check(config, memo: dict | None = None) -> None:
    """Raise ConfigError for the first setting of a cell that cannot run. ``config``: the cell's
    resolved config (a plain dict) or its DictConfig; ``memo``: a dict shared across one planning
    pass, so file-system checks run once per distinct tier and dataset."""
    if not isinstance(config, dict):
        from campaign.plan import resolved

        config = resolved(config)
    cfg = View(config)
    if cfg.platform.get("needs_account") and not cfg.platform.get("account"):
        raise ConfigError(f"platform.account is not set: platform={cfg.platform.name} needs your allocation, "
                          "e.g. platform.account=2024-1-23")
    threads_value(cfg.threads)
    for key, low in (
        ("batch_size", 1),
        ("prefetch", 0),
        ("repeats", 1),
        ("warmup", 0),
        ("dataset.num_images", 1),
        ("workload.image_side", 1),
        ("workload.batches", 1),
    ):
        _at_least(cfg, key, low)
    from jobs import workloads

    try:
        workload = workloads.get(str(cfg.workload.kind))
    except KeyError as e:
        raise ConfigError(e.args[0]) from None
    workload.check(cfg)
    if (cfg.get("trace") or {}).get("posix"):
        if not workload.posix_traceable:
            raise ConfigError(f"trace.posix=true traces TensorFlow's I/O; workload={cfg.workload.name} does not use it "
                              "(leave trace.posix=false for it)")
        from jobs import posix

        try:
            posix.preload_library()
        except posix.PosixTraceError as e:
            raise ConfigError(str(e)) from None
    if (cfg.workload.get("read_delay_ms") or 0) < 0:
        raise ConfigError(f"workload.read_delay_ms={cfg.workload.read_delay_ms} must not be negative")
    storage_root(cfg, memo=memo)
    if cfg.get("stage") is not None:
        storage_root(cfg, cfg.stage, key="stage", memo=memo)
        if (cfg.stage.name == cfg.storage.name or os.path.realpath(str(cfg.stage.root)) == os.path.realpath(str(cfg.storage.root))
                or _same_device(cfg.stage, cfg.storage)):
            raise ConfigError(f"storage@stage={cfg.stage.name} is the tier the data is on (storage={cfg.storage.name}, "
                              f"root {cfg.storage.root}): stage on another tier, e.g. storage@stage=tmpfs")
    if cfg.get("shuffle_buffer") is not None and str(cfg.get("shuffle") or "global") == "none":
        raise ConfigError(f"shuffle_buffer={cfg.shuffle_buffer} has no effect with shuffle=none: leave it unset, or "
                          "choose shuffle=global|local")
    if cfg.get("shuffle_buffer") is not None and int(cfg.shuffle_buffer) < 1:
        raise ConfigError(f"shuffle_buffer={cfg.shuffle_buffer} must be at least 1 (or null: all images for shuffle=global, "
                          "one shard's for shuffle=local)")
    if isinstance(config.get("dataset"), dict) and not 0 < float(cfg.dataset.get("shard_mb") or 0) < float("inf"):
        raise ConfigError(f"dataset.shard_mb={cfg.dataset.get('shard_mb')} must be positive (MB per TFRecord shard or "
                          "HDF5 file, and per group of files for shuffle=local)")
    if not isinstance(config.get("dataset"), dict):
        if workload.needs_dataset:
            raise ConfigError(f"workload={cfg.workload.name} reads a dataset and has none: add dataset=imagenet_subset "
                              "(or caltech101, or dataset.source=folder dataset.path=...)")
        n = None
    else:
        n = _dataset_size(cfg, memo)
    if n is not None and cfg.batch_size > n:
        raise ConfigError(
            f"batch_size={cfg.batch_size} is larger than the dataset ({n} images; see dataset.num_images"
            + ("" if str(cfg.dataset.source) == "synthetic" else f" and dataset.path={cfg.dataset.path}")
            + ")"
        )
    _tasks(cfg, config, n)
    _service(cfg)
    if cfg.platform.lock_timeout_min <= 0:
        raise ConfigError(f"platform.lock_timeout_min={cfg.platform.lock_timeout_min} must be positive (minutes)")
    if str(getattr(cfg.platform.kind, "value", cfg.platform.kind)) == "slurm":
        from campaign.slurm import params

        params.check(cfg.platform)
    if cfg.drop_caches and os.geteuid() != 0:
        raise ConfigError("drop_caches=true needs root (it writes /proc/sys/vm/drop_caches); leave it false to evict per file")


def _same_device(a: View, b: View) -> bool:
    """Whether two real tiers' roots are on one device (an emulated tier gets its own when the cell starts)."""
    if a.get("emulate") is not None or b.get("emulate") is not None:
        return False
    try:
        return os.stat(str(a.root)).st_dev == os.stat(str(b.root)).st_dev
    except OSError:
        return False


def _tasks(cfg: View, config: dict, n: int | None = None) -> None:
    """What a multi-task cell (platform.tasks_per_node > 1) can run, so far."""
    nodes, per_node = (1 if cfg.platform.get(k) is None else int(cfg.platform.get(k)) for k in ("nodes", "tasks_per_node"))
    if nodes < 1 or per_node < 1:
        raise ConfigError(f"platform.nodes={nodes} and platform.tasks_per_node={per_node} must be at least 1")
    if nodes * per_node == 1:
        return
    what = f"platform.nodes={nodes} platform.tasks_per_node={per_node}"
    if nodes > 1 and str(getattr(cfg.platform.kind, "value", cfg.platform.kind)) != "slurm":
        raise ConfigError(f"{what}: a cell across several nodes is a Slurm job step (platform=slurm or a site preset); "
                          "here, on one machine, use platform.nodes=1")
    if nodes > 1 and str(cfg.storage.kind) != "network":
        raise ConfigError(f"{what}: every node reads the dataset, but storage={cfg.storage.name} (kind {cfg.storage.kind}) "
                          "is one machine's; a multi-node cell needs a shared file system (e.g. storage=lustre "
                          "storage.root=<its scratch folder>)")
    if str(cfg.workload.kind) != "microbench":
        raise ConfigError(f"{what}: multi-task cells run the micro-benchmark and read-only pipelines so far, not "
                          f"workload={cfg.workload.name}")
    if str(cfg.dataset.get("format") or "files") != "files":
        raise ConfigError(f"{what}: tasks shard one-file-per-image sets so far, not dataset.format={cfg.dataset.format}")
    if (cfg.get("trace") or {}).get("posix"):
        raise ConfigError(f"{what}: trace.posix=true traces one process; leave it false for multi-task cells")
    if n is not None and n // (nodes * per_node) < cfg.batch_size:
        raise ConfigError(f"{what}: each of the {nodes * per_node} tasks would read {n // (nodes * per_node)} of the "
                          f"{n} images, fewer than batch_size={cfg.batch_size}; use fewer tasks or more images")


def _service(cfg: View) -> None:
    """What a cell on the tf.data service (input.service=true) can run, so far."""
    inp = cfg.get("input") or {}
    workers = 1 if inp.get("workers") is None else int(inp.get("workers"))
    if workers < 1:
        raise ConfigError(f"input.workers={workers} must be at least 1")
    if not inp.get("service"):
        return
    if str(cfg.workload.kind) != "microbench":
        raise ConfigError(f"input.service=true: the service runs the micro-benchmark and read-only pipelines so far, "
                          f"not workload={cfg.workload.name}")
    if str(cfg.dataset.get("format") or "files") != "files":
        raise ConfigError(f"input.service=true: the service reads one-file-per-image sets so far, not "
                          f"dataset.format={cfg.dataset.format}")
    if cfg.workload.get("batches") is not None or float(cfg.workload.get("read_delay_ms") or 0) > 0:
        raise ConfigError("input.service=true reads whole passes without an added read delay: leave workload.batches "
                          "and workload.read_delay_ms unset")
    nodes, per_node = (1 if cfg.platform.get(k) is None else int(cfg.platform.get(k)) for k in ("nodes", "tasks_per_node"))
    if per_node > 1 or (cfg.get("trace") or {}).get("posix"):
        raise ConfigError("input.service=true runs one consumer, untraced: leave platform.tasks_per_node=1 and "
                          "trace.posix=false (the workers are the cell's other tasks)")
    if int(cfg.input.workers) < nodes:
        raise ConfigError(f"input.workers={cfg.input.workers} spreads the service over platform.nodes={nodes}: "
                          "give at least one worker per node")
