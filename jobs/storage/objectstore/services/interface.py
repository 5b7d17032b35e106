"""The interface of an object-storage service (``storage.service``: the protocol a store speaks, S3 or
Azure Blob): how the tool reaches a store's bucket (Azure's container), the requests it makes there under
its own prefix, and the server it starts on loopback when the tier names no endpoint of the user's.

Everything above this package (the dataset's upload and listing, the runs' counted GETs, the clean-up,
the tier's serving context) calls these and compares no service's name; what a service cannot do yet it
declares (``Service.can``), and planning refuses it in one line naming the setting."""

from __future__ import annotations

from dataclasses import dataclass


class Abilities:
    """What a service's store can be used for beyond a dataset read by a framework's native reader."""

    USERS = "users"  # a user's own store at storage.endpoint
    TASKS = "tasks"  # several task processes of a cell, each with a client of its own
    NODES = "nodes"  # the embedded store spread over a cell's Slurm nodes
    OWN_REQUESTS = "own_requests"  # a workload's own GETs and PUTs (baseline, replay)
    CHECKPOINTS = "checkpoints"  # the burst buffer's slow tier (storage@checkpoint.slow)
    SHARDS = "shards"  # a sharded dataset (TFRecord, HDF5) as objects
    # workload=sharded_checkpoint's ranks writing their shards as objects, put in parts
    SHARDED_CHECKPOINTS = "sharded_checkpoints"

    # each in the words of a refusal: "<setting> is not built for Azure Blob yet (what it needs: <words>)"
    WORDS = {
        USERS: "a user's own store",
        TASKS: "several task processes in a cell, each with a client of its own",
        NODES: "the embedded store spread over a cell's Slurm nodes",
        OWN_REQUESTS: "a workload's own GETs and PUTs",
        CHECKPOINTS: "the burst buffer's slow tier",
        SHARDS: "a sharded dataset (TFRecord, HDF5) as objects",
        SHARDED_CHECKPOINTS: "the sharded checkpoint's ranks putting their shards in parts",
    }


@dataclass(frozen=True)
class Service:
    name: str  # storage.service=<name>
    scheme: str  # a location's scheme in the records: s3://bucket/prefix
    title: str  # what messages call the store: "S3"
    container: str  # what the service calls a bucket: "bucket", "container"
    product: str  # the embedded server: "SeaweedFS"
    key_env: tuple[str, str]  # where a client that reads its keys from the environment finds them
    can: frozenset = frozenset()  # Abilities this service's stores have
    # a preset of the service, named in messages (storage=s3)
    preset: str = ""
    # what its embedded server needs on a node, for the Slurm preview ("weed beside its Python, unshare")
    server_needs: str = ""

    def where(self, endpoint) -> str:
        """The store in one phrase, for the line a failure raises."""
        return f"{self.title} endpoint {endpoint.url}, {self.container} {endpoint.bucket}"

    def location(self, endpoint, prefix: str) -> str:
        """A prefix of the store as the records name it (``s3://bucket/prefix``)."""
        return f"{self.scheme}://{endpoint.bucket}/{prefix}"

    # ---- the requests (``handle``: what ``connect`` returned; one per process, thread-safe) ----
    def connect(self, endpoint, credentials=None, connections: int = 16):
        """A client for ``endpoint``; ``credentials`` None: the user's own, from the service's usual
        environment or profile. No retries: a failed request is counted, never hidden by a retry."""
        raise NotImplementedError

    def get(self, handle, endpoint, key: str) -> bytes:
        raise NotImplementedError

    def put(self, handle, endpoint, key: str, body) -> None:
        """Put ``body`` (bytes or a file open for reading) as ``key``."""
        raise NotImplementedError

    def sizes_under(self, handle, endpoint, prefix: str) -> dict[str, int]:
        """key -> size of every object under ``prefix`` + "/"."""
        raise NotImplementedError

    def delete(self, handle, endpoint, keys: list[str]) -> list[tuple[str, str]]:
        """Delete ``keys`` (a missing one is no error); returns (key, why) of each that was not deleted."""
        raise NotImplementedError

    def get_range(self, handle, endpoint, key: str, first: int, size: int) -> bytes:
        """``size`` bytes of ``key`` from byte ``first`` on (a ranged GET)."""
        raise NotImplementedError

    def stream(self, handle, endpoint, key: str, chunk: int):
        """GET ``key`` (the request made by this call) as an iterator of byte chunks of about ``chunk``
        bytes, read as they are taken (a service's SDK may size them its own way: Azure's first chunk is its
        first GET's, up to 32 MiB)."""
        raise NotImplementedError

    def put_checked(self, handle, endpoint, key: str, body, md5: bytes) -> str | None:
        """Put ``body`` (a file open for reading, seekable) as ``key``, sent with ``md5`` (the MD5 digest of
        its bytes) so that the store refuses a body that does not match it; a service that puts a large body
        in parts has each part checked instead, and the caller's read-back checks the whole. Returns the MD5
        the store answered it now holds (hex), or None where its answer carries none (an object put in
        parts). A put that fails leaves nothing of what it sent."""
        raise NotImplementedError

    def put_parts(self, handle, endpoint, key: str, pieces, started) -> None:
        """Put ``key`` from ``pieces`` (an iterator of bytes, at least one): one PUT when there is one piece,
        else an upload in parts, one request a piece, that a failure aborts (no part outlives it).
        ``started(upload)`` gets the upload's ID as soon as the store names one, before a part is sent (a
        kill between two parts leaves what ``abort_uploads`` needs); a store that names none never calls
        it."""
        raise NotImplementedError

    def abort_uploads(self, handle, endpoint, keys: list[str], known: list[tuple[str, str]]) -> int:
        """Abort every unfinished upload to ``keys`` (the tool's own, recorded): ``known``'s (key, upload
        ID, where the store names uploads) and any other the store still holds on one of them; what a key
        holds already is kept. Returns how many were aborted."""
        raise NotImplementedError

    def missing(self, e: BaseException) -> bool:
        """Whether a request failed because its object is not there."""
        raise NotImplementedError

    def why(self, e: BaseException, endpoint):
        """One ``StoreError`` for a failed request: the store, the service's error code and a hint."""
        raise NotImplementedError

    def make_bucket(self, handle, endpoint) -> None:
        """Create the bucket unless it exists (the embedded server's only)."""
        raise NotImplementedError

    def check_bucket(self, handle, endpoint) -> None:
        """Raise StoreError unless the bucket exists and the credentials may list under the prefix."""
        raise NotImplementedError

    # ---- the embedded server and planning ----
    def start(self, folder, bucket: str):
        """Start the embedded server in ``folder`` (the tool's own), its bucket made; returns it once it
        answers (``jobs.storage.objectstore.server.Server``'s interface)."""
        raise NotImplementedError

    def server_missing(self) -> str | None:
        """Why the embedded server cannot start on this machine (its program is not installed), or None."""
        raise NotImplementedError

    def client_missing(self) -> str | None:
        """Why the tool's own requests cannot be made here (its SDK is not installed), or None."""
        raise NotImplementedError

    def bucket_problem(self, name: str) -> str | None:
        """Why ``name`` is not a bucket name the service allows (None: it is)."""
        raise NotImplementedError

    def keys_problem(self, env) -> str | None:
        """Why the user's own store cannot be reached with the keys in ``env`` (the environment a cell
        inherits), for planning to say before anything runs; None where they are there, or where the
        service's client finds keys elsewhere too (S3's: a profile, an instance's role)."""
        return None
