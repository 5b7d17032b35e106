"""Staging (``storage@stage=<preset>``): before the measured runs, copy the files a cell reads onto a
faster tier and read them there, as a job stages its data in, and as tf-Darshan staged the small
files on a fast tier (+19% bandwidth). The copy's time is reported apart from the runs; the staged
copy is evicted before every run like any other data, and removed when the cell ends (it lives in
the tool's own folder ``<stage.root>/iocampaign/staged/``; nothing else is touched)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import time
from pathlib import Path

from jobs import owned

SUBDIR = "staged"  # in the tool's folder on the fast tier (jobs.owned)
MARK = ".iocampaign-staged"  # in every staged copy, locked (flock) by the process that made it while it lives
_held: dict[str, object] = {}  # staged copy -> its open, locked mark


class StagingError(RuntimeError):
    """The staged copy cannot be made (no space, the folder exists and is not ours)."""


def _dest(ds, root: str) -> Path:
    import uuid

    key = hashlib.sha256("\n".join(ds.storage_files).encode()).hexdigest()[:10]
    return (
        owned.under_tool_folder(root, SUBDIR, setting="stage")
        / f"{ds.name}-{ds.format}-{uuid.uuid4().hex[:8]}-{key}"
    )


def _claim(dest: Path) -> None:
    """Make ``dest`` (it must not exist) and hold its mark's lock while this process lives."""
    import fcntl

    dest.mkdir()
    f = open(dest / MARK, "w")  # noqa: SIM115 - held for the copy's life, closed by remove()
    fcntl.flock(f, fcntl.LOCK_EX)
    _held[str(dest)] = f


def clear_stale(folder: Path) -> list[str]:
    """Remove the staged copies under ``folder`` whose maker is gone (a cell killed with SIGKILL): only
    folders holding this tool's mark, and only when no process holds its lock. Returns what went."""
    import fcntl

    gone = []
    for d in sorted(folder.iterdir()) if folder.is_dir() else []:
        mark = d / MARK
        if d.is_symlink() or not d.is_dir() or not mark.is_file() or str(d) in _held:
            continue
        with open(mark) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live cell's copy
            shutil.rmtree(d, ignore_errors=True)
            gone.append(str(d))
    return gone


def stage_in(ds, root: str):
    """Copy ``ds``'s stored files under ``root``; returns (the dataset as read from the copy, facts:
    where, files, bytes, seconds, MB/s). The copy is flushed to its device before the clock stops."""
    import logging

    dest = _dest(ds, root)
    if dest.exists():
        raise StagingError(f"stage: {dest} exists: not overwritten")
    # a file that cannot be read (a dangling link) is not copied: the runs read its original name and
    # drop it, as an unstaged cell does
    src = [p for p in ds.storage_files if os.path.isfile(p)]
    base = os.path.commonpath([os.path.dirname(p) for p in src]) if src else ""
    mapping = {p: str(dest / os.path.relpath(p, base)) for p in src}
    need = sum(os.path.getsize(p) for p in src)
    dest.parent.mkdir(parents=True, exist_ok=True)
    for d in clear_stale(dest.parent):
        logging.getLogger(__name__).warning("stage: removed %s, a staged copy whose cell was killed", d)
    free = shutil.disk_usage(dest.parent).free
    if need > free:
        raise StagingError(
            f"stage: {need / 1e6:.0f} MB to copy, {free / 1e6:.0f} MB free under {dest.parent}"
        )
    t0 = time.perf_counter()
    _claim(dest)
    try:
        for a, b in mapping.items():
            os.makedirs(os.path.dirname(b), exist_ok=True)
            with open(a, "rb") as fa, open(b, "xb") as fb:
                shutil.copyfileobj(fa, fb, 1 << 20)
                fb.flush()
                os.fsync(fb.fileno())
    except BaseException:
        remove(dest)
        raise
    seconds = time.perf_counter() - t0
    if ds.format == "files":
        staged = dataclasses.replace(ds, location=str(dest), files=tuple(mapping.get(f, f) for f in ds.files))
    else:
        staged = dataclasses.replace(ds, containers=tuple(mapping.get(c, c) for c in ds.containers))
    facts = {
        "staged_to": str(dest),
        "stage_files": len(src),
        "stage_bytes": need,
        "stage_s": seconds,
        "stage_mb_s": need / seconds / 1e6 if seconds > 0 else None,
    }
    return staged, facts


def remove(dest: str | Path) -> None:
    """Remove a staged copy: only a folder under the tool's ``staged`` folder."""
    dest = Path(dest)
    if dest.parent.name != SUBDIR or not owned.is_tool_folder(dest.parent.parent):
        raise StagingError(f"stage: refusing to remove {dest}: not a staged copy of this tool")
    shutil.rmtree(dest, ignore_errors=True)
    held = _held.pop(str(dest), None)
    if held is not None:
        with contextlib.suppress(OSError):  # a stage tier that died under the runs: nothing left to close
            held.close()
