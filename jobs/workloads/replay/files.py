"""The files a replay reads: one per file the trace read, as large as the furthest byte read of it, made once
per trace and seed in the tool's own folder on the tier (``<storage.root>/iocampaign/datasets/replay-<key>``)
and kept there for the next cell, as a synthetic set is. A file the trace only wrote is not made: the replay
writes it anew in each run's own folder.

The trace's own paths are never opened: each becomes a name of the tool's, made of its index and its base
name. The set is complete once its ``replay.json`` lists every file (written last); a set cut short is
made again.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

META = "replay.json"
LOCK = ".replay.lock"
CHUNK = 1 << 22  # bytes generated and written at a time


@dataclass(frozen=True)
class Layout:
    """The trace's files as the replay has them: for each trace path, its extent (bytes) and whether it was
    read (a file made before the runs) or only written (made by each run)."""

    paths: tuple[str, ...]  # the trace's paths, in the order of their first call
    extents: tuple[int, ...]  # bytes each needs: the furthest byte read or written
    read: tuple[bool, ...]

    def key(self, seed: int) -> str:
        text = json.dumps([[p, e] for p, e, r in zip(self.paths, self.extents, self.read) if r] + [seed])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def read_bytes(self) -> int:
        return sum(e for e, r in zip(self.extents, self.read) if r)

    def name(self, i: int) -> str:
        return f"{i:06d}-{_safe(os.path.basename(self.paths[i]))}"


def _safe(base: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", base)[:80] or "file"


def layout(ops) -> Layout:
    """The files of an operations table (``jobs.traces.COLUMNS``) and their extents."""
    io = ops[ops["operation"].isin(["read", "write"])]
    order = list(dict.fromkeys(ops["file"]))
    end = (io["offset"].fillna(0) + io["size"].fillna(0)).groupby(io["file"]).max()
    # a call whose offset the trace does not give reads on from the last: at least the sum of its sizes
    unplaced = io[io["offset"].isna()].groupby("file")["size"].sum()
    reads = set(io.loc[io["operation"] == "read", "file"])
    used = [p for p in order if p in end.index]
    extents = [int(max(end.get(p, 0), unplaced.get(p, 0))) for p in used]
    return Layout(tuple(used), tuple(extents), tuple(p in reads for p in used))


def ensure(lay: Layout, folder: Path, seed: int) -> dict[str, str]:
    """The made file of every read file of ``lay`` (trace path -> path), made under ``folder`` (the tool's
    own) if its set is not complete there; one process makes a set at a time (a lock in the folder)."""
    folder.mkdir(exist_ok=True)
    made = {p: str(folder / lay.name(i)) for i, p in enumerate(lay.paths) if lay.read[i]}
    with open(folder / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not _complete(folder, lay, made):
                _make(lay, folder, made, seed)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return made


def _complete(folder: Path, lay: Layout, made: dict[str, str]) -> bool:
    from jobs import jsonfiles

    try:
        listed = jsonfiles.read_json(folder / META)
    except (OSError, ValueError):
        return False
    want = {os.path.basename(made[p]): e for p, e, r in zip(lay.paths, lay.extents, lay.read) if r}
    return listed.get("files") == want and all(
        os.path.isfile(f) and not os.path.islink(f) and os.path.getsize(f) == want[os.path.basename(f)]
        for f in made.values()
    )


def _make(lay: Layout, folder: Path, made: dict[str, str], seed: int) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    (folder / META).unlink(missing_ok=True)
    for p, extent, read in zip(lay.paths, lay.extents, lay.read):
        if not read:
            continue
        target = made[p]
        if os.path.lexists(target):
            os.unlink(target)  # the tool's own file of a set cut short (never a link: unlinked, not followed)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            left = extent
            while left > 0:
                n = min(CHUNK, left)
                os.write(fd, rng.bytes(n))
                left -= n
            os.fsync(fd)
        finally:
            os.close(fd)
    files = {os.path.basename(made[p]): e for p, e, r in zip(lay.paths, lay.extents, lay.read) if r}
    tmp = folder / f".{META}.part"
    tmp.unlink(missing_ok=True)
    tmp.write_text(json.dumps({"schema": 1, "files": files}))
    os.replace(tmp, folder / META)
