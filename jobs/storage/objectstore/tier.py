"""An object store as a cell's tier (``storage.kind=object``): the store served for the cell (the
embedded server under the tool's folder on ``storage.root``, which a process keeps for all its cells and
stops when it ends, or a user's endpoint reached with the usual AWS credentials), the dataset put there
once per content, and what each run needs: the GET
that counts itself, the server's own read counter (what a cold run is verified by), and a check that
fails the run, naming the endpoint, when any request failed.

Credentials never leave memory: the embedded server's are made for it, a user's are boto3's own
lookup; ``describe`` (what provenance records) names the endpoint, bucket, prefix and reader only.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import socket
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jobs import owned
from jobs.storage.objectstore import objects, services
from jobs.storage.objectstore.client import StoreError
from jobs.storage.objectstore.endpoint import Endpoint
from jobs.storage.objectstore.server import SUBDIR, clear_stale

log = logging.getLogger(__name__)

CONNECTIONS = 64  # the client's connection pool: the most requests in flight a cell asks for
REMOTE = "unknown (remote)"  # what a cold cache can be said to be on a user's endpoint


@dataclass
class Store:
    """The cell's store, open: its client, the embedded server (None: a user's endpoint), and the
    current run's request counters (``begin_run`` starts them afresh)."""

    endpoint: Endpoint
    client: Any
    server: Any = None  # jobs.storage.objectstore.server.Server
    requests: objects.Requests = field(default_factory=objects.Requests)
    first_error: str | None = None
    # the GET of the client the runs read through (``clients.ObjectClient.get``); None: ``client``'s (boto3)
    get: Any = None
    # its batch of GETs at once, where it has one (``clients.ObjectClient.get_batch``): the reader asks it
    get_batch: Any = None

    def fetch(self, key: str) -> bytes:
        """One counted GET; a failure is remembered (the run fails with it) and raised."""
        try:
            if self.get is not None:
                return objects.counted(self.requests, self.endpoint, key, self.get)
            return objects.get(self.client, self.endpoint, key, self.requests)
        except StoreError as e:
            self.first_error = self.first_error or str(e)
            raise

    @contextlib.contextmanager
    def reading_with(self, client):
        """The runs of one cell GET through ``client`` (``clients.ObjectClient``); the store, kept for the
        process's later cells, goes back to its own client after."""
        self.get, self.get_batch = client.get(self), client.get_batch(self)
        try:
            yield
        finally:
            self.get = self.get_batch = None

    def fetch_batch(self, keys: list[str], in_flight: int) -> list[bytes]:
        """``keys`` fetched at once by the client's batch (``in_flight`` GETs open at most), every request
        counted with its own start and end; the first failure is remembered and fails the run (raised as
        StoreError, naming the endpoint, as ``record`` raises it)."""
        made = self.get_batch(keys, in_flight)
        self.record([(start, end, len(body or b""), error) for start, end, body, error in made])
        return [body for _, _, body, _ in made]

    def record(self, requests) -> None:
        """Take requests another process made (a DataLoader worker's GETs: ``Requests.add``'s form) into
        the run's counters. A failed one ends the run at once, naming the endpoint (``end_run`` says why:
        the server's death, or this error): its numbers are no measurement, and the workers would
        otherwise go on asking a dead server for every image left (70 s for 1,024 images by the CRT
        client, against a server killed by hand)."""
        self.requests.add(requests)
        failed = next((r[3] for r in requests if r[3] is not None), None)
        if failed is None:
            return
        if not self.first_error:
            self.first_error = f"{services.of(self.endpoint).where(self.endpoint)}: {failed}"
        self.end_run()

    def keys(self) -> tuple[str, str] | None:
        """The embedded server's access key and secret, for a client that reads them from the environment
        only (s3torchconnector's); None for a user's endpoint, whose keys are the user's own setting, and in
        a task process, whose environment has them already (``task_env``)."""
        if self.server is None or self.server.credentials is None:
            return None
        return self.server.credentials.access_key, self.server.credentials.secret_key

    def begin_run(self) -> None:
        self.requests, self.first_error = objects.Requests(), None

    def end_run(self) -> None:
        """Raise StoreError when a request of the run failed or the server ended: a run that lost
        samples to the store is no measurement of it."""
        why = self.server.dead() if self.server is not None else None
        # the run's own GETs, when it made any (a sharded checkpoint's ranks count theirs in their processes)
        n = self.requests.count
        failed = f" ({self.requests.errors} of {n} requests failed)" if n else ""
        if why:
            said = self.server.last_line()
            where = f"storage={self.endpoint.service}"
            raise StoreError(f"{where}: {why} during the run{failed}" + (f": {said}" if said else ""))
        if self.first_error:
            raise StoreError(f"{self.first_error}{failed}")

    def counters(self) -> tuple[int, float, int | None] | None:
        """(bytes read from its disk, CPU seconds, S3 requests answered) of the embedded server so far
        (every node's, for one spread over the cell's nodes); None for a user's endpoint, whose machines
        the tool cannot see."""
        return None if self.server is None else self.server.counters()

    def disk_bytes_since(self, before: tuple | None, after: tuple | None = None) -> int | None:
        """The bytes the embedded server read from its disk between ``before`` and ``after`` (its
        ``counters`` then; ``after`` by default now); None where either is unknown (a user's endpoint)."""
        after = self.counters() if after is None else after
        return None if before is None or after is None else after[0] - before[0]

    def run_figures(self, before: tuple | None, seconds: float) -> dict:
        """The run's request metrics, and what the embedded server did meanwhile (``before``: its
        ``counters`` when the run began): its disk reads are the run's device bytes. Requests the tool
        did not make itself (s3fs's, ``storage.reader=fuse``) are counted as the server answered them;
        their latency is not measured."""
        out = self.requests.summary(seconds) if self.requests.count else {}
        after = self.counters()
        if before is not None and after is not None:
            out["server_bytes_read"] = self.disk_bytes_since(before, after)
            out["server_cpu_s"] = after[1] - before[1]
            if len(after) > 3:  # servers on every node: what each node's volumes read
                out["server_nodes"] = [
                    {"node": node, "bytes_read": read - before[3].get(node, 0)}
                    for node, read in sorted(after[3].items())
                ]
            if not self.requests.count and None not in (before[2], after[2]):
                out["requests"] = after[2] - before[2]
        # the server's disk reads are the data's device bytes: the reading process reads none of it from
        # a disk (None on a user's endpoint)
        out["bytes_read_device"] = out.get("server_bytes_read")
        return out

    def server_files(self) -> tuple[str, ...]:
        """The embedded server's files (its volumes and the filer's store): what a cold run evicts."""
        return () if self.server is None else self.server.files()

    def _server_kind(self) -> str:
        if self.server is None:
            return "the user's endpoint"
        nodes = getattr(self.server, "nodes", None)
        product = services.of(self.endpoint).product
        return f"embedded {product} on {len(nodes)} nodes" if nodes else f"embedded {product}"

    def describe(self) -> dict:
        """What the records say of the store: never a key."""
        return {
            "service": self.endpoint.service,
            "endpoint": self.endpoint.url,
            "bucket": self.endpoint.bucket,
            "prefix": self.endpoint.prefix,
            "server": self._server_kind(),
            "server_folder": str(self.server.folder) if self.server is not None else None,
            # what a run's cache_state rests on: the server's own reads, or nothing the tool can see
            "cache": "the server's reads from its disk" if self.server is not None else REMOTE,
        }


