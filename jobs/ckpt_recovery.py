"""Checkpoints left by runs that did not finish: the lock a live run holds on its folder, and the
recovery the next start runs (incomplete checkpoints dropped, interrupted burst-buffer copies redone).
Only folders named like the tool's runs (``TAG_PREFIX``) under the tool's checkpoint folder are touched."""

from __future__ import annotations

from pathlib import Path

from jobs.ckpt_store import BURST_MARK, complete, copy_verified, prefixes, remove, verify

TAG_PREFIX = "ckpt_"  # every run's folder: ckpt_<cell id>_<run>_<pid> (jobs/workloads/checkpoint.py)
RECOVERED = ".recovered"  # in a folder recovery has been through: no run writes there again, so it is done


def recover(fast: Path | None, slow: Path, tag: str, how: str) -> dict:
    """After a crash: drop incomplete leftovers of run ``tag``, and copy again every checkpoint that is
    complete on the fast tier but not on the slow one. Returns what it did."""
    report = {"dropped_incomplete": [], "recopied": []}
    for folder in [d for d in (fast, slow) if d is not None and d.exists()]:
        for p in prefixes(folder, tag):
            if not verify(p, checksums=True):
                remove(p)
                report["dropped_incomplete"].append(str(p))
        for part in folder.glob(f"{tag}-*.part"):
            part.unlink(missing_ok=True)
    if fast is not None and fast.exists() and (fast / BURST_MARK).exists():
        on_slow = {p.name for p in complete(slow, tag)} if slow.exists() else set()
        for p in complete(fast, tag):
            if p.name not in on_slow:
                copy_verified(p, slow, how)
                report["recopied"].append(p.name)
            remove(p)
    return report


class RunLock:
    """Held by a live run on its own checkpoint folder; recovery leaves locked folders alone."""

    def __init__(self, folder: Path) -> None:
        import fcntl

        folder.mkdir(parents=True, exist_ok=True)
        self.f = open(folder / ".lock", "a+")  # noqa: SIM115 - held open for the run's life, closed in release()
        fcntl.flock(self.f, fcntl.LOCK_EX)

    def release(self) -> None:
        import fcntl

        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def _alive(folder: Path) -> bool:
    import fcntl

    lock = folder / ".lock"
    if not lock.exists():
        return False
    with open(lock, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def _recovered(folders: list[Path]) -> bool:
    return all((d / RECOVERED).exists() for d in folders if d.exists())


def recover_all(fast_root: Path | None, slow_root: Path, how: str) -> dict:
    """Recover every run folder under the checkpoint roots that no live run holds, once: a folder it
    has been through is marked, and later runs do not read its checkpoints again (verifying reads
    every byte; with ``checkpoint.keep=true`` every later run would otherwise read them all)."""
    report: dict = {}
    tags = set()
    for root in [r for r in (fast_root, slow_root) if r is not None and r.exists()]:
        tags |= {d.name for d in root.iterdir() if d.is_dir() and not d.is_symlink() and d.name.startswith(TAG_PREFIX)}
    for tag in sorted(tags):
        fast = fast_root / tag if fast_root is not None else None
        slow = slow_root / tag
        folders = [d for d in (fast, slow) if d is not None]
        if (fast is not None and _alive(fast)) or _alive(slow) or _recovered(folders):
            continue
        r = recover(fast, slow, tag, how)
        if r["dropped_incomplete"] or r["recopied"]:
            report[tag] = r
        for d in folders:
            if d.exists():
                (d / RECOVERED).write_text("")
    return report
