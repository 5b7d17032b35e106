"""What the tool put in a bucket, recorded in its own local folder: the only proof it ever acts on.

A bucket is written by whoever holds its keys (a user's store: anyone the user shared them with; the
embedded server: anyone who reaches its inner ports), so nothing found in it proves who wrote it: a
marker saying "a killed run's, delete me" beside a user's object is as easy to forge as the object. So
every key is recorded here *before* the request that writes it, and every multipart upload's ID as soon
as it is started, in a file of the tool's own folder (``<storage root>/iocampaign/uploads``, the
user's, 0700) that only root and the user can write. The tool then deletes only keys a record of its
own names, and aborts only the uploads on them; an object it did not write is never deleted, whatever
the bucket says.

A record is a file of JSON lines: its header (the store, the host and the writing process, with the
process's start time so that a reused pid is not taken for it), then one line per key or upload, and
the run's facts (``note``). Its writer appends with ``O_APPEND`` (one ``write`` a line), so the drain's
process and the run's can share one. When the writer dies before it cleaned up (SIGKILL, a lost node),
the next run on the host finds the record of a dead process (``dead_records``) and ``clean``s it:
aborts its uploads (those it recorded, and any other still open on its keys, whose IDs the kill may
have cut off) and deletes its keys.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from jobs.storage.objectstore.endpoint import Endpoint

SUBDIR = "uploads"  # below the tool's folder on the store's storage root
SUFFIX = ".jsonl"


def folder(root: str | Path, setting: str) -> Path:
    """The records' folder under ``root``'s tool folder, made (the user's own, 0700)."""
    from jobs import owned

    path = owned.under_tool_folder(root, SUBDIR, setting=setting)
    os.chmod(path, 0o700)
    return path


def _started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat``); None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Record:
    """A record as read back: its header, the keys and uploads in the order they were recorded, and the
    facts the run noted (the last value of each)."""

    header: dict
    keys: list[str] = field(default_factory=list)
    uploads: list[tuple[str, str]] = field(default_factory=list)  # (key, upload id)
    facts: dict = field(default_factory=dict)

    def of(self, endpoint: Endpoint) -> bool:
        """Whether the record's objects are in ``endpoint``'s bucket."""
        return self.header.get("endpoint") == endpoint.url and self.header.get("bucket") == endpoint.bucket

    def writer_alive(self) -> bool:
        """The process that wrote the header still runs (the same process: its start time matches)."""
        pid = self.header.get("pid")
        return isinstance(pid, int) and _started(pid) == self.header.get("started")


@dataclass(frozen=True)
class Journal:
    """One run's (or rank's) record, at ``path``: plain data, so another process can append to it."""

    path: Path

    @classmethod
    def create(cls, folder: Path, name: str, endpoint: Endpoint) -> Journal:
        """A new record named ``name`` in ``folder`` (which must not hold one of that name), its header
        written: this process, on this host, putting objects in ``endpoint``'s bucket."""
        if "/" in name or name.startswith("."):
            raise ValueError(f"{name!r} is not a record's name")
        path = folder / (name + SUFFIX)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.close(fd)
        j = cls(path)
        pid = os.getpid()
        j._append(
            {
                "endpoint": endpoint.url,
                "bucket": endpoint.bucket,
                "prefix": endpoint.prefix,
                "host": socket.gethostname(),
                "pid": pid,
                "started": _started(pid),
            }
        )
        return j

    @classmethod
    def at(cls, folder: Path, name: str) -> Journal:
        """The record named ``name`` in ``folder`` (it may not exist)."""
        return cls(folder / (name + SUFFIX))

    @property
    def name(self) -> str:
        return self.path.name[: -len(SUFFIX)]

    def _append(self, line: dict) -> None:
        data = (json.dumps(line) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.write(fd, data)  # one write of a line: appends of two processes never interleave
            os.fsync(fd)  # on disk before the request it announces
        finally:
            os.close(fd)

    def put(self, key: str) -> None:
        """Before ``key`` is written."""
        self._append({"key": key})

    def upload(self, key: str, upload_id: str) -> None:
        """As soon as a multipart upload to ``key`` is started."""
        self._append({"key": key, "upload": upload_id})

    def note(self, **facts) -> None:
        """The run's facts (what a recovery after a kill needs to know)."""
        self._append({"facts": facts})

    def exists(self) -> bool:
        return self.path.is_file() and not self.path.is_symlink()

    def read(self) -> Record | None:
        """The record, None when there is none (or it is not a record: a link, another user's file)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            if os.fstat(f.fileno()).st_uid != os.geteuid():
                return None
            lines = f.read().decode(errors="replace").splitlines()
        try:
            rec = Record(json.loads(lines[0]))
        except (IndexError, ValueError):
            return None
        seen = set()
        for raw in lines[1:]:
            try:
                line = json.loads(raw)
            except ValueError:  # a line the kill cut off: its request was never made
                continue
            key = line.get("key")
            if isinstance(key, str) and key not in seen:
                seen.add(key)
                rec.keys.append(key)
            if isinstance(key, str) and isinstance(line.get("upload"), str):
                rec.uploads.append((key, line["upload"]))
            if isinstance(line.get("facts"), dict):
                rec.facts.update(line["facts"])
        return rec

    def forget(self) -> None:
        """The record goes (its objects are gone, or kept for the user: nothing of the tool's to do)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def keys_in(rec: Record, endpoint: Endpoint) -> list[str]:
    """The record's keys that lie under the tool's prefix: the only ones ever deleted."""
    own = endpoint.prefix.rstrip("/") + "/"
    return [k for k in rec.keys if k.startswith(own) and ".." not in k.split("/")]


def abort_uploads(handle, endpoint: Endpoint, rec: Record) -> int:
    """Abort the multipart uploads of the record: the IDs it holds, and any other upload still open on one
    of its keys (an ID the kill cut off before it was recorded, or one a library started, whose ID the
    tool never sees). Returns how many were aborted."""
    from jobs.storage.objectstore import services

    service = services.of(endpoint)
    try:
        return service.abort_uploads(handle, endpoint, keys_in(rec, endpoint), rec.uploads)
    except Exception as e:  # noqa: BLE001 - one line naming the endpoint
        raise service.why(e, endpoint) from None


def delete(handle, endpoint: Endpoint, keys: list[str]) -> None:
    """Delete ``keys`` (recorded keys under the tool's prefix; a missing one is no error)."""
    from jobs.storage.objectstore import objects

    objects.delete_keys(handle, endpoint, keys)


def clean(handle, endpoint: Endpoint, j: Journal) -> list[str]:
    """Abort the record's uploads, delete its keys, then forget it; returns the keys deleted. A store
    that fails leaves the record, for the next run to finish."""
    rec = j.read()
    if rec is None or not rec.of(endpoint):
        return []
    abort_uploads(handle, endpoint, rec)
    keys = keys_in(rec, endpoint)
    delete(handle, endpoint, keys)
    j.forget()
    return keys


def dead_records(where: Path, endpoint: Endpoint, starts: str = "") -> list[Journal]:
    """The records in ``where`` (named ``starts...``) of processes on this host that died before they
    cleaned up, for objects in ``endpoint``'s bucket: what a killed run left."""
    host, out = socket.gethostname(), []
    for path in sorted(where.glob(f"{starts}*{SUFFIX}")):
        j = Journal(path)
        rec = j.read()
        if rec is None or not rec.of(endpoint) or rec.header.get("host") != host or rec.writer_alive():
            continue
        out.append(j)
    return out
