"""Checkpoints of today's models: what N ranks of a data-, tensor- and pipeline-parallel job write at a
checkpoint (``checkpoint_model=<preset>``: parameters, precision, optimizer state, TP/PP/DP, ZeRO
stage), each rank a task of the cell, every rank's shard written with its real size and made durable,
then evicted and read back cold, every byte checked. MLPerf Storage's checkpointing metrics: save and
load duration are the slowest rank's, throughput is the bytes of all ranks over that duration.

A model too large for the tier is run in subset mode (``checkpoint.ranks_written=k``: the first k of
its N ranks write, as MLPerf Storage's subset runs do); the record names the ranks written. The shards
go to ``storage.root`` (any tier: an emulated one is built and throttled as for any cell), under the
tool's checkpoint folder, and are removed once read back unless ``checkpoint.keep=true``. Each rank
holds a lock on its folder while it runs; a later run removes the folders of killed runs
(``remove_killed``)."""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from jobs import workloads
from jobs.errors import ConfigError
from jobs.metrics import Metric, declare, of
from jobs.schema import WorkloadConf
from jobs.storage import backends
from jobs.workloads import Figure, RunContext, Workload, register
from jobs.workloads.shards.folders import PREFIX

log = logging.getLogger(__name__)
GB = 1_000_000_000
METRICS = tuple(
    declare(m)
    for m in (
        Metric(
            "save_duration_s",
            "s",
            "lower",
            "sharded checkpoint: the slowest rank's save, first write to its last fsync (MLPerf Storage)",
        ),
        Metric(
            "load_duration_s",
            "s",
            "lower",
            "sharded checkpoint: the slowest rank's cold load, first read to last byte "
            "checked (MLPerf Storage)",
        ),
        Metric(
            "save_throughput_gb_s",
            "GB/s",
            "higher",
            "sharded checkpoint: bytes of all ranks written / save_duration_s",
        ),
        Metric(
            "load_throughput_gb_s",
            "GB/s",
            "higher",
            "sharded checkpoint: bytes of all ranks read / load_duration_s",
        ),
        Metric(
            "checkpoint_gb",
            "GB",
            "",
            "sharded checkpoint: bytes the run's ranks wrote (all ranks', or the subset's)",
        ),
        Metric(
            "model_checkpoint_gb",
            "GB",
            "",
            "sharded checkpoint: the whole model's checkpoint, every rank's shard",
        ),
        Metric(
            "ranks_written",
            "ranks",
            "",
            "sharded checkpoint: ranks that wrote (subset mode: fewer than the model's)",
        ),
        Metric(
            "checkpoints_written",
            "checkpoints",
            "",
            "sharded checkpoint: checkpoints each rank wrote in the run, one after another "
            "(checkpoint.num_checkpoints_write; MLPerf Storage: 10)",
        ),
        Metric(
            "checkpoints_read",
            "checkpoints",
            "",
            "sharded checkpoint: checkpoints each rank read back cold after the writes "
            "(checkpoint.num_checkpoints_read; MLPerf Storage: 10)",
        ),
        Metric(
            "read_gap_s",
            "s",
            "",
            "sharded checkpoint, several checkpoints: from the last write's end to the first read's start, "
            "the page cache cleared between (the slowest rank's; MLPerf Storage: within 30 s)",
        ),
        Metric(
            "drain_duration_s",
            "s",
            "lower",
            "sharded checkpoint through the burst buffer: the slowest rank's copy of "
            "its shard from the fast tier to storage, durable and checked",
        ),
        Metric(
            "drain_throughput_gb_s",
            "GB/s",
            "higher",
            "sharded checkpoint through the burst buffer: bytes of all ranks / drain_duration_s",
        ),
    )
)
COMMON_RUN = ("seconds", "images_per_s", "mb_per_s", "bytes_read_syscall")