_OPEN: dict[Endpoint, Store] = {}  # the stores open in this process, for the readers' GETs


def opened(endpoint: Endpoint) -> Store:
    """The open store at ``endpoint`` (the native reader fetches through it); in a task process of the
    cell (``task_env``), the runner's store, reached with a client of its own."""
    if endpoint not in _OPEN and TASK_ENV in os.environ:
        _OPEN[endpoint] = _attached(endpoint, json.loads(os.environ[TASK_ENV]))
    try:
        return _OPEN[endpoint]
    except KeyError:
        where = services.of(endpoint).where(endpoint)
        raise StoreError(f"storage={endpoint.service}: no open store at {where}") from None


TASK_ENV = "IOCAMPAIGN_S3_SERVER"  # in a task process: where the runner's embedded server runs (no key)
_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


def task_env(endpoint: Endpoint) -> dict:
    """What a local task process of the cell needs to reach its store: for the embedded server, its keys
    as AWS's (in the task's environment only, never a file or a command line; ``None`` values: the user's
    own AWS settings taken out) and where it runs; for a user's endpoint, the user's own settings."""
    store = opened(endpoint)
    srv = store.server
    if srv is None:
        return {TASK_ENV: json.dumps(None)}
    key, secret = store.keys()
    if hasattr(srv, "handover"):  # servers on every node: each task finds its own node's
        seen = {"spread": str(srv.handover)}
    else:
        seen = {"pid": srv.pid, "folder": str(srv.folder), "ports": dict(srv.ports), "outer": dict(srv.outer)}
    return {
        **dict.fromkeys(_KEYS),
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": secret,
        TASK_ENV: json.dumps(seen),
    }


