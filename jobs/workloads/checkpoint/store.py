"""Checkpoint files on a tier: durable flushes, manifests, verified copies, retention, recovery.

A checkpoint is the files TensorFlow wrote for one save (``<prefix>.index``,
``<prefix>.data-*``). It counts as complete on a tier only when ``<prefix>.manifest.json``
(every file's size and sha256) sits next to them; the manifest is written last, atomically,
after the files were flushed. Everything else with the run's prefix is incomplete and ignored.
Every name carries the run's own tag, so two runs sharing a folder never touch each other's files.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

MANIFEST = ".manifest.json"
BURST_MARK = ".burst_buffer"  # in a run's fast folder: its checkpoints belong on the slow tier
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def fsync_files(paths: list[Path]) -> None:
    """fsync every file, then its folder: the write-back the blkio throttle sees."""
    folders = set()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        folders.add(p.parent)
    for d in folders:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def syncfs(folder: Path) -> None:
    """syncfs(2) on the file system of ``folder``, as the paper did (not seen by the blkio throttle)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        if _libc.syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), f"syncfs failed on {folder}")
    finally:
        os.close(fd)


def flush(paths: list[Path], how: str) -> None:
    if how == "syncfs":
        syncfs(paths[0].parent)
    else:
        fsync_files(paths)


def files_of(prefix: Path) -> list[Path]:
    """The data files TensorFlow wrote for the checkpoint ``prefix`` (without the manifest)."""
    return sorted(
        p for p in prefix.parent.glob(prefix.name + ".*") if not p.name.endswith((MANIFEST, ".part"))
    )


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(prefix: Path, step: int, extra: dict | None = None, checksums: dict | None = None) -> dict:
    """Record the checkpoint's files with their sizes (and checksums when known), atomically, after
    they were flushed. Training waits for this, so it reads nothing back: the drain checksums."""
    files = files_of(prefix)
    man = {
        "prefix": prefix.name,
        "step": step,
        "written_at": time.time(),
        "files": {
            p.name: {"bytes": p.stat().st_size, **({"sha256": checksums[p.name]} if checksums else {})}
            for p in files
        },
        **(extra or {}),
    }
    tmp = prefix.parent / (prefix.name + MANIFEST + ".part")
    with open(tmp, "w") as f:
        json.dump(man, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, prefix.parent / (prefix.name + MANIFEST))
    fsync_files([prefix.parent / (prefix.name + MANIFEST)])
    return man


