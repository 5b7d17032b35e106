"""Checkpoints left by runs that did not finish: the lock a live run holds on its folder, and the
recovery the next start runs (incomplete checkpoints dropped, interrupted burst-buffer copies redone).
Only folders named like the tool's runs (``TAG_PREFIX``) under the tool's checkpoint folder are touched."""

from __future__ import annotations

from pathlib import Path

from jobs.workloads.checkpoint.store import (
    BURST_MARK,
    complete,
    copy_verified,
    prefixes,
    remove,
    retain,
    verify,
)

TAG_PREFIX = "ckpt_"  # every run's folder: ckpt_<cell id>_<run>_<pid>_<random> (jobs/workloads/checkpoint/)
RECOVERED = ".recovered"  # in a folder recovery has been through: no run writes there again, so it is done


def recover(fast: Path | None, slow: Path, tag: str, how: str) -> dict:
    """After a crash: drop incomplete leftovers of run ``tag``, and copy again the newest
    ``checkpoint.max_to_keep`` checkpoints complete on the fast tier but not on the slow one, then
    apply retention; a run that would not have kept its checkpoints (``checkpoint.keep=false``) has its
    folders removed instead. Returns what it did."""
    report = {"dropped_incomplete": [], "recopied": []}
    facts = read_run_facts(slow) or read_run_facts(fast)
    if facts and not facts.get("keep") and not facts.get("finished"):
        # a killed run that would have removed its checkpoints once recorded (checkpoint.keep=false): its
        # folders (made by that run, named by its unique tag) go, nothing is copied again
        import shutil

        for d in [x for x in (fast, slow) if x is not None and x.is_dir() and not x.is_symlink()]:
            report.setdefault("removed", []).extend(p.name for p in prefixes(d, tag))
            shutil.rmtree(d)
        return report
    for folder in [d for d in (fast, slow) if d is not None and d.exists()]:
        for p in prefixes(folder, tag):
            if not verify(p, checksums=True):
                remove(p)
                report["dropped_incomplete"].append(str(p))
        for part in folder.glob(f"{tag}-*.part"):
            part.unlink(missing_ok=True)
    keep_n = int(facts.get("max_to_keep") or 0)
    if fast is not None and fast.exists() and (fast / BURST_MARK).exists():
        on_slow = {p.name for p in complete(slow, tag)} if slow.exists() else set()
        todo = complete(fast, tag)
        for p in (
            todo[-keep_n:] if keep_n else todo
        ):  # the newest max_to_keep: retention would drop the others
            if p.name not in on_slow:
                copy_verified(p, slow, how)
                report["recopied"].append(p.name)
        for p in todo:
            remove(p)
    if keep_n and slow.exists():
        report["dropped_by_retention"] = retain(slow, tag, keep_n)
    return report


RUN_FACTS = ".run.json"  # a run's retention settings, written when its folder is made


def write_run_facts(folder: Path, **facts) -> None:
    import json

    (folder / RUN_FACTS).write_text(json.dumps(facts))


def read_run_facts(folder: Path | None) -> dict:
    """A run folder's retention settings ({} for folders written before they were kept)."""
    import json

    try:
        return json.loads((folder / RUN_FACTS).read_text()) if folder is not None else {}
    except (OSError, ValueError):
        return {}


class RunLock:
    """Held by a live run on its own checkpoint folder; recovery leaves locked folders alone."""

    def __init__(self, folder: Path, new: bool = False) -> None:
        """``new``: the folder must not exist yet (a run's own folder: it then holds only what the run
        wrote)."""
        import fcntl

        folder.mkdir(parents=True, exist_ok=not new)
        self.folder = folder
        self.f = open(folder / ".lock", "a+")  # noqa: SIM115 - held open for the run's life, closed in release()
        fcntl.flock(self.f, fcntl.LOCK_EX)

    def release(self) -> None:
        import fcntl

        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def alive(folder: Path) -> bool:
    """A live process holds ``folder``'s run lock (``RunLock``)."""
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
        tags |= {
            d.name
            for d in root.iterdir()
            if d.is_dir() and not d.is_symlink() and d.name.startswith(TAG_PREFIX)
        }
    for tag in sorted(tags):
        fast = fast_root / tag if fast_root is not None else None
        slow = slow_root / tag
        folders = [d for d in (fast, slow) if d is not None]
        if (fast is not None and alive(fast)) or alive(slow) or _recovered(folders):
            continue
        r = recover(fast, slow, tag, how)
        if r["dropped_incomplete"] or r["recopied"] or r.get("removed"):
            report[tag] = r
        for d in folders:
            if d.exists():
                (d / RECOVERED).write_text("")
    return report


def restore_latest(
    folder: Path, tag: str, num_classes: int, side: int, width: float, seed: int, prefix: Path | None = None
):
    """Rebuild the model and optimizer and restore the newest complete checkpoint of ``folder``
    (or ``prefix``); returns (model, optimizer, prefix)."""
    import keras
    import tensorflow as tf

    done = [prefix] if prefix is not None else complete(folder, tag, checksums=True)
    if not done:
        raise FileNotFoundError(f"no complete checkpoint of {tag} in {folder}")
    from jobs.workloads.alexnet import training as alexnet

    model = alexnet.build_model(num_classes, side, width, seed + 1)
    opt = keras.optimizers.Adam(1e-4)
    opt.build(model.trainable_variables)
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
    ckpt.read(str(done[-1])).expect_partial()
    return model, opt, done[-1]
