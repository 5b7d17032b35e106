"""``workload=replay replay.trace=<file>``: a user's traced job replayed as a cell on any file-system tier.

The trace (a Darshan log with DXT, a DFTracer trace, or a traced cell's folder; ``jobs.traces``) gives the
files, their sizes and every read and write. The files the job read are made once on the tier, as large as
the furthest byte it read (``files``); each run issues the calls again in their order, sizes and offsets, by
as many threads as the job had or as ``replay.concurrency`` says, as fast as the tier answers or at their
recorded times (``issue``). The runner's cold-cache proof applies: the made files are the cell's data,
evicted before each run, and the device's counters prove what a run read from it.
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from jobs.errors import ConfigError
from jobs.metrics import Metric, declare, of
from jobs.schema import WorkloadConf
from jobs.storage import backends
from jobs.workloads import RunContext, Workload, register

OUT = "replay-written"  # in the tool's folder on the tier: each run's written files, removed after it

METRICS = tuple(
    declare(m)
    for m in (
        Metric(
            "replay_calls",
            "calls",
            "",
            "workload=replay: calls issued (opens, reads, writes, closes, fsyncs)",
        ),
        Metric("replay_reads", "calls", "", "workload=replay: reads issued"),
        Metric("replay_bytes_read", "bytes", "", "workload=replay: bytes every replayed read returned"),
        Metric("replay_writes", "calls", "", "workload=replay: writes issued"),
        Metric("replay_bytes_written", "bytes", "", "workload=replay: bytes the replayed writes wrote"),
        Metric("replay_calls_skipped", "calls", "", "workload=replay: seeks and metadata calls, not issued"),
        Metric("replay_threads", "threads", "", "workload=replay: threads that issued the calls"),
        Metric("replay_recorded_s", "s", "", "workload=replay: the trace's span, first call to last"),
        Metric(
            "replay_time_ratio",
            "x",
            "lower",
            "workload=replay: seconds of the replay ÷ the trace's recorded span",
        ),
    )
)


@dataclass
class ReplayWorkloadConf(WorkloadConf):
    pass  # what to replay is the replay section: replay.trace, replay.mode, replay.concurrency


@functools.lru_cache(maxsize=4)
def _trace(path: str, mtime: float):
    from jobs import traces

    return traces.read(path)


def trace_of(cfg):
    """The cell's trace (read once per process and file version); ConfigError naming replay.trace."""
    from jobs import traces

    path = cfg.replay.trace
    if not path:
        raise ConfigError(
            "workload=replay needs a trace: replay.trace=<a Darshan log, DFTracer trace or cell folder>"
        )
    try:
        t = _trace(os.path.abspath(path), os.stat(path).st_mtime if os.path.exists(path) else 0.0)
    except traces.TraceError as e:
        raise ConfigError(f"replay.trace={path}: {e}") from None
    if not t.has_calls:
        raise ConfigError(
            f"replay.trace={path}: the trace holds counters only, no calls to replay (a Darshan log without "
            "DXT: run the job with DXT_ENABLE_IO_TRACE=1)"
        )
    return t


