"""Checkpoints of today's models: what N ranks of a data-, tensor- and pipeline-parallel job write at a
checkpoint (``checkpoint_model=<preset>``: parameters, precision, optimizer state, TP/PP/DP, ZeRO
stage), each rank a task of the cell, every rank's shard written with its real size and made durable,
then evicted and read back cold, every byte checked. MLPerf Storage's checkpointing metrics: save and
load duration are the slowest rank's, throughput is the bytes of all ranks over that duration.

A model too large for the tier is run in subset mode (``checkpoint.ranks_written=k``: the first k of
its N ranks write, as MLPerf Storage's subset runs do); the record names the ranks written. The shards
go to ``storage.root`` (any tier: an emulated one is built and throttled as for any cell), under the
tool's checkpoint folder, and are removed once read back unless ``checkpoint.keep=true``. Each rank
holds a lock on its folder while it runs; a later run removes the folders of killed runs (``remove_killed``)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from jobs.errors import ConfigError
from jobs.metrics import Metric, declare, of
from jobs.workloads import Figure, RunContext, Workload, register
from jobs.workloads.schema import WorkloadConf

log = logging.getLogger(__name__)
GB = 1_000_000_000
PREFIX = "shards_"  # a run's folder under the tier's checkpoint folder: shards_<cell id>_<run>_<run id>
METRICS = tuple(declare(m) for m in (
    Metric("save_duration_s", "s", "lower", "sharded checkpoint: the slowest rank's save, first write to its last fsync "
           "(MLPerf Storage)"),
    Metric("load_duration_s", "s", "lower", "sharded checkpoint: the slowest rank's cold load, first read to last byte "
           "checked (MLPerf Storage)"),
    Metric("save_throughput_gb_s", "GB/s", "higher", "sharded checkpoint: bytes of all ranks written / save_duration_s"),
    Metric("load_throughput_gb_s", "GB/s", "higher", "sharded checkpoint: bytes of all ranks read / load_duration_s"),
    Metric("checkpoint_gb", "GB", "", "sharded checkpoint: bytes the run's ranks wrote (all ranks', or the subset's)"),
    Metric("model_checkpoint_gb", "GB", "", "sharded checkpoint: the whole model's checkpoint, every rank's shard"),
    Metric("ranks_written", "ranks", "", "sharded checkpoint: ranks that wrote (subset mode: fewer than the model's)"),
))
COMMON_RUN = ("seconds", "images_per_s", "mb_per_s", "bytes_read_syscall")


@dataclass
class ShardedCheckpointConf(WorkloadConf):
    block_mb: float = 16.0  # bytes per write and read request, MB (DLIO writes whole tensors; 16 MB is one large request)


def _shape(cfg):
    from jobs.workloads.shards.shape import Shape

    return Shape.of(cfg.checkpoint.model)


@register
class ShardedCheckpoint(Workload):
    name = "sharded_checkpoint"
    schema = ShardedCheckpointConf
    metrics = (*METRICS, *of(*COMMON_RUN))
    record_keys = ("checkpoint_model", "model_ranks", "shard_ranks", "checkpoint_bytes_left", "dropped_files", "recovered")
    needs_dataset = False
    shardable = True  # each rank a task of the cell
    in_tensorflow = False
    posix_traceable = False
    figures = (Figure("checkpoint_shards", "analysis.shards:figure",
                      "Sharded checkpoints: save and cold load per tier and model shape (MLPerf Storage's metrics)",
                      order=10.5),)

    def check(self, cfg) -> None:
        ck = cfg.checkpoint
        if ck.get("model") is None:
            raise ConfigError("workload=sharded_checkpoint needs a model shape: checkpoint_model=<preset> (the presets "
                              "in conf/checkpoint_model/, e.g. llama3_8b)")
        s = _shape(cfg)
        if min(s.tp, s.pp, s.dp) < 1 or s.zero_stage not in (0, 1, 2, 3) or s.params <= 0:
            raise ConfigError(f"checkpoint_model={s.name}: tp, pp and dp must be at least 1, zero_stage 0-3, and the "
                              "shape must give parameters")
        tasks = int(cfg.platform.get("nodes") or 1) * int(cfg.platform.get("tasks_per_node") or 1)
        k = ck.get("ranks_written")
        if k is not None and not 1 <= int(k) <= s.ranks:
            raise ConfigError(f"checkpoint.ranks_written={k} must be between 1 and the {s.ranks} ranks of "
                              f"checkpoint_model={s.name} (tp {s.tp} x pp {s.pp} x dp {s.dp})")
        written = s.ranks if k is None else int(k)
        if written != tasks:
            raise ConfigError(f"checkpoint_model={s.name} writes {written} ranks"
                              + ("" if k is not None else f" (its tp {s.tp} x pp {s.pp} x dp {s.dp})")
                              + f" but the cell runs {tasks} task(s): each rank is a task, so set platform.nodes x "
                              f"platform.tasks_per_node to {written}" + ("" if k is not None else
                              ", or write a subset with checkpoint.ranks_written=<the tasks>"))
        if str(getattr(ck.target, "value", ck.target)) != "slow":
            raise ConfigError("workload=sharded_checkpoint writes to storage=<tier> (storage.root); "
                              "leave checkpoint.target=slow (the burst buffer is not built for shards yet)")
        if not 0 < float(cfg.workload.block_mb) <= 1024:
            raise ConfigError(f"workload.block_mb={cfg.workload.block_mb} must be between 0 and 1024 (MB per request)")
        self._space(cfg, s, written)

    @staticmethod
    def _space(cfg, s, written: int) -> None:
        """Refuse, before anything is written, a shape whose written ranks do not fit on the tier."""
        if cfg.storage.get("emulate") is not None:
            need, free, where = s_bytes(s, written), float(cfg.storage.emulate.size_gb) * GB, "the emulated tier's image"
        else:
            root = Path(str(cfg.storage.root))
            probe = next((p for p in (root, *root.parents) if p.exists()), None)
            if probe is None:
                return
            st = os.statvfs(probe)
            need, free, where = s_bytes(s, written), st.f_bavail * st.f_frsize, str(probe)
        if need * 1.02 > free:
            raise ConfigError(f"checkpoint_model={s.name}: {written} of its {s.ranks} ranks write {need / GB:.1f} GB, "
                              f"but {where} has {free / GB:.1f} GB free: write fewer ranks "
                              "(checkpoint.ranks_written=<k>, with as many tasks) or choose another storage")

    def tiers(self, cfg) -> list:
        return [cfg.storage]

    def run_once(self, ctx: RunContext) -> dict:
        from jobs.execution import nodes
        from jobs.plan import cell_id
        from jobs.storage import cache
        from jobs.workloads.checkpoint.recovery import write_run_facts
        from jobs.workloads.checkpoint.saving import ckpt_dir
        from jobs.workloads.shards import shardio

        cfg = ctx.cfg
        s = _shape(cfg)
        model_rank = s.written(cfg.checkpoint.get("ranks_written"))[ctx.rank]
        files = s.files(model_rank)
        size = sum(b for _, b in files)
        block = max(shardio.STAMP + 8, int(float(cfg.workload.block_mb) * 1e6) // 8 * 8)
        content = shardio.Content(model_rank, int(cfg.seed), block)
        base = content.base()
        sums = [content.sha256(base, i, b) for i, (_, b) in enumerate(files)]  # before the timed save
        run_id = ctx.run_id or uuid.uuid4().hex[:12]  # shared by the run's tasks: one folder for the run
        run_dir = ckpt_dir(Path(str(cfg.storage.root))) / f"{PREFIX}{cell_id(ctx.config)}_{ctx.tag}_{run_id}"
        keep = bool(cfg.checkpoint.get("keep"))
        mine, lock, removed = _claim(run_dir, model_rank, keep)
        try:
            _, w0, _ = shardio.io_bytes()
            ctx.mark("start")  # every rank's save starts together (the tasks' barrier)
            save_s = shardio.write(mine, files, content, base)
            _, w1, _ = shardio.io_bytes()
            ctx.barrier("saved")  # MLPerf: every rank has written before any reads
            cache.evict([str(mine / n) for n, _ in files])
            ctx.barrier("evicted")
            r2, _, rc0 = shardio.io_bytes()
            load_s = shardio.read(mine, files, content, base)
            r3, _, rc1 = shardio.io_bytes()
            ctx.mark("end")
        finally:
            if keep:
                write_run_facts(mine, keep=True, finished=True)
            lock.release()
            left = 0 if keep else _remove(mine, run_dir)
        if keep:
            left = sum(b for n, b in files if (mine / n).exists())
        read_device = None if r2 is None or r3 is None else r3 - r2
        seconds = ctx.marks["end"].t - ctx.marks["start"].t if "start" in ctx.marks and "end" in ctx.marks else save_s + load_s
        tp, dp, pp = s.coordinates(model_rank)
        rank = {"rank": model_rank, "task": ctx.rank, "tp": tp, "pp": pp, "dp": dp, "bytes": size,
                "files": [{"name": n, "bytes": b, "sha256": h} for (n, b), h in zip(files, sums)],
                "save_s": save_s, "load_s": load_s, "save_gb_s": size / save_s / GB, "load_gb_s": size / load_s / GB,
                "write_device_bytes": None if w0 is None or w1 is None else w1 - w0, "read_device_bytes": read_device,
                "verified": True, "host": nodes.name()}
        return {
            "images": 0, "images_dropped": 0, "bytes_consumed": size, "bytes_read_device": read_device,
            "bytes_read_syscall": None if rc0 is None or rc1 is None else rc1 - rc0,
            "seconds": seconds, "images_per_s": 0.0, "mb_per_s": size / max(seconds, 1e-9) / 1e6,
            **totals([rank], s), "checkpoint_model": _model_record(cfg, s), "model_ranks": s.ranks,
            "shard_ranks": [rank], "checkpoint_bytes_left": left, "recovered": removed,
        }

    def describe(self, result: dict) -> str:
        return (f"{result['ranks_written']} of {result['model_ranks']} ranks of {result['checkpoint_model']['name']}: "
                f"saved {result['checkpoint_gb']:.2f} GB durable in {result['save_duration_s']:.2f} s "
                f"({result['save_throughput_gb_s']:.2f} GB/s), loaded back in {result['load_duration_s']:.2f} s "
                f"({result['load_throughput_gb_s']:.2f} GB/s), every byte checked")


def s_bytes(s, written: int) -> int:
    return sum(s.rank_bytes(r) for r in s.written(written))


def totals(ranks: list[dict], s) -> dict:
    """MLPerf Storage's checkpoint metrics from per-rank figures: durations the slowest rank's, throughput
    the bytes of every rank over that duration."""
    size = sum(r["bytes"] for r in ranks)
    save, load = max(r["save_s"] for r in ranks), max(r["load_s"] for r in ranks)
    return {"save_duration_s": save, "load_duration_s": load, "save_throughput_gb_s": size / save / GB,
            "load_throughput_gb_s": size / load / GB, "checkpoint_gb": size / GB, "model_checkpoint_gb": s.total_bytes / GB,
            "ranks_written": len(ranks)}


def merge(results: list[dict]) -> dict:
    """A multi-task run's checkpoint figures from its tasks' (one rank each)."""
    from jobs.workloads.shards.shape import Shape

    ranks = sorted((r for res in results for r in res["shard_ranks"]), key=lambda r: r["rank"])
    first = results[0]
    s = Shape.of(first["checkpoint_model"])
    return {**totals(ranks, s), "shard_ranks": ranks, "checkpoint_model": first["checkpoint_model"],
            "model_ranks": first["model_ranks"], "checkpoint_bytes_left": sum(r["checkpoint_bytes_left"] for r in results),
            "recovered": sorted({x for r in results for x in r.get("recovered") or []})}


def _model_record(cfg, s) -> dict:
    from dataclasses import asdict

    return {**asdict(s), "parameters": s.params, "source": str(cfg.checkpoint.model.get("source") or "")}


def _claim(run_dir: Path, model_rank: int, keep: bool):
    """(this rank's new folder, the lock it holds on it while its shard exists, the killed runs' folders
    removed first): a later run's ``remove_killed`` leaves a held folder alone."""
    from jobs.workloads.checkpoint.recovery import RunLock, write_run_facts

    removed = remove_killed(run_dir.parent)
    if removed:
        log.warning("removed the shards of runs that were killed before they could (no live run holds them): %s",
                    ", ".join(removed))
    mine = run_dir / f"rank{model_rank:05d}"
    lock = RunLock(mine, new=True)
    write_run_facts(mine, keep=keep, finished=False)  # only now: a folder without its facts is never removed
    return mine, lock, removed