def _attached(endpoint: Endpoint, seen: dict | None) -> Store:
    from jobs.storage.objectstore import server

    srv = None
    if seen is not None and "spread" in seen:
        own = _own_node(seen)
        srv = server.Seen(int(own["volume_pid"]), Path(own["folder"]), endpoint)
    elif seen is not None:
        srv = server.Seen(
            int(seen["pid"]),
            Path(seen["folder"]),
            endpoint,
            dict(seen.get("ports") or {}),
            dict(seen.get("outer") or {}),
        )
    return Store(endpoint, services.of(endpoint).connect(endpoint, None, CONNECTIONS), srv)


def _own_node(seen: dict) -> dict:
    """This node's servers, as its task of the servers' step handed them over (``spread``)."""
    from jobs import nodes

    for f in Path(seen["spread"]).glob("node-*.json"):
        hand = json.loads(f.read_text())
        if hand["node"] == nodes.name():
            return hand
    raise StoreError(f"storage=s3: no S3 server runs on this node ({nodes.name()}) for the cell")


def on_this_node(ds):
    """The stored dataset ``ds`` as a task process reads it: through its own node's gateway where the
    store is spread over the cell's nodes, and with the files of the server it reads from (what the
    task evicts for a cold run: its own node's volumes)."""

    seen = json.loads(os.environ.get(TASK_ENV) or "null")
    endpoint = ds.store
    if seen is not None and "spread" in seen:
        endpoint = replace(endpoint, url=_own_node(seen)["url"])
    return replace(ds, store=endpoint, server_files=opened(endpoint).server_files())


@contextlib.contextmanager
def serving(st, root: str, spread: tuple[int, int, Path] | None = None):
    """The cell's store for the storage tier ``st`` (a ``jobs.schema.StorageConf`` of kind object): the
    embedded server under ``root``'s tool folder (``embedded``: one a process keeps for all its cells),
    or the user's endpoint with its bucket checked. ``spread``: (nodes, CPUs per node, hand-over folder)
    to spread the embedded server over the cell's Slurm nodes instead (``spread.py``), for this cell
    only."""
    prefix = (st.prefix or owned.NAME).strip("/")
    with contextlib.ExitStack() as stack:
        if st.endpoint:
            store = _users(Endpoint(st.endpoint, st.bucket, prefix, service=str(st.service)))
        elif spread is not None:  # this cell's own, stopped after it
            store = _served(stack.enter_context(_spread(root, st.bucket, *spread)), prefix)
        else:
            store = _served(embedded(root, st.bucket, str(st.service)), prefix)
        _OPEN[store.endpoint] = store
        try:
            yield store
        finally:
            _OPEN.pop(store.endpoint, None)


def _users(endpoint: Endpoint) -> Store:
    """A user's endpoint, its bucket checked, reached with the user's own credentials."""
    service = services.of(endpoint)
    handle = service.connect(endpoint, connections=CONNECTIONS)
    service.check_bucket(handle, endpoint)
    return Store(endpoint, handle)


def _served(srv, prefix: str) -> Store:
    """The store the tool serves (``srv``: an embedded server, or one spread over the cell's nodes)."""
    endpoint = replace(srv.endpoint, prefix=prefix)
    return Store(endpoint, services.of(endpoint).connect(endpoint, srv.credentials, CONNECTIONS), srv)


@contextlib.contextmanager
def _spread(root: str, bucket: str, nodes: int, cpus: int, handover: Path):
    """The embedded store spread over the cell's ``nodes`` Slurm nodes, stopped after the block."""
    from jobs.storage.objectstore import spread

    parent = owned.under_tool_folder(root, SUBDIR, setting="storage.root")
    clear_stale(parent)
    name = f"{socket.gethostname()}-{os.getpid()}-{len(_STARTED)}"
    srv = spread.start(root, bucket, handover, nodes, cpus, parent, name)
    log.info(
        "embedded S3 store (SeaweedFS) on %d nodes: gateways %s, the master and filer in %s",
        nodes,
        ", ".join(f"{n['node']} {n['url']}" for n in srv.nodes),
        srv.folder,
    )
    try:
        yield srv
    finally:
        srv.stop()


# (root, bucket, service) -> the embedded server this process keeps
_SERVERS: dict[tuple[str, str, str], Any] = {}


