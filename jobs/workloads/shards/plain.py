"""The shard workload's engine for framework=tensorflow (``Workload.engine``): each rank's files written and
read as a framework writes them, on a tier's folders (``shardio``) or as objects on the cell's store
(``objectio``, boto3)."""

from __future__ import annotations

from pathlib import Path

from jobs.workloads.shards import objectio, shardio


def on_files(ctx, folders: list[Path], files, content: shardio.Content, base: bytes, sums: list[str]):
    """(timings, the files the rank's folders hold) of the rank's ``shardio.phases`` on its folders."""
    return shardio.phases(ctx, folders, files, content, base, sums), files


def on_objects(ctx, store, prefix: str, files, content: shardio.Content, base: bytes, journal):
    """(timings, the objects written) of the rank's ``objectio.phases`` on the cell's object store."""
    return objectio.phases(ctx, store, prefix, files, content, base, journal), files


def check_store(cfg) -> None:
    """Nothing beyond the store's own checks: boto3 is the store's client."""