def read_manifest(prefix: Path) -> dict | None:
    try:
        return json.loads((prefix.parent / (prefix.name + MANIFEST)).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def verify(prefix: Path, man: dict | None = None, checksums: bool = True) -> bool:
    """Whether every file of the manifest is there with its size (and checksum)."""
    man = man or read_manifest(prefix)
    if not man:
        return False
    for name, meta in man["files"].items():
        p = prefix.parent / name
        try:
            if p.stat().st_size != meta["bytes"]:
                return False
        except OSError:
            return False
        if checksums and "sha256" in meta and sha256(p) != meta["sha256"]:
            return False
    return True


def copy_verified(prefix: Path, dest_dir: Path, how: str) -> tuple[Path, float, int]:
    """Copy a complete checkpoint to ``dest_dir`` (files as .part, flushed, renamed), verify it there
    by checksum and write its manifest last. Returns (new prefix, seconds, bytes)."""
    t0 = time.perf_counter()
    man = read_manifest(prefix)
    if man is None:
        raise RuntimeError(f"{prefix} has no manifest: not a complete checkpoint")
    dest_dir.mkdir(parents=True, exist_ok=True)
    parts, sums = [], {}
    for name, meta in man["files"].items():
        part = dest_dir / (name + ".part")
        h = hashlib.sha256()
        with open(prefix.parent / name, "rb") as src, open(part, "wb") as dst:
            while chunk := src.read(1 << 22):
                h.update(chunk)
                dst.write(chunk)
        sums[name] = h.hexdigest()
        if "sha256" in meta and meta["sha256"] != sums[name]:
            raise RuntimeError(f"{prefix.parent / name} does not match its manifest's checksum")
        parts.append(part)
    flush(parts, how)
    for part in parts:
        os.replace(part, dest_dir / part.name[: -len(".part")])
    new = dest_dir / prefix.name
    fsync_files([dest_dir / n for n in man["files"]])
    cache_drop = [dest_dir / n for n in man["files"]]
    for p in cache_drop:  # verify what the device holds, not what the page cache remembers
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    if not all(sha256(dest_dir / n) == sums[n] for n in man["files"]) or not verify(
        new, man, checksums=False
    ):
        raise RuntimeError(f"copy of {prefix.name} to {dest_dir} does not match its checksums")
    write_manifest(new, man["step"], {"copied_from": str(prefix.parent)}, checksums=sums)
    return new, time.perf_counter() - t0, sum(m["bytes"] for m in man["files"].values())


def remove(prefix: Path) -> None:
    """Delete a checkpoint's files (manifest first, so a crash midway leaves it incomplete, not wrong)."""
    (prefix.parent / (prefix.name + MANIFEST)).unlink(missing_ok=True)
    for p in prefix.parent.glob(prefix.name + ".*"):
        p.unlink(missing_ok=True)


def prefixes(folder: Path, tag: str) -> list[Path]:
    """Every checkpoint prefix of run ``tag`` in ``folder`` (complete or not), oldest step first."""
    names = set()
    for p in folder.glob(f"{tag}-*"):
        stem = p.name.split(".")[0]
        names.add(stem)

    def step(n: str) -> int:
        try:
            return int(n.rsplit("-", 1)[1])
        except ValueError:
            return -1

    return [folder / n for n in sorted(names, key=step)]


def complete(folder: Path, tag: str, checksums: bool = False) -> list[Path]:
    """Complete checkpoints of run ``tag`` in ``folder``, oldest first."""
    return [p for p in prefixes(folder, tag) if verify(p, checksums=checksums)]


def retain(folder: Path, tag: str, keep: int) -> list[str]:
    """Keep the newest ``keep`` complete checkpoints of run ``tag`` in ``folder``; delete older ones."""
    done = complete(folder, tag)
    gone = []
    for p in done[:-keep] if keep > 0 else []:
        remove(p)
        gone.append(p.name)
    return gone


RUN_FACTS = ".run.json"  # a run's retention settings, written when its folder is made


def write_run_facts(folder: Path, **facts) -> None:
    (folder / RUN_FACTS).write_text(json.dumps(facts))


def read_run_facts(folder: Path | None) -> dict:
    """A run folder's retention settings ({} for folders written before they were kept)."""
    try:
        return json.loads((folder / RUN_FACTS).read_text()) if folder is not None else {}
    except (OSError, ValueError):
        return {}


def drop_incomplete(folder: Path, tag: str) -> list[str]:
    """Remove run ``tag``'s checkpoints in ``folder`` that do not match their manifest, and its copies cut
    off midway (``.part``); returns the removed prefixes."""
    dropped = []
    for p in prefixes(folder, tag):
        if not verify(p, checksums=True):
            remove(p)
            dropped.append(str(p))
    for part in folder.glob(f"{tag}-*.part"):
        part.unlink(missing_ok=True)
    return dropped


@dataclass(frozen=True)
class Folder:
    """One run's checkpoints in its folder on a file-system tier: what the drain copies into, keeps and
    reports (``bucket.Bucket`` does the same in an object store)."""

    path: Path
    tag: str

    @property
    def url(self) -> str:
        return str(self.path)

    def receive(self, prefix: Path, how: str) -> tuple[str, float, int]:
        """Copy the complete checkpoint ``prefix`` here, verified (``copy_verified``); (name, s, bytes)."""
        new, secs, nbytes = copy_verified(prefix, self.path, how)
        return new.name, secs, nbytes

    def retain(self, keep: int) -> list[str]:
        return retain(self.path, self.tag, keep)

    def complete(self) -> list[str]:
        return [p.name for p in complete(self.path, self.tag)] if self.path.exists() else []

    def facts(self) -> dict:
        return read_run_facts(self.path)

    def drop_incomplete(self) -> list[str]:
        return drop_incomplete(self.path, self.tag) if self.path.exists() else []

    def remove_all(self) -> int:
        """Remove the run's folder (a real folder it made, never a link); returns the bytes it held."""
        import shutil

        if not self.path.is_dir() or self.path.is_symlink():
            return 0
        held = sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file() and not f.is_symlink())
        shutil.rmtree(self.path)
        return held