def embedded(root: str, bucket: str, service: str = "s3"):
    """The embedded server of ``service`` for ``root`` and ``bucket``: the one this process started for an
    earlier cell while it still serves (a campaign's cells share it, and the datasets it holds), else a new
    one. Every server this process started is stopped, its folder removed, when the process ends
    (``stop_all``)."""
    key = (os.path.realpath(root), bucket, service)
    kept = _SERVERS.pop(key, None)
    if kept is not None and kept.dead() is None:
        _SERVERS[key] = kept
        return kept
    if kept is not None:  # it ended (killed in an earlier cell): its folder goes, a new one starts
        kept.stop()
    if not _STARTED:
        from jobs import interrupts

        atexit.register(stop_all)
        interrupts.before_hard_exit(stop_all)  # Ctrl-C with a GET left inside the native reader
    parent = owned.under_tool_folder(root, SUBDIR, setting="storage.root")
    clear_stale(parent)
    name = f"{socket.gethostname()}-{os.getpid()}-{len(_STARTED)}"
    srv = services.get(service).start(parent / name, bucket)
    _SERVERS[key] = srv
    _STARTED.append(srv)
    log.info(
        "embedded %s server (%s) at %s, its data in %s", service, srv.product, srv.endpoint.url, srv.folder
    )
    return srv


_STARTED: list = []  # every embedded server this process started, in order


def stop_all() -> None:
    """Stop every embedded server this process started and remove their folders (idempotent)."""
    _SERVERS.clear()
    for srv in _STARTED:
        srv.stop()


def content_id(ds) -> str:
    """What names a dataset's content in the store: its name with a digest of its stored files' names and
    sizes, in order (the same files give the same objects, whoever uploaded them); shards (TFRecord,
    HDF5) are a content of their own, named with their format."""
    h = hashlib.sha256()
    for path, size in zip(*_stored(ds)):
        h.update(f"{os.path.basename(path)}\0{size}\n".encode())
    kind = "" if ds.format == "files" else f"-{ds.format}"
    return f"{ds.name}{kind}-{h.hexdigest()[:16]}"


def _stored(ds) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The files the store holds of ``ds`` and their sizes: one per image, or its shards."""
    if ds.format == "files":
        return ds.files, ds.sizes
    return ds.containers, ds.container_sizes


def put_dataset(store: Store, ds):
    """``ds`` (files on the tier's root) as the store holds it: uploaded unless its manifest is there,
    each image one object; returns the dataset to read and what the upload did (for provenance)."""

    service = services.of(store.endpoint)
    if not ds.files:  # a workload that reads no dataset (its runs put their own objects)
        where = service.location(store.endpoint, store.endpoint.prefix)
        return replace(ds, location=where, store=store.endpoint, server_files=store.server_files()), {}
    cid = content_id(ds)
    t0 = time.perf_counter()
    listing = objects.listing(store.client, store.endpoint, cid)
    put, files = 0, _stored(ds)[0]
    if listing is None or len(listing.keys) != len(files):
        try:
            listing, put = objects.upload(store.client, store.endpoint, [Path(f) for f in files], cid)
        except StoreError as e:
            raise _with_servers_word(e, store.server) from None
    took = time.perf_counter() - t0
    facts = {
        "dataset_prefix": listing.prefix,
        "objects": len(listing.keys),
        "objects_put": put,
        "upload_s": took,
        "upload_mb_s": listing.bytes / took / 1e6 if put and took > 0 else None,
    }
    log.info(
        "dataset %s in %s: %d objects (%d put now, %.1f s)",
        ds.name,
        service.location(store.endpoint, listing.prefix),
        len(listing.keys),
        put,
        took,
    )
    stored = replace(
        ds,
        location=service.location(store.endpoint, listing.prefix),
        store=store.endpoint,
        objects=listing.keys,
        server_files=store.server_files(),
    )
    return stored, facts


def _with_servers_word(e: StoreError, srv) -> StoreError:
    """A failed upload as the embedded server saw it: its death, or what it said last (a full disk's
    ENOSPC, where its answer was only "500: Internal Server Error")."""
    if srv is None:
        return e
    why, said = srv.dead(), srv.last_line()
    return StoreError(str(e) + (f"; {why}" if why else "") + (f"; the server said: {said}" if said else ""))


def as_files(ds, point: Path):
    """The stored dataset ``ds`` read as files where its prefix is mounted (``storage.reader=fuse``): each
    object's file (an image's, or a shard's), the server's files still what a cold run evicts."""

    files = tuple(str(point / key.rsplit("/", 1)[1]) for key in ds.objects)
    if ds.format != "files":
        return replace(ds, containers=files, store=None, location=str(point))
    return replace(ds, files=files, store=None, location=str(point))
