"""Checkpoints in an object store (``storage@checkpoint.slow=s3`` or ``=azure``): the burst buffer's slow
tier as a bucket (Azure's container), reached through its service's requests (``services.Service``).

The drain puts each complete checkpoint of the fast tier as objects, one per file, under
``<storage.prefix>/checkpoints/<run tag>/``, then verifies them: the MD5 the store answers against the
MD5 of what was sent (where it answers one), and every object read back (the embedded server's files
evicted first, so the bytes come from its disk) against the SHA-256 of the fast copy. The checkpoint's
manifest (``<tag>-<step>.manifest.json``, the same form as on a file-system tier) is put last: an object
without one is an incomplete checkpoint, never restored. Retention, removal and the restore's download
work on the run's own key prefix only; nothing outside the tool's prefix is ever written or deleted.

Every key is recorded in the run's own local record (``jobs.storage.objectstore.journal``, in the tool's
folder on ``checkpoint.slow.root``) before it is put, and the run's facts (kept? finished?) live there
too: the tool lists, retains and deletes only objects its record names, so an object or a manifest
someone else put under the prefix is neither taken for a checkpoint nor deleted.

A ``Bucket`` is plain data (the endpoint, the run's tag, the embedded server's keys held in memory only,
the records' folder): the drain's process gets it as it is, opens a client of its own and appends to the
same record.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from jobs.storage.objectstore import journal, objects, services
from jobs.storage.objectstore.client import StoreError
from jobs.storage.objectstore.endpoint import Credentials, Endpoint
from jobs.workloads.checkpoint.store import MANIFEST, read_manifest

SUBDIR = "checkpoints"  # below the tool's prefix, as on a file-system tier (saving.SUBDIR)
_CHUNK = 1 << 22
_CLIENTS: dict = {}  # (endpoint, access key) -> this process's client of the endpoint's service


@dataclass(frozen=True)
class Bucket:
    """One run's checkpoints in a bucket: the objects under ``key_prefix``."""

    endpoint: Endpoint
    tag: str
    # None: the user's own, where the service's client finds them
    credentials: Credentials | None = field(default=None, repr=False)
    server_data: str | None = None  # the embedded server's data folder (None: a user's endpoint)
    records: str | None = None  # the folder of the runs' local records (None: none; nothing is deleted)

    @property
    def key_prefix(self) -> str:
        return f"{self.endpoint.prefix}/{SUBDIR}/{self.tag}"

    @property
    def service(self) -> services.Service:
        return services.of(self.endpoint)

    @property
    def url(self) -> str:
        return self.service.location(self.endpoint, self.key_prefix)

    def client(self):
        key = (self.endpoint, self.credentials.access_key if self.credentials else None)
        if key not in _CLIENTS:
            _CLIENTS[key] = self.service.connect(self.endpoint, self.credentials, connections=8)
        return _CLIENTS[key]

    def record(self) -> journal.Journal | None:
        """The run's local record (named by its tag, unique per run), None without a records' folder."""
        return journal.Journal.at(Path(self.records), self.tag) if self.records else None

    def _recorded(self) -> set[str]:
        """The keys the run's record names: the only objects of the bucket the run calls its own."""
        j = self.record()
        rec = j.read() if j is not None else None
        if rec is None or not rec.of(self.endpoint):
            return set()
        return set(journal.keys_in(rec, self.endpoint))

    def _will_put(self, name: str) -> str:
        """The key of ``name``, recorded before it is put (the record made by the run's ``write_facts``)."""
        key = self._key(name)
        j = self.record()
        if j is None or not j.exists():
            raise StoreError(f"{self.url}: the run has no local record of its objects; nothing is put")
        j.put(key)
        return key

    def _key(self, name: str) -> str:
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"{name!r} is not a checkpoint file's name")
        return f"{self.key_prefix}/{name}"

    def _call(self, what, *args, **kwargs):
        """A request, its failure one line naming the endpoint."""
        try:
            return what(*args, **kwargs)
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - one line naming the endpoint
            raise self.service.why(e, self.endpoint) from None

    # what the drain does (store.Folder does the same on a file-system tier)

    def receive(self, prefix: Path, how: str) -> tuple[str, float, int]:
        """Put the complete checkpoint ``prefix`` (a fast-tier file prefix) as objects, verify them, put
        its manifest last. Returns (its name, seconds, bytes). ``how`` (the file flush) has no meaning for
        a store: a PUT is durable once answered."""
        t0 = time.perf_counter()
        man = read_manifest(prefix)
        if man is None:
            raise RuntimeError(f"{prefix} has no manifest: not a complete checkpoint")
        sums = {name: self._put(prefix.parent / name, meta) for name, meta in man["files"].items()}
        self.evict_server()
        for name in man["files"]:
            if self._sha256_of(name) != sums[name]:
                raise StoreError(
                    f"{self.service.where(self.endpoint)}: {self._key(name)} read back does not match the "
                    "checksum of what was put"
                )
        stored = {
            **man,
            "files": {n: {"bytes": m["bytes"], "sha256": sums[n]} for n, m in man["files"].items()},
            "copied_from": str(prefix.parent),
        }
        key = self._will_put(prefix.name + MANIFEST)
        self._call(self.service.put, self.client(), self.endpoint, key, json.dumps(stored).encode())
        return prefix.name, time.perf_counter() - t0, sum(m["bytes"] for m in man["files"].values())

    def _put(self, path: Path, meta: dict) -> str:
        """PUT one file with its MD5 (the store refuses a body that does not match it) and check the MD5
        it answers it holds; returns the file's SHA-256 (checked against the manifest's, if it has one)."""
        sha, md5 = hashlib.sha256(), hashlib.md5()  # noqa: S324 - the store's check, not a security one
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                sha.update(chunk)
                md5.update(chunk)
        if "sha256" in meta and meta["sha256"] != sha.hexdigest():
            raise RuntimeError(f"{path} does not match its manifest's checksum")
        key = self._will_put(path.name)
        with open(path, "rb") as f:
            held = self._call(self.service.put_checked, self.client(), self.endpoint, key, f, md5.digest())
        if held is not None and held != md5.hexdigest():
            raise StoreError(
                f"{self.service.where(self.endpoint)}: {key} stored with MD5 {held}, not the MD5 of what "
                "was sent"
            )
        return sha.hexdigest()

    def _chunks(self, name: str):
        """The object ``name`` of the run, chunk by chunk; a failure is one line naming the endpoint."""
        return objects.chunks(self.client(), self.endpoint, self._key(name), _CHUNK)

    def _sha256_of(self, name: str) -> str:
        h = hashlib.sha256()
        for chunk in self._chunks(name):
            h.update(chunk)
        return h.hexdigest()

    def evict_server(self) -> int | None:
        """The embedded server's files out of the page cache: a read after this comes from its disk.
        Returns the bytes of them still resident (None on a user's endpoint, whose cache is not ours)."""
        if self.server_data is None:
            return None
        from jobs.storage import cache

        files = [str(p) for p in Path(self.server_data).rglob("*") if p.is_file() and not p.is_symlink()]
        return cache.evict(files).resident_bytes_after

    def objects(self) -> dict[str, int]:
        """name -> size of every object of the run: in the bucket, and named by the run's record."""
        ours = self._recorded()
        if not ours:
            return {}
        there = objects.sizes_under(self.client(), self.endpoint, self.key_prefix)
        return {key.rsplit("/", 1)[1]: size for key, size in there.items() if key in ours}

    def manifest(self, name: str) -> dict | None:
        """The manifest of checkpoint ``name``, None when it has none."""
        try:
            body = self.service.get(self.client(), self.endpoint, self._key(name + MANIFEST))
        except Exception as e:  # noqa: BLE001
            if self.service.missing(e):
                return None
            raise self.service.why(e, self.endpoint) from None
        try:
            return json.loads(body)
        except ValueError:
            return None

    def complete(self) -> list[str]:
        """The run's checkpoints whose manifest and every object (with its size) are there, oldest first."""
        there = self.objects()
        done = []
        for name in (n[: -len(MANIFEST)] for n in there if n.endswith(MANIFEST)):
            man = self.manifest(name)
            files = (man or {}).get("files", {})
            if man and all(there.get(f) == m["bytes"] for f, m in files.items()):
                done.append((man.get("step", -1), name))
        return [n for _, n in sorted(done)]

    def retain(self, keep: int) -> list[str]:
        """Keep the newest ``keep`` complete checkpoints; delete the older ones (manifest first)."""
        done = self.complete()
        gone = done[:-keep] if keep > 0 else []
        for name in gone:
            self.remove(name)
        return gone

    def remove(self, name: str) -> None:
        """Delete checkpoint ``name``: its manifest first, so a cut-off removal leaves it incomplete."""
        there = self.objects()
        self._delete([name + MANIFEST])
        self._delete([n for n in there if n.startswith(name + ".") and n != name + MANIFEST])

    def drop_incomplete(self) -> list[str]:
        """Delete the run's objects no manifest lists (a drain cut off midway); returns their names."""
        there = self.objects()
        listed = set()
        for name in (n[: -len(MANIFEST)] for n in there if n.endswith(MANIFEST)):
            listed |= {name + MANIFEST, *((self.manifest(name) or {}).get("files", {}))}
        stray = sorted(set(there) - listed)
        self._delete(stray)
        return stray

    def remove_all(self) -> int:
        """Delete every object the run's record names, then the record; returns the bytes they held."""
        held = sum(self.objects().values())
        j = self.record()
        if j is not None:
            self._call(journal.clean, self.client(), self.endpoint, j)
        return held

    def bytes(self) -> int:
        return sum(self.objects().values())

    def _delete(self, names: list[str]) -> None:
        ours = self._recorded()
        keys = [self._key(n) for n in names if self._key(n) in ours]
        objects.delete_keys(self.client(), self.endpoint, keys, " of the run's checkpoints")

    # the run's facts, for the recovery after a kill: in its local record, never read from the bucket

    def write_facts(self, **facts) -> None:
        """Note the run's facts in its record, made by the first call (the run's process: its life is
        what tells a recovery whether the run still goes on)."""
        j = self.record()
        if j is None:
            return
        if not j.exists():
            j = journal.Journal.create(Path(self.records), self.tag, self.endpoint)
        j.note(**facts)

    def facts(self) -> dict:
        """The run's facts ({} when it noted none)."""
        j = self.record()
        rec = j.read() if j is not None else None
        return rec.facts if rec is not None and rec.of(self.endpoint) else {}

    # the restore

    def fetch(self, name: str, into: Path) -> tuple[Path, dict]:
        """GET checkpoint ``name``'s objects into the folder ``into`` as files; returns their prefix there
        and the manifest. The files are checked against the manifest's checksums by the caller."""
        man = self.manifest(name)
        if man is None:
            raise StoreError(f"{self.service.where(self.endpoint)}: {self._key(name + MANIFEST)} is missing")
        for fname in man["files"]:
            with open(into / fname, "wb") as f:
                for chunk in self._chunks(fname):
                    f.write(chunk)
        return into / name, man


def describe(b: Bucket) -> dict:
    """What a record says of the bucket: never a key."""
    return {
        "endpoint": b.endpoint.url,
        "bucket": b.endpoint.bucket,
        "prefix": b.key_prefix,
        "server": f"embedded {b.service.product}" if b.server_data is not None else "the user's endpoint",
    }
