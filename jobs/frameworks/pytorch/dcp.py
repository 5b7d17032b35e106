"""One rank's checkpoint shard written and read by PyTorch's ``torch.distributed.checkpoint``
(``framework=pytorch``): the rank's state dict (one uint8 tensor per file of its shard, holding the bytes
``shardio`` would write: the rank's stamped blocks) saved with DCP's ``FileSystemWriter`` into the rank's
folder (``sync_files``: every file fsynced; then the folder), and loaded back cold with its
``FileSystemReader`` into fresh tensors, every byte compared with what was saved.

Each rank saves alone (``no_dist=True``): its folder is a DCP checkpoint of its own (``.metadata`` and
``__0_0.distcp``), as the tool keeps one folder per rank under its lock. The ranks start and end each phase
together (the run's barriers), so the save and load durations are the slowest rank's, as MLPerf Storage
measures them; DCP's collective planning across ranks (one ``.metadata`` for the whole job) is not done."""

from __future__ import annotations

import contextlib
import hashlib
import time
import warnings
from pathlib import Path

from jobs.data import loading
from jobs.workloads.shards import shardio


def state(files: list[tuple[str, int]], content: shardio.Content, base: bytes) -> dict:
    """The rank's state dict: per file of its shard, a uint8 tensor of the bytes ``shardio.write`` writes."""
    import numpy as np
    import torch

    out = {}
    for file_no, (name, size) in enumerate(files):
        buf = np.empty(size, dtype=np.uint8)
        block = np.frombuffer(base, dtype=np.uint8)
        for k, off in enumerate(range(0, size, content.block)):
            n = min(content.block, size - off)
            buf[off : off + n] = block[:n]
            stamp = np.frombuffer(content.stamp(file_no, k), dtype=np.uint8)[: min(shardio.STAMP, n)]
            buf[off : off + len(stamp)] = stamp
        out[name.removesuffix(".bin")] = torch.from_numpy(buf)
    return out


