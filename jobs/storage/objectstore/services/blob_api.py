"""Azure Blob (``storage.service=azure``): azure-storage-blob (Microsoft's SDK) for the tool's own requests,
Azurite as the embedded server (``azurite.py``). A bucket here is Azure's container; a key, a blob's name.

A user's keys are Azure's usual environment (``AZURE_STORAGE_ACCOUNT``, ``AZURE_STORAGE_KEY``); the
embedded server's are lent there for the processes that read them (a DataLoader's workers)."""

from __future__ import annotations

import base64
import ipaddress
import logging
import os
import re
import urllib.parse
from dataclasses import dataclass

from jobs.storage.objectstore.services.interface import Abilities, Service

# Azure's container names: 3-63 lower-case letters, digits and '-', beginning and ending with a letter or
# digit, no '--' (Azure Storage's REST reference: "Naming and referencing containers, blobs and metadata")
_CONTAINER = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?!-)){1,61}[a-z0-9]")

# The shape of the SDK's requests (its defaults, written here because the tool relies on them and the docs
# state them): a blob larger than SINGLE_PUT is put as Put Blocks of BLOCK, then its list committed; a GET
# takes at most SINGLE_GET bytes, and the rest of a larger blob comes by GETs of CHUNK_GET, one after another.
SINGLE_PUT = 64 << 20
BLOCK = 4 << 20
SINGLE_GET = 32 << 20
CHUNK_GET = 4 << 20

HINTS = {
    "AuthenticationFailed": "the account key is wrong (AZURE_STORAGE_KEY)",
    "AuthorizationFailure": "the credentials may not do this",
    "ContainerNotFound": "the container does not exist (storage.bucket)",
    "BlobNotFound": "no such blob",
}