@dataclass
class ShardedCheckpointConf(WorkloadConf):
    # bytes per write and read request, MB (DLIO writes whole tensors; 16 MB is one large request)
    block_mb: float = 16.0


def _shape(cfg):
    from jobs.workloads.shards.shape import Shape

    return Shape.of(cfg.checkpoint.model)


@register
class ShardedCheckpoint(Workload):
    name = "sharded_checkpoint"
    schema = ShardedCheckpointConf
    metrics = (*METRICS, *of(*COMMON_RUN))
    record_keys = (
        "checkpoint_model",
        "model_ranks",
        "shard_ranks",
        "checkpoint_bytes_left",
        "dropped_files",
        "recovered",
        "save_each_duration_s",
        "load_each_duration_s",
    )
    needs_dataset = False
    shardable = True  # each rank a task of the cell
    in_tensorflow = False
    posix_traceable = False
    # an object store: each file of the shard an object (jobs/workloads/shards/objectio.py, through the
    # store's service), or DCP through s3torchconnector's S3StorageWriter and S3StorageReader, as the
    # framework's engine does it
    objects = True
    object_tasks = True  # each rank's task puts and gets its own objects
    figures = (
        Figure(
            "checkpoint_shards",
            "analysis.figures.shards:figure",
            "Sharded checkpoints: save and cold load per tier and model shape (MLPerf Storage's metrics)",
            order=10.5,
        ),
    )

    def check(self, cfg) -> None:
        ck = cfg.checkpoint
        if ck.model is None:
            raise ConfigError(
                "workload=sharded_checkpoint needs a model shape: checkpoint_model=<preset> (the presets "
                "in conf/checkpoint_model/, e.g. llama3_8b)"
            )
        s = _shape(cfg)
        if min(s.tp, s.pp, s.dp) < 1 or s.zero_stage not in (0, 1, 2, 3) or s.params <= 0:
            raise ConfigError(
                f"checkpoint_model={s.name}: tp, pp and dp must be at least 1, zero_stage 0-3, and the "
                "shape must give parameters"
            )
        tasks = cfg.platform.nodes * cfg.platform.tasks_per_node
        k = ck.ranks_written
        if k is not None and not 1 <= k <= s.ranks:
            raise ConfigError(
                f"checkpoint.ranks_written={k} must be between 1 and the {s.ranks} ranks of "
                f"checkpoint_model={s.name} (tp {s.tp} x pp {s.pp} x dp {s.dp})"
            )
        written = s.ranks if k is None else k
        if written != tasks:
            raise ConfigError(
                f"checkpoint_model={s.name} writes {written} ranks"
                + ("" if k is not None else f" (its tp {s.tp} x pp {s.pp} x dp {s.dp})")
                + f" but the cell runs {tasks} task(s): each rank is a task, so set platform.nodes x "
                f"platform.tasks_per_node to {written}"
                + ("" if k is not None else ", or write a subset with checkpoint.ranks_written=<the tasks>")
            )
        if ck.target not in ("slow", "burst_buffer"):
            raise ConfigError(
                f"checkpoint.target={ck.target}: workload=sharded_checkpoint writes to storage=<tier> "
                "(slow) or through the burst buffer (burst_buffer: checkpoint.fast, then drained to storage)"
            )
        self._many(cfg)
        if backends.of(cfg.storage).requests:
            self._on_store(cfg)
            self.engine(cfg).check_store(cfg)
        if not 0 < cfg.workload.block_mb <= 1024:
            raise ConfigError(
                f"workload.block_mb={cfg.workload.block_mb} must be between 0 and 1024 (MB per request)"
            )
        # the burst buffer first, as the shards reach it first (and its size is the config's, not the
        # disk's today); kept (checkpoint.keep=true), every run's shards stay on storage, while a burst
        # buffer's drain empties the fast tier
        if ck.target == "burst_buffer":
            self._space(cfg.checkpoint.fast, s, written, "checkpoint.fast")
        runs = cfg.warmup + cfg.repeats if ck.keep else 1
        self._space(cfg.storage, s, written, runs=runs, checkpoints=ck.num_checkpoints_write)

    def _many(self, cfg) -> None:
        """Several checkpoints a run (MLPerf Storage's 10 writes, then 10 reads): the reads take checkpoints
        the run wrote, on a folder of a tier, straight to storage, by an engine that can."""
        ck = cfg.checkpoint
        writes, reads = ck.num_checkpoints_write, ck.num_checkpoints_read
        if reads > writes:
            raise ConfigError(
                f"checkpoint.num_checkpoints_read={reads} reads back checkpoints the run wrote: at most "
                f"checkpoint.num_checkpoints_write={writes}"
            )
        if writes == 1:
            return
        where = (
            f"storage={cfg.storage.name} (an object store)"
            if backends.of(cfg.storage).requests
            else f"checkpoint.target={ck.target}"
            if ck.target != "slow"
            else None
            if getattr(self.engine(cfg), "MANY_CHECKPOINTS", False)
            else f"framework={cfg.framework.name}"
        )
        if where is not None:
            raise ConfigError(
                f"checkpoint.num_checkpoints_write={writes}: several checkpoints a run are written to a "
                f"folder of storage=<tier> with checkpoint.target=slow by framework=tensorflow's engine; "
                f"{where} writes one a run (checkpoint.num_checkpoints_write=1)"
            )

    @staticmethod
    def _on_store(cfg) -> None:
        """An object store: written straight to it (no burst buffer to it yet), by a service that can."""
        from jobs.storage.objectstore import services

        service, ability = services.get(cfg.storage.service), services.Abilities.SHARDED_CHECKPOINTS
        if ability not in service.can:
            able = [s.preset for s in services.able(ability)]
            raise ConfigError(
                f"workload=sharded_checkpoint with storage={cfg.storage.name} (storage.service="
                f"{service.name}): the ranks' writes in parts are not built for {service.title} yet; use "
                f"{' or '.join(able) or 'a file tier'}"
            )
        if cfg.checkpoint.target != "slow":
            raise ConfigError(
                f"checkpoint.target={cfg.checkpoint.target} with storage={cfg.storage.name}: the ranks write "
                "their shards straight to the store (checkpoint.target=slow); a burst buffer in front of it "
                "is not built yet"
            )

    @staticmethod
    def _space(tier, s, written: int, name: str = "storage", runs: int = 1, checkpoints: int = 1) -> None:
        """Refuse, before anything is written, a shape whose written ranks (those of all ``runs`` runs, when
        they are kept) do not fit on the tier: its root's disk, or the embedded server's, whose objects lie
        on its root (a user's endpoint: its space is not this machine's to count)."""
        if backends.of(tier).requests and tier.endpoint:
            return
        if tier.emulate is not None:
            free, where = tier.emulate.size_gb * GB, f"{name}'s emulated image"
        else:
            root = Path(tier.root)
            probe = next((p for p in (root, *root.parents) if p.exists()), None)
            if probe is None:
                return
            st = os.statvfs(probe)
            free, where = st.f_bavail * st.f_frsize, str(probe)
        one = s_bytes(s, written)
        if one * runs * checkpoints * 1.02 <= free:
            return
        if checkpoints > 1:
            raise ConfigError(
                f"checkpoint.num_checkpoints_write={checkpoints} holds every checkpoint of a run at once: "
                f"{checkpoints} x {_size(one)} ({written} of the {s.ranks} ranks of "
                f"checkpoint_model={s.name}){f' x {runs} kept runs' if runs > 1 else ''} = "
                f"{_size(one * runs * checkpoints)}, but "
                f"{where} has {_size(free)} free: write fewer checkpoints or ranks, or choose another storage"
            )
        if runs > 1:
            raise ConfigError(
                f"checkpoint.keep=true keeps every run's shards: {runs} runs (warmup + repeats) x "
                f"{_size(one)} ({written} of the {s.ranks} ranks of checkpoint_model={s.name}) = "
                f"{_size(one * runs)}, but {where} has {_size(free)} free: keep fewer runs, set "
                "checkpoint.keep=false, or choose another storage"
            )
        raise ConfigError(
            f"checkpoint_model={s.name}: {written} of its {s.ranks} ranks write {_size(one)}, "
            f"but {where} has {_size(free)} free: write fewer ranks "
            "(checkpoint.ranks_written=<k>, with as many tasks) or choose another storage"
        )

    def tiers(self, cfg) -> list:
        return (
            [cfg.storage, cfg.checkpoint.fast] if cfg.checkpoint.target == "burst_buffer" else [cfg.storage]
        )

    def run_once(self, ctx: RunContext) -> dict:
        from jobs import nodes
        from jobs.workloads.shards import shardio

        cfg = ctx.cfg
        s = _shape(cfg)
        model_rank = s.written(cfg.checkpoint.ranks_written)[ctx.rank]
        files = s.files(model_rank)
        size = sum(b for _, b in files)
        block = max(shardio.STAMP + 8, int(cfg.workload.block_mb * 1e6) // 8 * 8)
        content = shardio.Content(model_rank, cfg.seed, block)
        base = content.base()
        sums = [content.sha256(base, i, b) for i, (_, b) in enumerate(files)]  # before the timed save
        run_id = ctx.run_id or uuid.uuid4().hex[:12]  # shared by the run's tasks: one folder for the run
        name = f"{PREFIX}{ctx.cell.cell_id}_{ctx.tag}_{run_id}"
        if backends.of(cfg.storage).requests:
            t, left, removed = _on_store(ctx, name, model_rank, files, content, base)
        else:
            t, left, removed = _in_folders(ctx, name, model_rank, files, size, content, base, sums)
        save_s, drain_s, load_s = t["save_s"], t.get("drain_s"), t["load_s"]
        seconds = (
            ctx.marks["end"].t - ctx.marks["start"].t
            if "start" in ctx.marks and "end" in ctx.marks
            else save_s + load_s
        )
        tp, dp, pp = s.coordinates(model_rank)
        rank = {
            "rank": model_rank,
            "task": ctx.rank,
            "tp": tp,
            "pp": pp,
            "dp": dp,
            "bytes": size,
            "files": [{"name": n, "bytes": b, "sha256": h} for (n, b), h in zip(files, sums)],
            "save_s": save_s,
            "load_s": load_s,
            "save_gb_s": size / save_s / GB,
            "load_gb_s": size / load_s / GB,
            **({"drain_s": drain_s, "drain_gb_s": size / drain_s / GB} if drain_s is not None else {}),
            "write_device_bytes": t["write_device_bytes"],
            "read_device_bytes": t["read_device_bytes"],
            **{k: t[k] for k in ("save_each_s", "load_each_s", "read_gap_s", "cache_cleared") if k in t},
            "verified": True,
            "host": nodes.name(),
        }
        reads = len(t.get("load_each_s") or [None])
        return {
            "images": 0,
            "images_dropped": 0,
            "bytes_consumed": size * reads,
            "bytes_read_device": t["read_device_bytes"],
            "bytes_read_syscall": t["read_syscall_bytes"],
            "seconds": seconds,
            "images_per_s": 0.0,
            "mb_per_s": size * reads / max(seconds, 1e-9) / 1e6,
            **totals([rank], s),
            "checkpoint_model": _model_record(cfg, s),
            "model_ranks": s.ranks,
            "shard_ranks": [rank],
            "checkpoint_bytes_left": left,
            "recovered": removed,
        }

    def describe(self, result: dict) -> str:
        drained = (
            f", drained to storage in {result['drain_duration_s']:.2f} s "
            f"({result['drain_throughput_gb_s']:.2f} GB/s)"
            if result.get("drain_duration_s")
            else ""
        )
        model = result["checkpoint_model"]["name"]
        if result.get("checkpoints_written"):
            r = result
            return (
                f"{r['ranks_written']} of {r['model_ranks']} ranks of {model}: "
                f"{r['checkpoints_written']} checkpoints of {r['checkpoint_gb']:.2f} GB saved durable, "
                f"{r['save_duration_s']:.2f} s each ({r['save_throughput_gb_s']:.2f} GB/s), then "
                f"{r['checkpoints_read']} loaded cold {r['read_gap_s']:.1f} s after the last write, "
                f"{r['load_duration_s']:.2f} s each ({r['load_throughput_gb_s']:.2f} GB/s), "
                "every byte checked"
            )
        return (
            f"{result['ranks_written']} of {result['model_ranks']} ranks of {model}: "
            f"saved {result['checkpoint_gb']:.2f} GB durable in {result['save_duration_s']:.2f} s "
            f"({result['save_throughput_gb_s']:.2f} GB/s){drained}, "
            f"loaded back in {result['load_duration_s']:.2f} s "
            f"({result['load_throughput_gb_s']:.2f} GB/s), every byte checked"
        )


def _in_folders(ctx: RunContext, name: str, model_rank: int, files, size: int, content, base, sums):
    """The rank's phases in its folders on the tiers: (timings, bytes left, killed runs' folders removed)."""
    from jobs.workloads.checkpoint.saving import ckpt_dir
    from jobs.workloads.shards import folders, shardio

    cfg = ctx.cfg
    keep = cfg.checkpoint.keep
    bb = cfg.checkpoint.target == "burst_buffer"  # written to the fast tier, then drained to storage
    held = [folders.claim(ckpt_dir(Path(cfg.checkpoint.fast.root)) / name, model_rank, keep)] if bb else []
    held.append(folders.claim(ckpt_dir(Path(cfg.storage.root)) / name, model_rank, keep))
    ok = False
    on_disk = files  # what the rank's folders hold: the shard's files, or DCP's
    try:
        engine = workloads.get(cfg.workload.kind).engine(cfg)
        t, on_disk = engine.on_files(ctx, [m for m, _, _ in held], files, content, base, sums)
        ok = True
    except shardio.TierFull as e:
        raise _full(cfg, ctx, e, size, bb) from None
    finally:
        left = sum(folders.release(m, lk, keep, on_disk, succeeded=ok) for m, lk, _ in held)
    return t, left, sorted({x for _, _, r in held for x in r})


def _on_store(ctx: RunContext, name: str, model_rank: int, files, content, base):
    """The rank's phases on the cell's object store (``storage=s3`` or ``=azure``): its shard's objects under
    ``<prefix>/checkpoints/<run>/rank<r>``, each key recorded in the rank's own local record before it is
    written (``objectio.begin``), deleted after the load unless ``checkpoint.keep=true``, and whatever the
    run had put (its open uploads aborted) when it fails; rank 0 first removes what killed runs on this
    host recorded. Nothing the bucket says is taken as proof of whose an object is. Returns (timings,
    bytes left, the killed runs' ranks removed)."""
    from jobs.storage.objectstore import tier
    from jobs.workloads.shards import objectio

    store = tier.opened(ctx.ds.store)
    j, removed = objectio.begin(ctx, store, name, model_rank)
    prefix = f"{store.endpoint.prefix}/checkpoints/{name}/rank{model_rank:05d}"
    try:
        engine = workloads.get(ctx.cfg.workload.kind).engine(ctx.cfg)
        t, written = engine.on_objects(ctx, store, prefix, files, content, base, j)
    except BaseException:
        objectio.finish(store, j, keep=False, failed=True)
        raise
    keep = ctx.cfg.checkpoint.keep
    objectio.finish(store, j, keep)
    return t, sum(b for _, b in written) if keep else 0, removed


class TierFullError(RuntimeError):
    """A tier filled up under a run's shard; the message names the tier, its space and what was removed."""


def _full(cfg, ctx: RunContext, e, size: int, bb: bool) -> TierFullError:
    """The one-line error of a run whose shard found its tier full (its partial files go as it is raised)."""
    fast = bb and Path(e.folder).is_relative_to(cfg.checkpoint.fast.root)  # the save's tier, not the drain's
    tier, key = (cfg.checkpoint.fast, "storage@checkpoint.fast") if fast else (cfg.storage, "storage")
    st = os.statvfs(e.folder)
    what = f"run {ctx.run}" if ctx.run > 0 else f"warm-up {1 - ctx.run}"
    return TierFullError(
        f"{key}={tier.name}: no space left on {tier.root} ({_size(st.f_bavail * st.f_frsize)} free of "
        f"{_size(st.f_blocks * st.f_frsize)}) after {_size(e.written)} of {what}'s {_size(size)} shard; "
        "its partial files are removed and nothing of the run is kept"
    )


def _size(b: float) -> str:
    return f"{b / GB:.1f} GB" if b >= GB else f"{b / 1e6:.1f} MB"


def s_bytes(s, written: int) -> int:
    return sum(s.rank_bytes(r) for r in s.written(written))


def totals(ranks: list[dict], s) -> dict:
    """MLPerf Storage's checkpoint metrics from per-rank figures: durations the slowest rank's, throughput
    the bytes of every rank over that duration."""
    size = sum(r["bytes"] for r in ranks)
    save, load = max(r["save_s"] for r in ranks), max(r["load_s"] for r in ranks)
    drain = max(r["drain_s"] for r in ranks) if all("drain_s" in r for r in ranks) else None
    many = {}
    if all("save_each_s" in r for r in ranks):  # several checkpoints: DLIO's mean of each one's slowest rank
        saves, loads = _slowest(ranks, "save_each_s"), _slowest(ranks, "load_each_s")
        save, load = sum(saves) / len(saves), sum(loads) / len(loads)
        many = {
            "checkpoints_written": len(saves),
            "checkpoints_read": len(loads),
            "read_gap_s": max(r["read_gap_s"] for r in ranks),
            "save_each_duration_s": saves,
            "load_each_duration_s": loads,
        }
    return {
        **many,
        "save_duration_s": save,
        "load_duration_s": load,
        "save_throughput_gb_s": size / save / GB,
        "load_throughput_gb_s": size / load / GB,
        "checkpoint_gb": size / GB,
        "model_checkpoint_gb": s.total_bytes / GB,
        "ranks_written": len(ranks),
        "drain_duration_s": drain,
        "drain_throughput_gb_s": size / drain / GB if drain else None,
    }


def _slowest(ranks: list[dict], key: str) -> list[float]:
    """Each checkpoint's slowest rank's duration (``key``: every rank's list, one per checkpoint)."""
    return [max(each) for each in zip(*(r[key] for r in ranks))]


def merge(results: list[dict]) -> dict:
    """A multi-task run's checkpoint figures from its tasks' (one rank each)."""
    from jobs.workloads.shards.shape import Shape

    ranks = sorted((r for res in results for r in res["shard_ranks"]), key=lambda r: r["rank"])
    first = results[0]
    s = Shape.of(first["checkpoint_model"])
    return {
        **totals(ranks, s),
        "shard_ranks": ranks,
        "checkpoint_model": first["checkpoint_model"],
        "model_ranks": first["model_ranks"],
        "checkpoint_bytes_left": sum(r["checkpoint_bytes_left"] for r in results),
        "recovered": sorted({x for r in results for x in r.get("recovered") or []}),
    }


def _model_record(cfg, s) -> dict:
    from dataclasses import asdict

    return {**asdict(s), "parameters": s.params, "source": cfg.checkpoint.model.source}
