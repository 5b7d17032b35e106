"""The shard workload's engine for framework=tensorflow (``Workload.engine``): each rank's files written and
read as a framework writes them, on a tier's folders (``shardio``) or as objects on the cell's store
(``objectio``, through the store's service)."""

from __future__ import annotations

from pathlib import Path

from jobs.workloads.shards import objectio, shardio

MANY_CHECKPOINTS = True  # a run can write several checkpoints, then read them back (shardio.many_phases)


def on_files(ctx, folders: list[Path], files, content: shardio.Content, base: bytes, sums: list[str]):
    """(timings, the files the rank's folders hold) of the rank's ``shardio.phases`` on its folders, or of
    its ``many_phases`` where the run writes more than one checkpoint."""
    ck = ctx.cfg.checkpoint
    if ck.num_checkpoints_write > 1 or ck.num_checkpoints_read > 1:
        held = [f for each in shardio.checkpoint_files(files, ck.num_checkpoints_write) for f in each]
        t = shardio.many_phases(
            ctx, folders[-1], files, content, base, ck.num_checkpoints_write, ck.num_checkpoints_read
        )
        return t, held
    return shardio.phases(ctx, folders, files, content, base, sums), files


def on_objects(ctx, store, prefix: str, files, content: shardio.Content, base: bytes, journal):
    """(timings, the objects written) of the rank's ``objectio.phases`` on the cell's object store."""
    return objectio.phases(ctx, store, prefix, files, content, base, journal), files


def check_store(cfg) -> None:
    """Nothing beyond the store's own checks: its service makes the requests (``objectio``)."""
