"""Checkpoints left by runs that did not finish: the lock a live run holds on its folder, and the
recovery the next start runs (incomplete checkpoints dropped, interrupted burst-buffer copies redone).
Only folders named like the tool's runs (``TAG_PREFIX``) under the tool's checkpoint folder are touched."""

from __future__ import annotations

import os
from pathlib import Path

from jobs.workloads.checkpoint.store import (  # noqa: F401 - RUN_FACTS and write_run_facts: used from here
    BURST_MARK,
    RUN_FACTS,
    Folder,
    complete,
    drop_incomplete,
    prefixes,
    read_run_facts,
    remove,
    write_run_facts,
)

TAG_PREFIX = "ckpt_"  # every run's folder: ckpt_<cell id>_<run>_<pid>_<random> (jobs/workloads/checkpoint/)
RECOVERED = ".recovered"  # in a folder recovery has been through: no run writes there again, so it is done


def recover(fast: Path | None, slow, tag: str, how: str) -> dict:
    """After a crash: drop incomplete leftovers of run ``tag``, and copy again the newest
    ``checkpoint.max_to_keep`` checkpoints complete on the fast tier but not on the slow one (``slow``: the
    run's ``store.Folder`` or ``bucket.Bucket``), then apply retention; a run that would not have kept its
    checkpoints (``checkpoint.keep=false``) has its folders and objects removed instead. Returns what it
    did."""
    report = {"dropped_incomplete": [], "recopied": []}
    facts = slow.facts() or read_run_facts(fast)
    if facts and not facts.get("keep") and not facts.get("finished"):
        # a killed run that would have removed its checkpoints once recorded (checkpoint.keep=false): its
        # folders (made by that run, named by its unique tag) and objects go, nothing is copied again
        import shutil

        report["removed"] = slow.complete() + ([p.name for p in prefixes(fast, tag)] if _real(fast) else [])
        slow.remove_all()
        if _real(fast):
            shutil.rmtree(fast)
        return report
    if fast is not None and fast.exists():
        report["dropped_incomplete"] += drop_incomplete(fast, tag)
    report["dropped_incomplete"] += slow.drop_incomplete()
    keep_n = int(facts.get("max_to_keep") or 0)
    if fast is not None and fast.exists() and (fast / BURST_MARK).exists():
        on_slow = set(slow.complete())
        todo = complete(fast, tag)
        # the newest max_to_keep: retention would drop the others
        for p in todo[-keep_n:] if keep_n else todo:
            if p.name not in on_slow:
                slow.receive(p, how)
                report["recopied"].append(p.name)
        for p in todo:
            remove(p)
    if keep_n:
        report["dropped_by_retention"] = slow.retain(keep_n)
    return report


def _real(folder: Path | None) -> bool:
    return folder is not None and folder.is_dir() and not folder.is_symlink()


LOCK_FILE = ".lock"  # in a run's folder: held (flock) by the live run


class RunLock:
    """Held by a live run on its own checkpoint folder; recovery leaves locked folders alone."""

    def __init__(self, folder: Path, new: bool = False) -> None:
        """``new``: the folder must not exist yet (a run's own folder: it then holds only what the run
        wrote)."""
        import fcntl

        _make(folder, new)
        self.folder = folder
        self.f = open(folder / LOCK_FILE, "a+")  # noqa: SIM115 - held open for the run's life, closed in release()
        fcntl.flock(self.f, fcntl.LOCK_EX)

    def release(self) -> None:
        import fcntl

        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


_MAKE_TRIES = 100  # a run's folder removed under a rank this many times in a row: something else is wrong


def _make(folder: Path, new: bool) -> None:
    """``folder`` made with its parents. A parent made here can be removed again before ``folder`` is made in
    it: another rank's clean-up removes a run's folder while it is empty (``shards.folders.remove_killed``),
    and the ranks of a run make and clean the same folders at once. It is then made again."""
    for _ in range(_MAKE_TRIES):
        try:
            folder.mkdir(parents=True, exist_ok=not new)
            return
        except FileNotFoundError:  # the parent went between its mkdir and this folder's
            continue
    folder.mkdir(parents=True, exist_ok=not new)


def alive(folder: Path) -> bool:
    """A live process holds ``folder``'s run lock (``RunLock``). The lock file is opened, never made: a
    folder its owner is removing (its lock file gone) is left as the owner leaves it."""
    import fcntl

    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # no lock file (or a link in its place): no run holds the folder
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing it drops the lock taken here
    return False


def _recovered(folders: list[Path]) -> bool:
    return all((d / RECOVERED).exists() for d in folders if d.exists())


def recover_all(fast_root: Path | None, slow_root: Path | None, how: str, bucket_of=None) -> dict:
    """Recover every run folder under the checkpoint roots that no live run holds, once: a folder it
    has been through is marked, and later runs do not read its checkpoints again (verifying reads
    every byte; with ``checkpoint.keep=true`` every later run would otherwise read them all).

    A run whose slow tier was a bucket (its facts name it) is recovered only by a cell whose slow tier
    is that bucket (``bucket_of(tag)``: that run's ``bucket.Bucket`` in the cell's store); any other is
    left alone, and so is a file-system run where the cell has no slow folder (``slow_root`` None)."""
    report: dict = {}
    tags = set()
    for root in [r for r in (fast_root, slow_root) if r is not None and r.exists()]:
        tags |= {
            d.name
            for d in root.iterdir()
            if d.is_dir() and not d.is_symlink() and d.name.startswith(TAG_PREFIX)
        }
    for tag in sorted(tags):
        fast = fast_root / tag if fast_root is not None else None
        slow = _slow_of(tag, read_run_facts(fast), slow_root, bucket_of)
        if slow is None:
            continue
        folders = [d for d in (fast, getattr(slow, "path", None)) if d is not None]
        if any(alive(d) for d in folders) or _recovered(folders):
            continue
        r = recover(fast, slow, tag, how)
        if r["dropped_incomplete"] or r["recopied"] or r.get("removed"):
            report[tag] = r
        for d in folders:
            if d.exists():
                (d / RECOVERED).write_text("")
    return report


def _slow_of(tag: str, facts: dict, slow_root: Path | None, bucket_of):
    """Where run ``tag``'s slow copies are, as this cell can reach them: its ``Folder``, its bucket, or
    None (a store or folder this cell does not have)."""
    if facts.get("bucket"):
        slow = bucket_of(tag) if bucket_of is not None else None
        return slow if slow is not None and slow.url == facts["bucket"] else None
    return Folder(slow_root / tag, tag) if slow_root is not None else None
