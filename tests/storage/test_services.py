"""The requests the burst buffer, a sharded checkpoint's ranks and a trace's replay make of a bucket
(``Service.put_checked``, ``put_parts``, ``stream``, ``get_range``, ``abort_uploads``), held to one
contract for every service that declares one of their abilities, each against its real embedded server
(SeaweedFS for S3, Azurite for Azure Blob): a body that does not match its MD5 is refused and leaves no
object, an object put in parts or not comes back whole in chunks or by ranges, a put in parts that fails
midway leaves nothing, and an upload cut off midway is aborted on the keys named and on no other."""

from __future__ import annotations

import hashlib
import io
import os

import pytest

from jobs.storage.objectstore import services
from jobs.storage.objectstore.client import StoreError

pytestmark = [pytest.mark.cells, pytest.mark.waits]  # real servers (about 2 s each to start)

# the abilities whose requests this contract holds (docs/extending.md's table)
ABLE = services.Abilities
HELD = {ABLE.CHECKPOINTS, ABLE.OWN_REQUESTS, ABLE.SHARDED_CHECKPOINTS}
SERVING = sorted(n for n, s in services.SERVICES.items() if HELD & s.can)


def _s3_unfinished(handle, endpoint, key: str) -> None:
    """A multipart upload started, one part sent, never completed: what a killed drain leaves."""
    upload = handle.create_multipart_upload(Bucket=endpoint.bucket, Key=key)["UploadId"]
    handle.upload_part(Bucket=endpoint.bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"p" * 1000)


def _azure_unfinished(handle, endpoint, key: str) -> None:
    """A block staged, never committed: what a killed drain leaves."""
    handle.get_blob_client(key).stage_block("MDAwMQ==", b"p" * 1000)


# how a test starts an upload it does not finish: each service's own requests, as a library would
UNFINISHED = {"s3": _s3_unfinished, "azure": _azure_unfinished}


@pytest.fixture(scope="module", params=SERVING)
def store(request, tmp_path_factory):
    service = services.get(request.param)
    srv = service.start(tmp_path_factory.mktemp(request.param) / "iocampaign" / "server", "contract")
    try:
        yield service, service.connect(srv.endpoint, srv.credentials), srv.endpoint
    finally:
        srv.stop()


def test_every_service_whose_requests_are_held_here_is_started():
    assert set(SERVING) == set(UNFINISHED) == {"s3", "azure"}


def test_a_put_is_checked_against_its_md5_and_comes_back_whole_in_chunks(store):
    service, handle, endpoint = store
    body = os.urandom(3_000_000)
    md5 = hashlib.md5(body).digest()  # noqa: S324 - the store's check
    held = service.put_checked(handle, endpoint, "iocampaign/ck/a", io.BytesIO(body), md5)
    assert held == md5.hex()
    chunks = list(service.stream(handle, endpoint, "iocampaign/ck/a", 1 << 20))
    assert b"".join(chunks) == body and max(len(c) for c in chunks) <= 4 << 20
    # a ranged GET (a trace's replayed read): the bytes asked for, from the offset asked
    ranged = service.get_range(handle, endpoint, "iocampaign/ck/a", 1_000_001, 4096)
    assert ranged == body[1_000_001:1_004_097]
    # a body that does not match the MD5 it was sent with is refused, in one line naming the store
    wrong = hashlib.md5(b"something else").digest()  # noqa: S324
    with pytest.raises(Exception) as refused:
        service.put_checked(handle, endpoint, "iocampaign/ck/b", io.BytesIO(body), wrong)
    line = str(service.why(refused.value, endpoint))
    assert isinstance(service.why(refused.value, endpoint), StoreError) and "\n" not in line
    assert endpoint.url in line, line
    with pytest.raises(Exception) as gone:
        service.get(handle, endpoint, "iocampaign/ck/b")
    assert service.missing(gone.value)
    # larger than one request takes (Azure puts it in blocks): the MD5 answered is the object's, or none
    large = os.urandom(70 << 20)
    md5 = hashlib.md5(large).digest()  # noqa: S324
    held = service.put_checked(handle, endpoint, "iocampaign/ck/large", io.BytesIO(large), md5)
    assert held in (md5.hex(), None)
    assert b"".join(service.stream(handle, endpoint, "iocampaign/ck/large", 1 << 20)) == large
    assert service.sizes_under(handle, endpoint, "iocampaign/ck") == {
        "iocampaign/ck/a": len(body),
        "iocampaign/ck/large": len(large),
    }


def test_an_unfinished_upload_is_aborted_on_the_keys_named_and_on_no_other(store):
    service, handle, endpoint = store
    ours, theirs = "iocampaign/cut/ck", "users/alice/ck"
    for key in (ours, theirs):
        UNFINISHED[service.name](handle, endpoint, key)
    assert service.abort_uploads(handle, endpoint, [ours, "iocampaign/cut/never"], []) == 1
    assert service.abort_uploads(handle, endpoint, [ours], []) == 0  # nothing of it is left
    assert service.abort_uploads(handle, endpoint, [theirs], []) == 1  # the other was left alone
    # an upload begun on a key that holds an object already: aborted, the object kept
    whole = [os.urandom(5 << 20), os.urandom(1000)]
    service.put_parts(handle, endpoint, "iocampaign/cut/kept", iter(whole), lambda upload: None)
    UNFINISHED[service.name](handle, endpoint, "iocampaign/cut/kept")
    assert service.abort_uploads(handle, endpoint, ["iocampaign/cut/kept"], []) == 1
    assert b"".join(service.stream(handle, endpoint, "iocampaign/cut/kept", 1 << 20)) == b"".join(whole)
    service.delete(handle, endpoint, ["iocampaign/cut/kept"])
    assert service.sizes_under(handle, endpoint, "iocampaign/cut") == {}
    assert service.sizes_under(handle, endpoint, "users") == {}


def test_an_object_put_in_parts_comes_back_whole_and_one_cut_off_leaves_nothing(store):
    service, handle, endpoint = store
    pieces = [os.urandom(5 << 20), os.urandom(5 << 20), os.urandom(1000)]  # S3's smallest part, then the last
    named: list = []
    service.put_parts(handle, endpoint, "iocampaign/parts/whole", iter(pieces), named.append)
    assert b"".join(service.stream(handle, endpoint, "iocampaign/parts/whole", 1 << 20)) == b"".join(pieces)
    assert len(named) <= 1  # the upload's ID, where the store names one
    service.put_parts(handle, endpoint, "iocampaign/parts/one", iter([b"x" * 10]), named.append)
    assert service.get(handle, endpoint, "iocampaign/parts/one") == b"x" * 10

    def cut_off():
        yield pieces[0]
        yield pieces[1]
        raise OSError("the writer died")

    with pytest.raises(OSError, match="the writer died"):
        service.put_parts(handle, endpoint, "iocampaign/parts/cut", cut_off(), named.append)
    assert service.abort_uploads(handle, endpoint, ["iocampaign/parts/cut"], []) == 0  # aborted already
    assert set(service.sizes_under(handle, endpoint, "iocampaign/parts")) == {
        "iocampaign/parts/whole",
        "iocampaign/parts/one",
    }