RANK_DIR = re.compile(r"rank\d{5}")


def remove_killed(root: Path) -> list[str]:
    """The rank folders under the tool's checkpoint folder ``root`` that a killed sharded run left (SIGKILL, a
    lost node): named like a run's (``shards_*/rankNNNNN``), holding the facts a run writes once it holds the
    folder's lock, not kept (``checkpoint.keep=false``), not finished, and no live process holding that lock.
    Each goes, and its run's folder once empty. Anything else (another user's files, a kept run, a live
    run's folder, a folder whose run has not yet written its facts) is left. Returns ``run/rank`` names."""
    from jobs.workloads.checkpoint.recovery import alive, read_run_facts

    out = []
    if not root.is_dir():
        return out
    for run_dir in sorted(d for d in root.glob(f"{PREFIX}*") if d.is_dir() and not d.is_symlink()):
        for rank in sorted(r for r in run_dir.iterdir() if RANK_DIR.fullmatch(r.name) and r.is_dir() and not r.is_symlink()):
            facts = read_run_facts(rank)
            if not facts or facts.get("keep") or facts.get("finished") or alive(rank):
                continue
            shutil.rmtree(rank, ignore_errors=True)
            out.append(f"{run_dir.name}/{rank.name}")
        with contextlib.suppress(OSError):
            run_dir.rmdir()  # only when empty
    return out


def _remove(mine: Path, run_dir: Path) -> int:
    """This rank's shard folder, gone; the run's folder too once no rank's is left. Only the tool's own
    folders (named by this run) are touched. Returns the bytes left (0)."""
    if mine.is_dir() and not mine.is_symlink():
        shutil.rmtree(mine)
    try:
        run_dir.rmdir()
    except OSError:  # another rank's folder is still there (it removes the run's folder after its own)
        pass
    return 0