def _drain_worker(inq, outq, slow, keep: int, how: str, parent: int | None = None) -> None:
    """Background process: copy each checkpoint to the slow tier (``slow``: a ``Folder`` or a
    ``bucket.Bucket``), verify, delete the fast copy (unless the run keeps it for the restore a restart
    would make while it is fresh), apply retention on the slow tier; report every checkpoint drained.

    It ends with its parent (``jobs.lifeline``) and ignores SIGINT: a Ctrl-C reaches the whole
    process group, and whether the drain stops is the run's decision (``Drain.abort``)."""
    import signal

    from jobs import lifeline

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent is not None:
        lifeline.bind(parent)
    try:
        while (item := inq.get()) is not None:
            prefix, keep_fast = Path(item[0]), bool(item[1])
            man = read_manifest(prefix)
            name, secs, nbytes = slow.receive(prefix, how)
            if not keep_fast:
                remove(prefix)  # only now: the slow copy is flushed and verified
            slow.retain(keep)
            outq.put(
                {
                    "name": name,
                    "step": man["step"],
                    "copy_s": secs,
                    "bytes": nbytes,
                    "finished_at": time.time(),
                    "fast_copy_kept": keep_fast,
                }
            )
    except BaseException as e:  # the campaign must hear of it, not find a silent hole later
        outq.put({"error": f"{type(e).__name__}: {e}"})
    outq.put(None)


class DrainError(RuntimeError):
    """The burst buffer's drain failed or its process ended before it finished."""


class Drain:
    """The burst buffer's background copier (a separate process, as in the paper)."""

    POLL_S = 0.2  # how often a wait for the drain checks that it lives and that no signal came

    def __init__(self, slow, keep: int, how: str) -> None:
        """``slow``: where checkpoints drain to, a ``Folder`` or a ``bucket.Bucket``."""
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.inq, self.outq = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(
            target=_drain_worker,
            args=(self.inq, self.outq, slow, keep, how, os.getpid()),
            name="iocampaign-drain",
            daemon=True,
        )
        # born with SIGINT blocked (the mask survives fork and exec): a Ctrl-C that comes while the new
        # interpreter still imports, before it ignores SIGINT, cannot end it with a KeyboardInterrupt
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self.proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        self.drained: list[dict] = []  # what it reported so far

    def put(self, prefix: Path, keep_fast: bool = False) -> None:
        """Drain ``prefix``; with ``keep_fast`` its fast copy stays after the slow one is verified (the run's
        last checkpoint, for the restore from the fast tier; the run removes it afterwards). Raises
        DrainError when the drain already failed: the run stops at this checkpoint, not at its end."""
        self.check()
        self.inq.put((str(prefix), keep_fast))

    def check(self) -> None:
        """Take what the drain reported so far; raise DrainError if it failed."""
        import queue

        while True:
            try:
                item = self.outq.get_nowait()
            except queue.Empty:
                return
            if item is not None and "error" in item:
                self.abort()
                raise DrainError(f"burst-buffer drain failed: {item['error']}")
            if item is not None:
                self.drained.append(item)

    def finish(self, timeout_s: float | None = None) -> list[dict]:
        """Wait until everything queued is on the slow tier; return what was drained. Raises DrainError
        when the drain fails, ends without its end mark (killed) or takes longer than ``timeout_s``;
        a signal noted meanwhile (``jobs.interrupts``) is raised here, between polls."""
        import queue

        from jobs import interrupts

        self.inq.put(None)
        out = self.drained
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                item = self.outq.get(timeout=self.POLL_S)
            except queue.Empty:
                interrupts.check()
                if not self.proc.is_alive():
                    try:  # its last words may have been queued just before it ended
                        item = self.outq.get(timeout=self.POLL_S)
                    except queue.Empty:
                        raise DrainError(
                            f"burst-buffer drain: its process ended (exit status {self.proc.exitcode}) "
                            f"after {len(out)} checkpoints, before the queue was drained"
                        ) from None
                elif deadline is not None and time.monotonic() > deadline:
                    self.abort()
                    raise DrainError(
                        f"burst-buffer drain: not finished after {timeout_s:.0f} s; stopped"
                    ) from None
                else:
                    continue
            if item is None:
                break
            if "error" in item:
                self.proc.join(30)
                raise DrainError(f"burst-buffer drain failed: {item['error']}")
            out.append(item)
        self.proc.join(60)
        return out

    def abort(self) -> None:
        """Stop the copier now (the run failed): nothing it was copying counts."""
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(10)