@dataclass(frozen=True)
class Azure(Service):
    def connect(self, endpoint, credentials=None, connections: int = 16):
        import requests
        from azure.core.pipeline.transport import RequestsTransport
        from azure.storage.blob import ContainerClient

        # the SDK logs every request's headers at INFO, into the cell's log: its warnings are enough
        logging.getLogger("azure").setLevel(logging.WARNING)
        if credentials is None:  # the user's (or, in a worker, the lent) environment
            name, key = (os.environ.get(k) for k in self.key_env)
        else:
            name, key = credentials.access_key, credentials.secret_key
        session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=connections, pool_maxsize=connections)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        # a loopback endpoint (the embedded server) is never reached through an http_proxy
        session.trust_env = not _loopback(endpoint.url)
        account, container = endpoint.url.rstrip("/"), endpoint.bucket
        # the timeouts go to the transport: given beside one, the client's own are not used (300 s)
        transport = RequestsTransport(
            session=session, session_owner=False, connection_timeout=5, read_timeout=30
        )
        return ContainerClient(
            account,
            container,
            credential={"account_name": name, "account_key": key} if name and key else None,
            transport=transport,
            retry_total=0,  # a failed request is counted, never hidden by a retry the run does not see
            max_single_put_size=SINGLE_PUT,
            max_block_size=BLOCK,
            max_single_get_size=SINGLE_GET,
            max_chunk_get_size=CHUNK_GET,
        )

    def get(self, handle, endpoint, key: str) -> bytes:
        return handle.download_blob(key).readall()

    def put(self, handle, endpoint, key: str, body) -> None:
        handle.upload_blob(key, body, overwrite=True)

    def sizes_under(self, handle, endpoint, prefix: str) -> dict[str, int]:
        return {b.name: b.size for b in handle.list_blobs(name_starts_with=prefix + "/")}

    def delete(self, handle, endpoint, keys: list[str]) -> list[tuple[str, str]]:
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        failed = []
        for key in keys:
            try:
                handle.delete_blob(key)
            except ResourceNotFoundError:
                pass
            except HttpResponseError as e:
                failed.append((key, _code(e)))
        return failed

    def get_range(self, handle, endpoint, key: str, first: int, size: int) -> bytes:
        return handle.download_blob(key, offset=first, length=size).readall()

    def stream(self, handle, endpoint, key: str, chunk: int):
        """The SDK's own chunks: its first GET's (up to SINGLE_GET, held whole), then CHUNK_GET's."""
        return handle.download_blob(key).chunks()

    def put_checked(self, handle, endpoint, key: str, body, md5: bytes) -> str | None:
        from azure.storage.blob import ContentSettings

        size = body.seek(0, os.SEEK_END)  # a file: seekable
        body.seek(0)
        blob = handle.get_blob_client(key)
        try:
            # validate_content: each request carries the MD5 of its body, which the store checks
            answer = blob.upload_blob(
                body,
                overwrite=True,
                validate_content=True,
                content_settings=ContentSettings(content_md5=bytearray(md5)),
            )
        except BaseException:
            _discarded(blob)
            raise
        if size > SINGLE_PUT:  # put in blocks, each checked: the commit's answer is the MD5 of its list
            return None
        held = answer.get("content_md5")
        return bytes(held).hex() if held else None

    def put_parts(self, handle, endpoint, key: str, pieces, started) -> None:
        """A blob of blocks, one Put Block a piece, then its list committed: Azure names no upload (the
        uncommitted blocks are the key's), so ``started`` is never called."""
        from azure.storage.blob import BlobBlock

        first, second = next(pieces), next(pieces, None)
        blob = handle.get_blob_client(key)
        ids = []
        try:
            if second is None:
                blob.upload_blob(first, overwrite=True)  # over SINGLE_PUT: the SDK's blocks
                return
            for number, body in enumerate((first, second, *pieces)):
                # a block's ID: base64, all of one length (Azure's rule)
                ids.append(base64.b64encode(f"{number:08d}".encode()).decode())
                blob.stage_block(ids[-1], body)
            blob.commit_block_list([BlobBlock(block_id=i) for i in ids])
        except BaseException:
            _discarded(blob)
            raise

    def abort_uploads(self, handle, endpoint, keys: list[str], known: list[tuple[str, str]]) -> int:
        """Azure names no upload to abort: a blob being put in blocks holds them uncommitted until a week has
        passed, or until its block list is committed or a blob is put by its name. So a key of ``keys``
        holding uncommitted blocks gets its committed list again (its content kept, they discarded); one
        with no blob yet is put empty, then deleted. A blob put whole (no blocks) keeps its content, and
        the stray blocks beside it their week."""
        from azure.core.exceptions import ResourceNotFoundError
        from azure.storage.blob import BlobBlock

        aborted = 0
        for key in keys:
            blob = handle.get_blob_client(key)
            try:
                committed, uncommitted = blob.get_block_list("all")
            except ResourceNotFoundError:
                continue
            if not uncommitted:
                continue
            if committed:
                blob.commit_block_list([BlobBlock(block_id=b.id) for b in committed])
            elif blob.exists():
                continue
            else:
                _discard(blob)
            aborted += 1
        return aborted

    def missing(self, e: BaseException) -> bool:
        from azure.core.exceptions import ResourceNotFoundError

        return isinstance(e, ResourceNotFoundError)

    def why(self, e: BaseException, endpoint):
        from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ServiceRequestError

        from jobs.storage.objectstore.client import StoreError

        where = self.where(endpoint)
        if isinstance(e, StoreError):
            return e
        if isinstance(e, ServiceRequestError):
            return StoreError(f"{where}: nothing answers there (the server down?)")
        if isinstance(e, ClientAuthenticationError) and e.response is None:
            # never sent: the SDK could not sign it with the key (a key that is not base64)
            signed_with = self.key_env[1]
            return StoreError(f"{where}: the request could not be signed with {signed_with} ({e.message})")
        if isinstance(e, HttpResponseError):
            code = _code(e)
            hint = HINTS.get(code, (e.reason or "").strip())
            return StoreError(f"{where}: {code}: {hint}")
        if isinstance(e, ValueError) and "credential" in str(e).lower():
            return StoreError(f"{where}: no credentials (AZURE_STORAGE_ACCOUNT/AZURE_STORAGE_KEY)")
        return StoreError(f"{where}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    def make_bucket(self, handle, endpoint) -> None:
        from azure.core.exceptions import ResourceExistsError

        try:
            handle.create_container()
        except ResourceExistsError:
            pass
        except Exception as e:  # noqa: BLE001 - one line naming the endpoint
            raise self.why(e, endpoint) from None

    def check_bucket(self, handle, endpoint) -> None:
        try:
            next(iter(handle.list_blobs(name_starts_with=endpoint.prefix + "/", results_per_page=1)), None)
        except Exception as e:  # noqa: BLE001 - one line naming the endpoint
            raise self.why(e, endpoint) from None

    def start(self, folder, bucket: str):
        from jobs.storage.objectstore.services import azurite

        return azurite.start(self, folder, bucket)

    def server_missing(self) -> str | None:
        from jobs.storage.objectstore.services import azurite

        if azurite.program() is None:
            return (
                "the embedded Azure Blob server needs Azurite and Node.js: make install puts Azurite in the "
                "venv with npm (or npm install -g azurite)"
            )
        return None

    def client_missing(self) -> str | None:
        import importlib.util

        try:
            found = importlib.util.find_spec("azure.storage.blob") is not None
        except ModuleNotFoundError:
            found = False
        return None if found else "storage=azure needs azure-storage-blob: pip install '.[azure]'"

    def keys_problem(self, env) -> str | None:
        key_var = self.key_env[1]
        missing = [k for k in self.key_env if not env.get(k)]
        if missing:
            return (
                f"{' and '.join(missing)} not set (a user's own account is reached with its name and key, "
                "in Azure's usual environment)"
            )
        try:
            base64.b64decode(env[key_var], validate=True)
        except ValueError:
            return f"{key_var} is not an account key (a key is base64, as the portal shows it)"
        return None

    def bucket_problem(self, name: str) -> str | None:
        if not name or not _CONTAINER.fullmatch(name):
            return (
                "Azure allows 3-63 lower-case letters, digits and single '-', beginning and ending with a "
                "letter or digit"
            )
        return None


def _discard(blob) -> None:
    """Drop the blob's uncommitted blocks (put empty, which discards them), and the blob."""
    blob.upload_blob(b"", overwrite=True)
    blob.delete_blob()


def _discarded(blob) -> None:
    """``_discard`` after a put of the tool's that failed: what it sent goes; a failure here is not the one
    to report (the run's record keeps the key, for the next run's clean-up)."""
    try:
        _discard(blob)
    except Exception:  # noqa: BLE001 - the put's failure is the one to report
        pass


def _code(e) -> str:
    """Azure's error code of a failed request (an enum or a string in the SDK), else its HTTP status; ""
    for an error raised before any request was sent (the SDK's signing error has neither)."""
    code = getattr(e, "error_code", None)
    return str(getattr(code, "value", code) or getattr(e, "status_code", None) or "")


def _loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


SERVICE = Azure(
    "azure",
    scheme="az",
    title="Azure Blob",
    container="container",
    product="Azurite",
    key_env=("AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY"),
    can=frozenset(
        {Abilities.USERS, Abilities.CHECKPOINTS, Abilities.OWN_REQUESTS, Abilities.SHARDED_CHECKPOINTS}
    ),
    preset="storage=azure",
    server_needs="Azurite in the venv or on PATH, and Node.js",
)
