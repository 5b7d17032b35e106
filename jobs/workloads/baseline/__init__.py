"""Table I baseline: the tier's sequential read and write bandwidth (IOR or fio, O_DIRECT) and the
device's own rate for the dataset's small files."""

from __future__ import annotations

from dataclasses import dataclass, field

from jobs.errors import ConfigError
from jobs.metrics import of
from jobs.schema import WorkloadConf
from jobs.storage import backends
from jobs.workloads import RunContext, Workload, register


@dataclass
class BaselineConf(WorkloadConf):
    file_gb: float = 5.0  # size of the sequential read/write test file, GB (Table I: 5)
    # readers of the dataset's files
    small_file_threads: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    # storage=s3: GETs and PUTs in flight at once, each measured (jobs/workloads/baseline/object_store.py)
    requests_in_flight: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64])


@register
class Baseline(Workload):
    name = "baseline"
    posix_traceable = False  # fio's I/O is fio's own, and what it asks for is set by its command line
    in_tensorflow = False  # fio runs in its own process: Ctrl-C ends the wait for it at once
    uses_framework = False  # fio does the I/O: TensorFlow is not imported for a baseline cell
    schema = BaselineConf
    run_model = "baseline"
    node_needs = ("fio or ior on PATH",)
    metrics = of("seq_read_mb_s", "seq_write_mb_s")
    record_keys = (
        "small_read_mb_s",
        "object_mb_s",
        "object_device_ratio",
        "file_bytes",
        "tool",
        "tool_version",
        "small_file_tool",
        "commands",
    )
    objects = True  # on an object store: its own GETs and PUTs, whatever the framework

    def check(self, cfg) -> None:
        import shutil

        if cfg.workload.file_gb <= 0:
            raise ConfigError(f"workload.file_gb={cfg.workload.file_gb} must be positive")
        threads = list(cfg.workload.small_file_threads or [])
        if not threads or min(threads) < 1:
            raise ConfigError(f"workload.small_file_threads={threads} must list positive thread counts")
        from jobs.storage.roots import elsewhere

        if backends.of(cfg.storage).requests:
            counts = list(cfg.workload.requests_in_flight or [])
            if not counts or min(counts) < 1 or max(counts) > 64:
                raise ConfigError(
                    f"workload.requests_in_flight={counts} must list counts of requests from 1 to 64"
                )
            from jobs.workloads.baseline import object_store

            large = object_store.large_objects(cfg.workload.file_gb)
            if min(counts) > large:
                raise ConfigError(
                    f"workload.requests_in_flight={counts}: workload.file_gb={cfg.workload.file_gb} makes "
                    f"{large} objects of 64 MiB, fewer than any count; list a count of {large} or less, or "
                    "raise workload.file_gb"
                )
            return  # the store's own requests: no fio, no file on the root
        # a dry run for the nodes: theirs
        if not (shutil.which("ior") or shutil.which("fio") or elsewhere(cfg)):
            raise ConfigError("workload=baseline needs ior or fio on PATH (Debian: apt-get install fio)")
        # a missing root: the tier check's
        _, free = (None, None) if elsewhere(cfg) else backends.of(cfg.storage).space(cfg.storage)
        if free is not None and cfg.workload.file_gb * 1e9 > free:
            raise ConfigError(
                f"workload.file_gb={cfg.workload.file_gb}: the sequential test file does not fit in the "
                f"{free / 1e9:.1f} GB free on storage={cfg.storage.name}; use a smaller workload.file_gb"
            )

    def run_once(self, ctx: RunContext) -> dict:
        from jobs.workloads.baseline import measure as baseline

        cfg = ctx.cfg
        if ctx.ds.store is not None:  # an object store: its GETs and PUTs
            from jobs.storage.objectstore import tier
            from jobs.workloads.baseline import object_store

            store = tier.opened(ctx.ds.store)
            return object_store.run_once(
                ctx.ds, store, cfg.workload.file_gb, tuple(cfg.workload.requests_in_flight), f"run{ctx.run}"
            )
        settings = baseline.BaselineSettings(
            root=cfg.storage.root,
            file_gb=cfg.workload.file_gb,
            small_file_threads=tuple(cfg.workload.small_file_threads),
        )
        return baseline.run_once(ctx.ds, settings, ctx.disk, tag=f"run{ctx.run}")

    def describe(self, result: dict) -> str:
        if "object_mb_s" in result:
            rates = result["object_mb_s"]
            return (
                f"GET 64 MiB {result['seq_read_mb_s']:.0f} MB/s, PUT {result['seq_write_mb_s']:.0f} MB/s "
                "(best of "
                f"{', '.join(rates['get_large'])} in flight); small GETs "
                f"{{{', '.join(f'{c}: {v:.0f}' for c, v in rates['get_small'].items())}}} MB/s"
            )
        small = ", ".join(f"{t}: {v:.0f}" for t, v in result["small_read_mb_s"].items())
        return (
            f"{result['tool']} read {result['seq_read_mb_s']:.0f} MB/s, "
            f"write {result['seq_write_mb_s']:.0f} MB/s; small files by readers {{{small}}} MB/s"
        )