@contextlib.contextmanager
def _alone():
    """DCP warns on every call made without a process group; a rank here saves alone on purpose."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield


def save(folder: Path, tensors: dict) -> float:
    """DCP's save of ``tensors`` into ``folder`` (fsync per file, then of the folder, nothing overwritten);
    seconds taken."""
    import torch.distributed.checkpoint as dcp

    t0 = time.perf_counter()
    writer = dcp.FileSystemWriter(folder, sync_files=True, overwrite=False)
    with _alone():
        dcp.save(tensors, storage_writer=writer, no_dist=True)
    shardio._fsync_folder(folder)
    return time.perf_counter() - t0


def load(folder: Path, saved: dict) -> float:
    """DCP's load of the checkpoint in ``folder`` into fresh tensors, each compared with ``saved``; seconds
    taken. Raises shardio.ShardError on a difference."""
    import torch
    import torch.distributed.checkpoint as dcp

    t0 = time.perf_counter()
    fresh = {k: torch.empty_like(v) for k, v in saved.items()}
    with _alone():
        dcp.load(fresh, storage_reader=dcp.FileSystemReader(folder), no_dist=True)
    for k, v in saved.items():
        if not torch.equal(fresh[k], v):
            raise shardio.ShardError(f"{folder}: tensor {k} loaded back differs from what was saved")
    return time.perf_counter() - t0


def on_disk(folder: Path) -> list[tuple[str, int]]:
    """(name, bytes) of the files DCP wrote in ``folder`` (the run's facts and lock left out)."""
    return sorted(
        (p.name, p.stat().st_size)
        for p in folder.iterdir()
        if p.is_file() and not p.is_symlink() and (p.name == ".metadata" or p.suffix == ".distcp")
    )


def sha256(folder: Path, files: list[tuple[str, int]]) -> list[str]:
    out = []
    for name, _ in files:
        h = hashlib.sha256()
        with open(folder / name, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        out.append(h.hexdigest())
    return out


def phases(ctx, folders: list[Path], files: list[tuple[str, int]], content, base: bytes) -> dict:
    """``shardio.phases`` with DCP's writer and reader: save into ``folders[0]``; through the burst buffer
    the drain of DCP's files to ``folders[1]`` (checked by sha256); then, evicted, the cold load."""
    from jobs.storage import cache

    tensors = state(files, content, base)
    _, w0, _ = shardio.io_bytes()
    ctx.mark("start")
    out = {"save_s": save(folders[0], tensors)}
    _, w1, _ = shardio.io_bytes()
    written = on_disk(folders[0])
    ctx.barrier("saved")
    if len(folders) > 1:
        sums = sha256(folders[0], written)  # from the page cache, between the timed phases
        out["drain_s"] = shardio.drain(folders[0], folders[1], written, sums, content.block)
        ctx.barrier("drained")
    last = folders[-1]
    cache.evict([str(last / n) for n, _ in written])
    ctx.barrier("evicted")
    r2, _, rc0 = shardio.io_bytes()
    out["load_s"] = load(last, tensors)
    r3, _, rc1 = shardio.io_bytes()
    ctx.mark("end")
    return {
        **out,
        "files_written": written,
        "write_device_bytes": None if w0 is None or w1 is None else w1 - w0,
        "read_device_bytes": None if r2 is None or r3 is None else r3 - r2,
        "read_syscall_bytes": loading.delta(rc0, rc1),
    }


def _s3_client(store):
    """s3torchconnector's client for the cell's store (path-style, no retries: a failed request fails the
    run); the embedded server's keys are lent to the environment around its use (``s3map.credentials``)."""
    from s3torchconnector import S3ClientConfig
    from s3torchconnector._s3client import S3Client

    return S3Client(
        store.endpoint.region,
        endpoint=store.endpoint.url,
        s3client_config=S3ClientConfig(force_path_style=True, max_attempts=1),
    )


def _recording(journal):
    """s3torchconnector's DCP file system, each key it writes (a stream's, a rename's target) recorded in
    ``journal`` before its first request: the CRT's multipart uploads never show their IDs, and the
    record's keys are what a clean-up after a kill aborts uploads on and deletes (``journal.clean``)."""
    import contextlib

    from s3torchconnector.dcp import S3FileSystem

    def key(path) -> str:  # s3://<bucket>/<key>
        return str(path).removeprefix("s3://").split("/", 1)[1]

    class Recording(S3FileSystem):
        @contextlib.contextmanager
        def create_stream(self, path, mode: str):
            if mode == "wb":
                journal.put(key(path))
            with super().create_stream(path, mode) as stream:
                yield stream

        def rename(self, old_path, new_path) -> None:
            journal.put(key(new_path))
            super().rename(old_path, new_path)

    return Recording


def _on(io, store, prefix: str, journal=None):
    """DCP's S3 writer or reader (``io``) at ``s3://<bucket>/<prefix>`` of the cell's store: its file
    system given the store's endpoint, which the class takes no other way (a writer's records every key
    in ``journal`` first)."""
    from s3torchconnector.dcp import S3FileSystem

    url = f"s3://{store.endpoint.bucket}/{prefix}"
    it = io(store.endpoint.region, url)
    fs = S3FileSystem if journal is None else _recording(journal)
    it.fs = fs(store.endpoint.region, s3_client=_s3_client(store))
    it.path = it.fs.init_path(url)
    return it


def on_store(ctx, store, prefix: str, files: list[tuple[str, int]], content, base: bytes, journal) -> dict:
    """``phases`` on the cell's object store (``storage=s3``): the rank's state dict saved by DCP through
    s3torchconnector's ``S3StorageWriter`` under ``prefix`` (durable once every PUT was answered), every rank
    saved, the embedded server's files evicted, then loaded back cold by its ``S3StorageReader``, every
    tensor compared. The device bytes are the server's reads during the load."""
    import torch
    import torch.distributed.checkpoint as dcp
    from s3torchconnector.dcp import S3StorageReader, S3StorageWriter

    from jobs.frameworks.pytorch.loader import s3map
    from jobs.storage import cache
    from jobs.storage.objectstore import objects
    from jobs.workloads.shards import objectio

    tensors = state(files, content, base)
    with s3map.credentials(ctx.ds):
        ctx.mark("start")
        t0 = time.perf_counter()
        with _alone():
            dcp.save(tensors, storage_writer=_on(S3StorageWriter, store, prefix, journal), no_dist=True)
        out = {"save_s": time.perf_counter() - t0}
        ctx.barrier("saved")
        there = objects.sizes_under(store.client, store.endpoint, prefix)
        ours = set(journal.read().keys)  # what DCP wrote: not whatever else lies under the prefix
        written = sorted((k.rsplit("/", 1)[1], n) for k, n in there.items() if k in ours)
        cache.evict(store.server_files())
        ctx.barrier("evicted")
        fresh = {k: torch.empty_like(v) for k, v in tensors.items()}
        with objectio.server_reads(ctx, store) as reads:
            t0 = time.perf_counter()
            with _alone():
                dcp.load(fresh, storage_reader=_on(S3StorageReader, store, prefix), no_dist=True)
            _same(fresh, tensors, f"s3://{store.endpoint.bucket}/{prefix}")
            out["load_s"] = time.perf_counter() - t0
        ctx.mark("end")
    return {
        **out,
        "files_written": written,
        "write_device_bytes": None,
        "read_device_bytes": reads[0],
        "read_syscall_bytes": None,
    }


def _same(fresh: dict, saved: dict, where: str) -> None:
    import torch

    for k, v in saved.items():
        if not torch.equal(fresh[k], v):
            raise shardio.ShardError(f"{where}: tensor {k} loaded back differs from what was saved")


# The shard workload's engine calls (``Workload.engine``) for framework=pytorch.


def on_files(ctx, folders: list[Path], files, content, base: bytes, sums: list[str]):
    """(timings, the files DCP wrote) of the rank's ``phases`` on its folders (DCP keeps its own
    checksums: ``sums`` is the plain writer's)."""
    t = phases(ctx, folders, files, content, base)
    return t, t.pop("files_written")


def on_objects(ctx, store, prefix: str, files, content, base: bytes, journal):
    """(timings, the objects DCP wrote) of the rank's phases on the cell's object store (``on_store``)."""
    t = on_store(ctx, store, prefix, files, content, base, journal)
    return t, t.pop("files_written")


def check_store(cfg) -> None:
    """DCP's S3 writer speaks the services s3torchconnector does, and needs its dcp extra (``tenacity``)."""
    import importlib.util

    from jobs.errors import ConfigError
    from jobs.storage.objectstore import clients, services

    writer = clients.get("s3torchconnector")
    if str(cfg.storage.service) not in writer.services:
        raise ConfigError(
            f"storage={cfg.storage.name} framework={cfg.framework.name}: DCP writes through "
            f"{writer.name}'s S3StorageWriter, which speaks {' and '.join(writer.services)}, not "
            f"storage.service={cfg.storage.service}; use {services.get(writer.services[0]).preset}"
        )

    if importlib.util.find_spec("tenacity") is None:
        raise ConfigError(
            f"storage={cfg.storage.name} framework={cfg.framework.name}: DCP's S3 writer needs "
            "s3torchconnector's dcp extra: pip install '.[pytorch]' (make install does it)"
        )