@register
class Replay(Workload):
    name = "replay"
    schema = ReplayWorkloadConf
    metrics = (*of("seconds", "mb_per_s"), *METRICS)
    needs_dataset = False  # its data are the trace's files, made by the workload (``dataset``)
    in_tensorflow = False
    uses_framework = False  # its calls are the trace's, issued by the tool: no framework reads
    reads_images = False  # it reads the trace's files, which are no images (its line counts calls)
    any_framework = True  # none is used, so any framework=<name> is allowed
    # storage=s3: reads as ranged GETs and writes as PUTs by the store's own client, whatever the framework
    objects = True

    def store_figures(self, cfg) -> bool:
        return True  # its GETs and PUTs are the run's requests, the server's reads its device bytes

    def check(self, cfg) -> None:
        t = trace_of(cfg)
        from jobs.storage.roots import elsewhere
        from jobs.workloads.replay import files

        lay = files.layout(t.operations)
        if not elsewhere(cfg):
            _no_larger_than_the_tier(cfg, lay)
        _no_unbounded_calls(cfg, t)
        _, free = (None, None) if elsewhere(cfg) else backends.of(cfg.storage).space(cfg.storage)
        # an object store holds each made file whole (its holes too); a file system only the bytes read
        on_store = backends.of(cfg.storage).requests
        made = sum(e for e, r in zip(lay.extents, lay.read) if r) if on_store else lay.data_bytes
        need = made + lay.written_bytes
        if free is not None and need * 1.02 > free:
            raise ConfigError(
                f"replay.trace={cfg.replay.trace}: its files take {need / 1e9:.2f} GB, but storage="
                f"{cfg.storage.name} has {free / 1e9:.2f} GB free; choose another storage"
            )

    def parallelism(self, cfg, result: dict | None = None) -> int | None:
        if result and result.get("replay_threads"):
            return int(result["replay_threads"])
        return cfg.replay.concurrency

    def dataset(self, cfg):
        """The trace's read files, made on the tier (under the cell's device lock) as the cell's data."""
        from jobs.data import datasets
        from jobs.workloads.replay import files

        t = trace_of(cfg)
        lay = files.layout(t.operations)
        folder = datasets.cache_dir(cfg.storage.root, f"replay-{lay.key(cfg.seed)}")
        made = files.ensure(lay, Path(folder), cfg.seed)
        paths = tuple(made[p] for p in lay.paths if p in made)
        return datasets.Dataset(
            name=f"replay-{lay.key(cfg.seed)}",
            source="replay",
            location=str(folder),
            files=paths,
            labels=(0,) * len(paths),
            sizes=tuple(os.path.getsize(p) for p in paths),
            num_classes=1,
            allocated=sum(os.stat(p).st_blocks * 512 for p in paths),  # the holes take no space
        )

    def run_once(self, ctx: RunContext) -> dict:
        from jobs import owned
        from jobs.data import loading
        from jobs.workloads.replay import files, issue

        cfg = ctx.cfg
        t = trace_of(cfg)
        lay = files.layout(t.operations)
        made = dict(zip([p for p, r in zip(lay.paths, lay.read) if r], ctx.ds.files))
        names = {p: lay.name(i) for i, p in enumerate(lay.paths)}
        run_dir = f"{ctx.cell.cell_id}-{ctx.tag}"
        out = owned.tool_folder(cfg.storage.root) / OUT / run_dir
        p = issue.plan(t.operations, made, str(out), cfg.replay.concurrency, names)
        recorded = cfg.replay.mode == "recorded"
        if ctx.ds.store is not None:
            tally, seconds, skipped = self._on_store(ctx, p, run_dir, recorded)
            return _result(tally, seconds, p, skipped, device=None)
        if p.writes:  # made before the timed calls, and only when the trace wrote a file
            out = owned.under_tool_folder(cfg.storage.root, OUT, run_dir, setting="storage.root")
        rb0, _ = loading.read_counters()
        ctx.mark("start")
        try:
            tally, seconds = issue.run(p, recorded, threading.Event())
        finally:
            ctx.mark("end")
            if p.writes:
                shutil.rmtree(out, ignore_errors=True)  # the tool's own folder of this run's written files
        rb1, _ = loading.read_counters()
        return _result(tally, seconds, p, p.skipped, loading.delta(rb0, rb1))

    @staticmethod
    def _on_store(ctx: RunContext, p, run_dir: str, recorded: bool):
        """The run's reads and writes as requests to the cell's object store (``requests``)."""
        from jobs.storage.objectstore import objects, tier
        from jobs.workloads.replay import requests

        store = tier.opened(ctx.ds.store)
        key_of = dict(zip(ctx.ds.files, ctx.ds.objects))
        keys = [key_of.get(path) if path else None for path in p.read_paths]
        out = f"{store.endpoint.prefix}/{OUT}/{run_dir}"
        ctx.mark("start")
        try:
            tally, seconds, skipped = requests.run(p, store, keys, out, recorded)
        finally:
            ctx.mark("end")
            if p.writes:
                objects.delete_prefix(store.client, store.endpoint, out)  # the run's own objects
        return tally, seconds, p.skipped + skipped

    def describe(self, result: dict) -> str:
        ratio = result.get("replay_time_ratio")
        return (
            f"{result['replay_calls']:,} calls by {result['replay_threads']} thread(s) "
            f"in {result['seconds']:.2f} s"
            + (f" ({ratio:.2f}x the recorded time)" if ratio else "")
            + f", {result['mb_per_s']:.1f} MB/s"
        )


