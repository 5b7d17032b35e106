"""The storage tier's own bandwidth, as the paper's Table I (IOR), and its small-file read rate.

One run: write a ``file_gb`` file sequentially (O_DIRECT, flushed), evict it, read it back
(O_DIRECT), then read every file of the dataset whole with 1, 2, 4, 8 buffered readers (the
micro-benchmark's thread counts), cold each time: its image files, or with
``dataset.format=tfrecord|hdf5`` its TFRecord or HDF5 files (256 KiB calls, as TensorFlow's TFRecord
reader). The files this writes are removed at the end.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass

from jobs import owned
from jobs.data.datasets import Dataset
from jobs.storage import cache, iotools

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BaselineSettings:
    root: str  # directory on the tier
    file_gb: float
    small_file_threads: tuple[int, ...]


def _disk_read_bytes(disk: str | None) -> int | None:
    if disk is None:
        return None
    from jobs.observe import trace

    return trace.device_bytes(disk)[0]


def run_once(ds: Dataset, s: BaselineSettings, disk: str | None, tag: str) -> dict:
    """One baseline run on the tier; returns MB/s of every measure and the exact commands."""
    work = owned.under_tool_folder(s.root, "baseline", setting="storage.root") / f"{tag}-{os.getpid()}"
    work.mkdir(exist_ok=False)
    try:
        size = int(s.file_gb * 1e9) // (1 << 20) * (1 << 20)
        target = work / "seq.dat"
        w = iotools.sequential(target, size, "write")
        cache.evict([str(target)])
        r = iotools.sequential(target, size, "read", which=w.tool)
        target.unlink()
        small = {}
        commands = {"seq_write": w.command, "seq_read": r.command}
        consumed = device = 0
        # fio needs a file per reader: a set stored in fewer files (TFRecord shards, HDF5 files) than
        # readers asked for is read by as many readers as it has files, and recorded under that count
        files = list(ds.storage_files)
        readers = sorted({min(n, len(files)) for n in s.small_file_threads})
        if readers != sorted(set(s.small_file_threads)):
            log.warning(
                "workload.small_file_threads=%s: the set is stored in %d file(s), so fio reads it with %s "
                "reader(s)",
                list(s.small_file_threads),
                len(files),
                readers,
            )
        for n in readers:
            dirs = iotools.link_farm(files, work / f"farm{n}", n)
            cache.evict(ds.storage_files)
            before = _disk_read_bytes(disk)
            m = iotools.small_files(dirs, "4k" if ds.format == "files" else "256k")
            after = _disk_read_bytes(disk)
            small[str(n)] = m.mb_per_s
            commands[f"small_read_{n}"] = m.command
            consumed += m.bytes
            device = None if before is None or after is None or device is None else device + (after - before)
            shutil.rmtree(work / f"farm{n}")
        return {
            "seq_read_mb_s": r.mb_per_s,
            "seq_write_mb_s": w.mb_per_s,
            "small_read_mb_s": small,
            "file_bytes": size,
            "tool": w.tool,
            "tool_version": w.version,
            "small_file_tool": "fio",
            "commands": commands,
            "images": len(ds.files),
            "images_dropped": 0,
            "bytes_consumed": consumed,
            # system-wide counter of the tier's device while fio read (fio is another process)
            "bytes_read_device": device,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
