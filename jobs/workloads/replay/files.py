"""The files a replay reads: one per file the trace read, as large as the furthest byte read of it, with
only the bytes its reads touch written (the rest is a hole), made once per trace and seed in the tool's own
folder on the tier (``<storage.root>/iocampaign/datasets/replay-<key>``) and kept there for the next cell,
as a synthetic set is. A file the trace only wrote is not made: the replay writes it anew in each run's
own folder.

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
    """The trace's files as the replay has them: for each trace path, its extent (bytes), whether it was
    read (a file made before the runs) or only written (made by each run), and the byte ranges its reads
    touch, which are the only bytes written when it is made (the rest of the file is a hole: a trace that
    reads 4 KiB at an offset of 1 TB needs 4 KiB of the tier, not 1 TB)."""

    paths: tuple[str, ...]  # the trace's paths, in the order of their first call
    extents: tuple[int, ...]  # bytes each needs: the furthest byte read or written
    read: tuple[bool, ...]
    ranges: tuple[tuple[tuple[int, int], ...], ...]  # per file, the (start, end) its reads touch, merged
    wrote: tuple[int, ...] = ()  # per file, the furthest byte its writes reach (0: never written)

    def key(self, seed: int) -> str:
        made = [[p, e, r] for p, e, r, read in zip(self.paths, self.extents, self.ranges, self.read) if read]
        return hashlib.sha256(json.dumps([*made, seed]).encode()).hexdigest()[:16]

    @property
    def data_bytes(self) -> int:
        """The bytes written on the tier to make the read files (their read ranges)."""
        return sum(b - a for rs, read in zip(self.ranges, self.read) if read for a, b in rs)

    @property
    def written_bytes(self) -> int:
        """The most a run's own written files take (the furthest byte of each file's writes)."""
        return sum(self.wrote)

    def name(self, i: int) -> str:
        return f"{i:06d}-{_safe(os.path.basename(self.paths[i]))}"


def _safe(base: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", base)[:80] or "file"


def layout(ops) -> Layout:
    """The files of an operations table (``jobs.traces.COLUMNS``), their extents and read ranges."""
    io = ops[ops["operation"].isin(["read", "write"])]
    order = list(dict.fromkeys(ops["file"]))
    end = (io["offset"].fillna(0) + io["size"].fillna(0)).groupby(io["file"]).max()
    # a call whose offset the trace does not give reads on from the last: at least the sum of its sizes
    unplaced = io[io["offset"].isna()].groupby("file")["size"].sum()
    reads = io[io["operation"] == "read"]
    used = [p for p in order if p in end.index]
    extents = [int(max(end.get(p, 0), unplaced.get(p, 0))) for p in used]
    touched = _touched(reads)
    ranges = tuple(
        ((0, e),) if p in set(reads.loc[reads["offset"].isna(), "file"]) else touched.get(p, ())
        for p, e in zip(used, extents)
    )
    read_files = set(reads["file"])
    writes = io[io["operation"] == "write"]
    wrote = (writes["offset"].fillna(0) + writes["size"].fillna(0)).groupby(writes["file"]).max()
    written = writes[writes["offset"].isna()].groupby("file")["size"].sum()
    reach = tuple(int(max(wrote.get(p, 0), written.get(p, 0))) for p in used)
    return Layout(tuple(used), tuple(extents), tuple(p in read_files for p in used), ranges, reach)


def _touched(reads) -> dict[str, tuple[tuple[int, int], ...]]:
    """Per file, the merged (start, end) byte ranges of its reads that give an offset."""
    placed = reads.dropna(subset=["offset"])
    placed = placed[placed["size"] > 0].sort_values(["file", "offset"], kind="stable")
    out: dict[str, list] = {}
    for f, a, n in zip(placed["file"], placed["offset"].astype("int64"), placed["size"].astype("int64")):
        rs = out.setdefault(f, [])
        b = int(a + n)
        if rs and a <= rs[-1][1]:
            rs[-1][1] = max(rs[-1][1], b)
        else:
            rs.append([int(a), b])
    return {f: tuple((a, b) for a, b in rs) for f, rs in out.items()}


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
    """Each read file at its extent, its read ranges filled with random bytes (the rest a hole, never read),
    made durable; then the set's META, which marks it complete."""
    import numpy as np

    rng = np.random.default_rng(seed)
    (folder / META).unlink(missing_ok=True)
    for p, extent, read, ranges in zip(lay.paths, lay.extents, lay.read, lay.ranges):
        if not read:
            continue
        target = made[p]
        if os.path.lexists(target):
            os.unlink(target)  # the tool's own file of a set cut short (never a link: unlinked, not followed)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, extent)
            for start, end in ranges:
                at = start
                while at < end:
                    n = min(CHUNK, end - at)
                    os.pwrite(fd, rng.bytes(n), at)
                    at += n
            os.fsync(fd)
        finally:
            os.close(fd)
    files = {os.path.basename(made[p]): e for p, e, r in zip(lay.paths, lay.extents, lay.read) if r}
    tmp = folder / f".{META}.part"
    tmp.unlink(missing_ok=True)
    tmp.write_text(json.dumps({"schema": 1, "files": files}))
    os.replace(tmp, folder / META)