RECORDED_MAX_S = 24 * 3600  # the longest trace replay.mode=recorded replays at its own pace
BODY_MAX = 1 << 30  # on an object store, the largest read or write (a GET's or PUT's body is held in memory)


def _no_unbounded_calls(cfg, t) -> None:
    """Refuse what a run could not do in bounded time and memory: a recorded replay of more than a day,
    and, on an object store, a call whose body would not fit in memory."""
    ops = t.operations
    span = float((ops["start_s"] + ops["duration_s"]).max()) if len(ops) else 0.0
    if cfg.replay.mode == "recorded" and span > RECORDED_MAX_S:
        raise ConfigError(
            f"replay.trace={cfg.replay.trace}: its calls span {span / 3600:,.1f} h; replay.mode=recorded "
            f"replays up to {RECORDED_MAX_S // 3600} h at the trace's pace: use replay.mode=fast"
        )
    if backends.of(cfg.storage).requests:
        biggest = int(ops.loc[ops["operation"].isin(["read", "write"]), "size"].max() or 0)
        if biggest > BODY_MAX:
            raise ConfigError(
                f"replay.trace={cfg.replay.trace}: a call of {biggest:,} bytes; on storage="
                f"{cfg.storage.name} each is one GET or PUT whose body is held in memory, up to "
                f"{BODY_MAX:,}: replay it on a file-system tier"
            )


def _no_larger_than_the_tier(cfg, lay) -> None:
    """Refuse a trace whose file ends past the size of the tier's whole file system (a damaged trace, or an
    offset no file of that tier can reach): the made file could not be made there."""
    root = Path(cfg.storage.root)
    probe = next((p for p in (root, *root.parents) if p.exists()), None)
    if probe is None or cfg.storage.emulate is not None:  # an emulated tier: made when its cell starts
        return
    st = os.statvfs(probe)
    size = st.f_blocks * st.f_frsize
    i = max(range(len(lay.extents)), key=lay.extents.__getitem__, default=None)
    if i is not None and lay.extents[i] > size:
        raise ConfigError(
            f"replay.trace={cfg.replay.trace}: {lay.paths[i]} ends at byte {lay.extents[i]:,}, past the size "
            f"of storage={cfg.storage.name}'s whole file system ({size / 1e9:,.0f} GB); is the trace damaged?"
        )


def _result(tally, seconds: float, p, skipped: int, device: int | None) -> dict:
    return {
        "images": 0,
        "images_dropped": 0,
        # a byte the trace reads twice comes from the device once: a cold run reads each at least once
        "bytes_consumed": p.distinct_read,
        "bytes_read_device": device,  # on an object store: the server's disk reads (the runner's)
        "seconds": seconds,
        "mb_per_s": (tally.bytes_read + tally.bytes_written) / seconds / 1e6 if seconds > 0 else None,
        "replay_calls": tally.calls,
        "replay_reads": tally.reads,
        "replay_bytes_read": tally.bytes_read,
        "replay_writes": tally.writes,
        "replay_bytes_written": tally.bytes_written,
        "replay_calls_skipped": skipped,
        "replay_threads": len(p.threads),
        "replay_recorded_s": p.recorded_s,
        "replay_time_ratio": seconds / p.recorded_s if p.recorded_s > 0 else None,
    }
