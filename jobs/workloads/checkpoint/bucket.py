"""Checkpoints in an object store (``storage@checkpoint.slow=s3``): the burst buffer's slow tier as a bucket.

The drain puts each complete checkpoint of the fast tier as objects, one per file, under
``<storage.prefix>/checkpoints/<run tag>/``, then verifies them: the store's ETag against the MD5 of
what was sent, and every object read back (the embedded server's files evicted first, so the bytes come
from its disk) against the SHA-256 of the fast copy. The checkpoint's manifest
(``<tag>-<step>.manifest.json``, the same form as on a file-system tier) is put last: an object without
one is an incomplete checkpoint, never restored. Retention, removal and the restore's download work on
the run's own key prefix only; nothing outside the tool's prefix is ever written or deleted.

Every key is recorded in the run's own local record (``jobs.storage.objectstore.journal``, in the tool's
folder on ``checkpoint.slow.root``) before it is put, and the run's facts (kept? finished?) live there
too: the tool lists, retains and deletes only objects its record names, so an object or a manifest
someone else put under the prefix is neither taken for a checkpoint nor deleted.

A ``Bucket`` is plain data (the endpoint, the run's tag, the embedded server's keys held in memory only,
the records' folder): the drain's process gets it as it is, opens a client of its own and appends to the
same record.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from jobs.storage.objectstore import journal
from jobs.storage.objectstore.client import StoreError, why
from jobs.storage.objectstore.endpoint import Credentials, Endpoint
from jobs.workloads.checkpoint.store import MANIFEST, read_manifest

SUBDIR = "checkpoints"  # below the tool's prefix, as on a file-system tier (saving.SUBDIR)
_CHUNK = 1 << 22
_CLIENTS: dict = {}  # (endpoint, access key) -> this process's boto3 client


@dataclass(frozen=True)
class Bucket:
    """One run's checkpoints in a bucket: the objects under ``key_prefix``."""

    endpoint: Endpoint
    tag: str
    credentials: Credentials | None = field(default=None, repr=False)  # None: the user's AWS settings
    server_data: str | None = None  # the embedded server's data folder (None: a user's endpoint)
    records: str | None = None  # the folder of the runs' local records (None: none; nothing is deleted)

    @property
    def key_prefix(self) -> str:
        return f"{self.endpoint.prefix}/{SUBDIR}/{self.tag}"

    @property
    def url(self) -> str:
        return f"s3://{self.endpoint.bucket}/{self.key_prefix}"

    def client(self):
        from jobs.storage.objectstore import client

        key = (self.endpoint, self.credentials.access_key if self.credentials else None)
        if key not in _CLIENTS:
            _CLIENTS[key] = client.connect(self.endpoint, self.credentials, connections=8)
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
            raise why(e, self.endpoint) from None

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
                    f"S3 endpoint {self.endpoint.url}, bucket {self.endpoint.bucket}: {self._key(name)} "
                    "read back does not match the checksum of what was put"
                )
        stored = {
            **man,
            "files": {n: {"bytes": m["bytes"], "sha256": sums[n]} for n, m in man["files"].items()},
            "copied_from": str(prefix.parent),
        }
        self._call(
            self.client().put_object,
            Bucket=self.endpoint.bucket,
            Key=self._will_put(prefix.name + MANIFEST),
            Body=json.dumps(stored).encode(),
        )
        return prefix.name, time.perf_counter() - t0, sum(m["bytes"] for m in man["files"].values())

    def _put(self, path: Path, meta: dict) -> str:
        """PUT one file with its Content-MD5 (the store refuses a body that does not match it) and check
        the ETag it answers; returns the file's SHA-256 (checked against the manifest's, if it has one)."""
        sha, md5 = hashlib.sha256(), hashlib.md5()  # noqa: S324 - S3's Content-MD5, not a security check
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                sha.update(chunk)
                md5.update(chunk)
        if "sha256" in meta and meta["sha256"] != sha.hexdigest():
            raise RuntimeError(f"{path} does not match its manifest's checksum")
        with open(path, "rb") as f:
            answer = self._call(
                self.client().put_object,
                Bucket=self.endpoint.bucket,
                Key=self._will_put(path.name),
                Body=f,
                ContentMD5=base64.b64encode(md5.digest()).decode(),
            )
        etag = str(answer.get("ETag", "")).strip('"')
        if etag and "-" not in etag and etag != md5.hexdigest():
            raise StoreError(
                f"S3 endpoint {self.endpoint.url}, bucket {self.endpoint.bucket}: {self._key(path.name)} "
                f"stored with ETag {etag}, not the MD5 of what was sent"
            )
        return sha.hexdigest()

    def _sha256_of(self, name: str) -> str:
        body = self._call(self.client().get_object, Bucket=self.endpoint.bucket, Key=self._key(name))["Body"]
        h = hashlib.sha256()
        for chunk in body.iter_chunks(_CHUNK):
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
        out = {}
        pages = (
            self.client()
            .get_paginator("list_objects_v2")
            .paginate(Bucket=self.endpoint.bucket, Prefix=self.key_prefix + "/")
        )
        try:
            for page in pages:
                mine = [o for o in page.get("Contents", []) if o["Key"] in ours]
                out.update({o["Key"].rsplit("/", 1)[1]: o["Size"] for o in mine})
        except Exception as e:  # noqa: BLE001 - one line naming the endpoint
            raise why(e, self.endpoint) from None
        return out

    def manifest(self, name: str) -> dict | None:
        """The manifest of checkpoint ``name``, None when it has none."""
        try:
            body = self.client().get_object(Bucket=self.endpoint.bucket, Key=self._key(name + MANIFEST))
        except Exception as e:  # noqa: BLE001
            if getattr(e, "response", {}).get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise why(e, self.endpoint) from None
        try:
            return json.loads(body["Body"].read())
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
        names = [n for n in names if self._key(n) in ours]
        for i in range(0, len(names), 1000):
            chunk = [{"Key": self._key(n)} for n in names[i : i + 1000]]
            answer = self._call(
                self.client().delete_objects,
                Bucket=self.endpoint.bucket,
                Delete={"Objects": chunk, "Quiet": True},
            )
            if answer.get("Errors"):
                first = answer["Errors"][0]
                raise StoreError(
                    f"S3 endpoint {self.endpoint.url}, bucket {self.endpoint.bucket}: {first.get('Key')} was "
                    f"not deleted: {first.get('Code')} {first.get('Message', '')}"
                )

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
            raise StoreError(f"S3 endpoint {self.endpoint.url}: {self._key(name + MANIFEST)} is missing")
        for fname in man["files"]:
            body = self._call(self.client().get_object, Bucket=self.endpoint.bucket, Key=self._key(fname))[
                "Body"
            ]
            with open(into / fname, "wb") as f:
                for chunk in body.iter_chunks(_CHUNK):
                    f.write(chunk)
        return into / name, man


def describe(b: Bucket) -> dict:
    """What a record says of the bucket: never a key."""
    return {
        "endpoint": b.endpoint.url,
        "bucket": b.endpoint.bucket,
        "prefix": b.key_prefix,
        "server": "embedded SeaweedFS" if b.server_data is not None else "the user's endpoint",
    }
