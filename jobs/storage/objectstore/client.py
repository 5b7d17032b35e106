"""The S3 client the tool uses for every request (boto3, the AWS SDK for Python): one per process,
thread-safe, its errors turned into one line that names the endpoint and what to check."""

from __future__ import annotations

import ipaddress
import urllib.parse

from jobs.storage.objectstore.endpoint import Credentials, Endpoint


class StoreError(RuntimeError):
    """A request to the object store failed; the message names the endpoint, the bucket and why."""


def connect(endpoint: Endpoint, credentials: Credentials | None = None, connections: int = 16):
    """A boto3 S3 client for ``endpoint`` (path-style addressing, as S3-compatible stores on one host
    need); ``credentials`` None: the usual AWS environment, profile or instance role. No retries: a
    failed request is counted, never hidden by a retry the run does not see."""
    import boto3
    from botocore.config import Config

    keys = (
        {}
        if credentials is None
        else {"aws_access_key_id": credentials.access_key, "aws_secret_access_key": credentials.secret_key}
    )
    host = urllib.parse.urlsplit(endpoint.url).hostname or ""
    loopback = host == "localhost" or (_is_ip(host) and ipaddress.ip_address(host).is_loopback)
    config = Config(
        s3={"addressing_style": "path"},
        # a loopback endpoint (the embedded server) is never reached through an http_proxy: the request
        # and its signature would leave the node; any other endpoint takes the environment's proxies
        **({"proxies": {}} if loopback else {}),
        retries={"max_attempts": 1, "mode": "standard"},
        max_pool_connections=connections,
        connect_timeout=5,
        read_timeout=30,
    )
    return boto3.client("s3", endpoint_url=endpoint.url, region_name=endpoint.region, config=config, **keys)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def why(e: BaseException, endpoint: Endpoint) -> StoreError:
    """One line for a failed request: the endpoint, the bucket, the store's error code and a hint."""
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

    where = f"S3 endpoint {endpoint.url}, bucket {endpoint.bucket}"
    if isinstance(e, StoreError):  # said already
        return e
    if isinstance(e, ClientError):
        code = e.response.get("Error", {}).get("Code", "")
        hint = {
            "SignatureDoesNotMatch": "the secret key is wrong (AWS_SECRET_ACCESS_KEY or the profile's)",
            "InvalidAccessKeyId": "the store knows no such access key (AWS_ACCESS_KEY_ID or the profile's)",
            "AccessDenied": "the credentials may not do this",
            "NoSuchBucket": "the bucket does not exist (storage.bucket)",
        }.get(code, e.response.get("Error", {}).get("Message", ""))
        return StoreError(f"{where}: {code}: {hint}")
    if isinstance(e, EndpointConnectionError):
        return StoreError(f"{where}: nothing answers there (storage.endpoint; the server down?)")
    if isinstance(e, NoCredentialsError):
        return StoreError(f"{where}: no credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE)")
    return StoreError(f"{where}: {type(e).__name__}: {e}")


def make_bucket(s3, endpoint: Endpoint) -> None:
    """Create the bucket unless it exists (the embedded server's only)."""
    from botocore.exceptions import ClientError

    try:
        s3.head_bucket(Bucket=endpoint.bucket)
        return
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            raise why(e, endpoint) from None
    try:
        s3.create_bucket(Bucket=endpoint.bucket)
    except Exception as e:  # noqa: BLE001 - any failure is one line naming the endpoint
        raise why(e, endpoint) from None


def check_bucket(s3, endpoint: Endpoint) -> None:
    """Raise StoreError unless the bucket exists and the credentials may list under the prefix."""
    try:
        s3.list_objects_v2(Bucket=endpoint.bucket, Prefix=endpoint.prefix + "/", MaxKeys=1)
    except Exception as e:  # noqa: BLE001 - any failure is one line naming the endpoint
        raise why(e, endpoint) from None
