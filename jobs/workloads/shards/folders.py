"""A sharded run's folders under the tool's checkpoint folder: each rank's, held by a lock while its shard
exists; removed after the run (unless kept); and those of killed runs, removed by the next run."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
from pathlib import Path

log = logging.getLogger(__name__)
PREFIX = "shards_"  # a run's folder under the tier's checkpoint folder: shards_<cell id>_<run>_<run id>


def claim(run_dir: Path, model_rank: int, keep: bool):
    """(this rank's new folder, the lock it holds on it while its shard exists, the killed runs' folders
    removed first): a later run's ``remove_killed`` leaves a held folder alone."""
    from jobs.workloads.checkpoint.recovery import RunLock, write_run_facts

    removed = remove_killed(run_dir.parent)
    if removed:
        log.warning(
            "removed the shards of runs that were killed before they could (no live run holds them): %s",
            ", ".join(removed),
        )
    mine = run_dir / f"rank{model_rank:05d}"
    lock = RunLock(mine, new=True)
    write_run_facts(mine, keep=keep, finished=False)  # only now: a folder without its facts is never removed
    return mine, lock, removed


RANK_DIR = re.compile(r"rank\d{5}")


def remove_killed(root: Path) -> list[str]:
    """The rank folders under the tool's checkpoint folder ``root`` that a killed sharded run left (SIGKILL, a
    lost node): this user's (the run's folder and the rank's), named like a run's (``shards_*/rankNNNNN``),
    holding the facts a run writes once it holds the folder's lock, not kept (``checkpoint.keep=false``),
    not finished, and no live process holding that lock. Each goes, and its run's folder once empty.
    Anything else (another user's folders and files, a kept run, a live run's folder, a folder whose run
    has not yet written its facts) is left. Returns ``run/rank`` names."""
    from jobs.workloads.checkpoint.recovery import alive, read_run_facts

    out = []
    if not root.is_dir():
        return out
    mine = os.geteuid()
    for run_dir in sorted(d for d in root.glob(f"{PREFIX}*") if d.is_dir() and not d.is_symlink()):
        if _owner(run_dir) != mine:
            continue  # another user's, whatever its name says
        for rank in (r for r in _ranks(run_dir) if _owner(r) == mine):
            try:
                facts = read_run_facts(rank)
                if not facts or facts.get("keep") or facts.get("finished") or alive(rank):
                    continue
            except FileNotFoundError:  # another rank's clean-up removed it meanwhile
                continue
            shutil.rmtree(rank, ignore_errors=True)
            out.append(f"{run_dir.name}/{rank.name}")
        with contextlib.suppress(OSError):
            run_dir.rmdir()  # only when empty
    return out


def _owner(p: Path) -> int | None:
    try:
        return p.lstat().st_uid
    except FileNotFoundError:
        return None


def _ranks(run_dir: Path) -> list[Path]:
    """A run folder's rank folders; none when it is gone. The ranks of a new run each clean up before they
    claim their folders, at once: one removes a killed run's folder while another lists it."""
    try:
        return sorted(
            r for r in run_dir.iterdir() if RANK_DIR.fullmatch(r.name) and r.is_dir() and not r.is_symlink()
        )
    except FileNotFoundError:
        return []


def remove(mine: Path, run_dir: Path) -> int:
    """This rank's shard folder, gone; the run's folder too once no rank's is left. Only the tool's own
    folders (named by this run) are touched. Returns the bytes left (0).

    Called while the rank still holds the folder's lock, it removes the run's facts first and the lock file
    last: another rank cleaning up meanwhile (``remove_killed``, as it claims its next folder) finds a live
    run, or no facts, and leaves the folder alone, instead of removing it under this rank."""
    from jobs.workloads.checkpoint.recovery import LOCK_FILE, RUN_FACTS

    if mine.is_dir() and not mine.is_symlink():
        with os.scandir(mine) as entries:
            names = sorted((e.name for e in entries), key=lambda n: (n == LOCK_FILE, n != RUN_FACTS))
        for name in names:
            path = mine / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        mine.rmdir()
    try:
        run_dir.rmdir()
    except OSError:  # another rank's folder is still there (it removes the run's folder after its own)
        pass
    return 0


def release(mine: Path, lock, keep: bool, files: list[tuple[str, int]], succeeded: bool = True) -> int:
    """The run is over for this rank's folder: its lock released, and the folder removed unless the run keeps
    its checkpoints (a kept folder is marked finished, so no later run removes it). A run that did not
    succeed keeps nothing, whatever ``keep`` says: its shard may be partial, and must never look finished.
    Returns the bytes left."""
    from jobs.workloads.checkpoint.recovery import write_run_facts

    keep = keep and succeeded
    left = sum(b for n, b in files if (mine / n).exists()) if keep else 0
    if keep and left:
        write_run_facts(mine, keep=True, finished=True)
    try:
        if not keep or not left:  # a burst buffer's fast folder is empty once drained
            remove(mine, mine.parent)  # the lock still held: nothing else removes it meanwhile
    finally:
        lock.release()
    return left
