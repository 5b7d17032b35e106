"""The object clients (``jobs/storage/objectstore/clients/``): each a module declaring what it serves, one
interface for all; no client's name compared outside its package (read from the code's syntax tree)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs.errors import ConfigError
from jobs.storage.objectstore import clients
from jobs.storage.objectstore.client import StoreError

ROOT = Path(__file__).resolve().parents[2]


def test_every_client_declares_what_it_serves_and_each_framework_has_its_own():
    assert set(clients.CLIENTS) == {"boto3", "s3torchconnector", "s3dlio", "s3fs", "azure-storage-blob"}
    for c in clients.CLIENTS.values():
        assert c.frameworks and c.kinds == ("object",) and c.install and c.distribution and c.services
        assert c.installed()  # make install puts every one of them in the venv
    # the tool's own requests, one client per service
    assert {c.name: c.services for c in clients.CLIENTS.values() if c.tools} == {
        "boto3": ("s3",),
        "azure-storage-blob": ("azure",),
    }
    assert clients.mounting().name == "s3fs"
    fws = ("tensorflow", "pytorch", "jax")
    assert {fw: getattr(clients.own(fw), "name", None) for fw in fws} == {
        "tensorflow": "boto3",
        "pytorch": "s3torchconnector",
        "jax": None,  # reads no object store yet: refused at planning with the workload's frameworks
    }
    assert {fw: getattr(clients.own(fw, "azure"), "name", None) for fw in fws} == {
        "tensorflow": "azure-storage-blob",
        "pytorch": "azure-storage-blob",
        "jax": None,
    }
    with pytest.raises(ConfigError, match="storage.client=minio is not an object client"):
        clients.get("minio")


def test_a_clients_lent_keys_stay_for_the_block_and_the_earlier_environment_comes_back(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "users-own")
    monkeypatch.setenv("AWS_PROFILE", "users-profile")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    with clients.lent(("IOC0123456789ABCDEF", "s3cr3t")):
        assert os.environ["AWS_ACCESS_KEY_ID"] == "IOC0123456789ABCDEF"
        assert os.environ["AWS_SECRET_ACCESS_KEY"] == "s3cr3t" and "AWS_PROFILE" not in os.environ
    assert os.environ["AWS_ACCESS_KEY_ID"] == "users-own" and os.environ["AWS_PROFILE"] == "users-profile"
    assert "AWS_SECRET_ACCESS_KEY" not in os.environ
    with pytest.raises(RuntimeError), clients.lent(("IOC0123456789ABCDEF", "s3cr3t")):
        raise RuntimeError("a run that failed")
    assert os.environ["AWS_ACCESS_KEY_ID"] == "users-own" and "AWS_SECRET_ACCESS_KEY" not in os.environ
    with clients.lent(None):  # a user's endpoint: the user's environment as it is
        assert os.environ["AWS_ACCESS_KEY_ID"] == "users-own"
    # Azure's names for an Azure Blob store's keys: the AWS ones are left as they are
    monkeypatch.setenv("AZURE_STORAGE_KEY", "users-key")
    with clients.lent(("iocaccount", "a2V5"), ("AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY")):
        assert (
            os.environ["AZURE_STORAGE_ACCOUNT"] == "iocaccount" and os.environ["AZURE_STORAGE_KEY"] == "a2V5"
        )
        assert os.environ["AWS_ACCESS_KEY_ID"] == "users-own"
    assert os.environ["AZURE_STORAGE_KEY"] == "users-key" and "AZURE_STORAGE_ACCOUNT" not in os.environ


def test_no_object_client_is_compared_by_name_outside_its_package():
    """The runner, planning, the readers and the analysis ask the client (``ObjectClient``: its frameworks,
    whether it mounts, its GET, what it does around the runs) or read the record's ``object_store.client``;
    none compares a client's name."""
    from tests.campaign.test_layout import _names_compared

    owner = ROOT / "jobs" / "storage" / "objectstore" / "clients"
    paths = [
        p
        for pkg in ("campaign", "jobs", "analysis", "benchmarks")
        for p in (ROOT / pkg).rglob("*.py")
        if owner not in p.parents
    ]
    found = [line for p in paths for line in _names_compared(p, set(clients.CLIENTS))]
    assert not found, "object clients compared:\n" + "\n".join(found)


# run in a Python of its own: s3dlio's client is process-wide (its endpoint and runtime), and a test process
# that configured it would hand the next test's s3dlio (the s3_reader benchmark's) a stopped server
_DOC_CLIENT = """
import hashlib, importlib.util, os, sys
from pathlib import Path
from jobs.storage.objectstore import client, clients, server, tier

tmp = Path(sys.argv[1])
spec = importlib.util.spec_from_file_location("doc_client", tmp / "doc_client.py")
doc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(doc)
assert isinstance(doc.CLIENT, clients.ObjectClient) and doc.CLIENT.frameworks == ("tensorflow",)
srv = server.start(tmp / "iocampaign" / "s3server", bucket="docbucket")
try:
    s3 = client.connect(srv.endpoint, srv.credentials)
    body = os.urandom(50_000)
    s3.put_object(Bucket="docbucket", Key="iocampaign/doc/one.bin", Body=body)
    store = tier.Store(endpoint=srv.endpoint, client=s3, server=srv)
    with doc.CLIENT.reading(store, None, "", str(tmp)) as (ds, said):
        assert ds is None and said == {} and os.environ["AWS_ACCESS_KEY_ID"] == srv.credentials.access_key
        got = doc.CLIENT.get(store)("iocampaign/doc/one.bin")
    assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest()
    assert "AWS_ACCESS_KEY_ID" not in os.environ  # the keys were lent for the block only
finally:
    srv.stop()
print("read back")
"""


@pytest.mark.cells
@pytest.mark.waits
def test_the_client_of_docs_extending_gets_from_a_real_server_as_written(tmp_path):
    """docs/extending.md's object client, copied as a user copies it: its module loaded as written, its
    ``reading`` entered as the runner enters it, and its GET reading an object back from a real SeaweedFS
    server with the server's keys lent for the block only."""
    import subprocess
    import sys

    from support.commands import python_env

    text = (ROOT / "docs" / "extending.md").read_text()
    code = text.split("## Adding an object client\n", 1)[1].split("```python\n", 1)[1].split("\n```", 1)[0]
    (tmp_path / "doc_client.py").write_text(code)
    env = python_env()
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        env.pop(key, None)
    p = subprocess.run(
        [sys.executable, "-c", _DOC_CLIENT, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0 and p.stdout.strip() == "read back", p.stderr[-3000:]


# s3dlio's batched GETs as TensorFlow's native reader asks for them
# (jobs.frameworks.tensorflow.object_reads.batched), against a real server; in a Python of its own, as above
_BATCHED = """
import json, os, sys
from pathlib import Path
import tensorflow as tf
from jobs.frameworks.tensorflow import object_reads as s3
from jobs.storage.objectstore import client, clients, server, tier

tmp = Path(sys.argv[1])
srv = server.start(tmp / "iocampaign" / "s3server", bucket="batchbucket")
out = {}
try:
    s3c = client.connect(srv.endpoint, srv.credentials)
    keys = [f"iocampaign/b/{i:03d}" for i in range(64)]
    bodies = [os.urandom(20_000 + i) for i in range(64)]
    for k, b in zip(keys, bodies):
        s3c.put_object(Bucket="batchbucket", Key=k, Body=b)
    store = tier.Store(endpoint=srv.endpoint, client=s3c, server=srv)
    labels = tf.constant([0] * 64)

    def one_pass():
        stream, read = s3.batched(tf.data.Dataset.range(64), keys, labels, store.fetch_batch, 4)
        got = {}
        for i, data, nbytes, _ in stream.map(read).ignore_errors():
            got[int(i)] = data.numpy()
        return got

    cli = clients.get("s3dlio")
    with cli.reading(store, None, "", str(tmp)), store.reading_with(cli):
        got = one_pass()
        out["same"] = all(got[i] == bodies[i] for i in range(64)) and len(got) == 64
        out["requests"], out["most"] = store.requests.count, store.requests.max_in_flight
        out["p50"] = store.requests.percentile_ms(50)
        # the store stops answering: the GETs fail, and nothing is asked after the first batch
        srv.end()
        store.begin_run()
        out["after"] = len(one_pass())
        out["asked"], out["errors"] = store.requests.count, store.requests.errors
        out["first_error"] = store.first_error
finally:
    srv.stop()
print(json.dumps(out))
"""


@pytest.mark.cells
@pytest.mark.waits
def test_s3dlio_batches_keep_threads_gets_in_flight_each_counted_and_stop_at_the_first_failure(tmp_path):
    """TensorFlow's reader through s3dlio asks for 8 x threads keys a call, ``threads`` GETs in flight: the
    bytes come back whole and in order, every GET is counted with its own latency, the most open at once is
    the 4 asked for; once the server is gone the first batch's GETs fail and no later batch is asked."""
    import json
    import subprocess
    import sys

    from support.commands import python_env

    env = python_env()
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        env.pop(key, None)
    p = subprocess.run(
        [sys.executable, "-c", _BATCHED, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["same"] and out["requests"] == 64 and out["most"] == 4 and out["p50"] > 0, out
    assert out["after"] == 0 and out["asked"] == out["errors"] == 32, out  # one batch of 8 x 4, then none
    assert out["first_error"] and srv_named(out["first_error"]), out


def srv_named(line: str) -> bool:
    return "S3 endpoint http://127.0.0.1:" in line and "bucket batchbucket" in line


def test_the_service_of_docs_extending_stores_a_dataset_as_written(tmp_path, monkeypatch):
    """docs/extending.md's object-storage service, copied as a user copies it and given its line in
    ``SERVICES``: the tool's own upload, manifest, listing, counted GETs and clean-up run through it
    unchanged, and write only under the tool's prefix in its folder."""
    import importlib.util

    from jobs.storage.objectstore import objects, services
    from jobs.storage.objectstore.endpoint import Endpoint

    text = (ROOT / "docs" / "extending.md").read_text()
    section = text.split("## Adding an object-storage service\n", 1)[1].split(
        "## Adding an object client", 1
    )[0]
    (tmp_path / "folder_api.py").write_text(section.split("```python\n", 1)[1].split("\n```", 1)[0])
    spec = importlib.util.spec_from_file_location("folder_api", tmp_path / "folder_api.py")
    doc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(doc)
    assert isinstance(doc.SERVICE, services.Service)
    monkeypatch.setitem(services.SERVICES, "folder", doc.SERVICE)  # its line in SERVICES
    store = tmp_path / "store"
    (store / "bucket" / "users").mkdir(parents=True)
    (store / "bucket" / "users" / "theirs.bin").write_bytes(b"a user's object")
    endpoint = Endpoint(f"file://{store}", "bucket", "iocampaign", service="folder")
    handle = doc.SERVICE.connect(endpoint)
    files = []
    for i in range(5):
        files.append(tmp_path / f"img{i}.jpg")
        files[-1].write_bytes(os.urandom(1000 + i))
    assert objects.listing(handle, endpoint, "cid") is None  # nothing there yet: "not there" is asked of it
    listing, put = objects.upload(handle, endpoint, files, "cid")
    assert put == 5 and listing.prefix == "iocampaign/datasets/cid"
    assert objects.listing(handle, endpoint, "cid") == listing  # the manifest written last, read back
    stats = objects.Requests()
    got = [objects.get(handle, endpoint, key, stats) for key in listing.keys]
    assert got == [f.read_bytes() for f in files] and stats.count == 5 and stats.bytes == sum(listing.sizes)
    with pytest.raises(StoreError, match=r"^Folder endpoint file://.*, folder bucket: FileNotFoundError"):
        objects.get(handle, endpoint, "iocampaign/datasets/cid/gone", stats)
    assert stats.errors == 1
    assert objects.delete_prefix(handle, endpoint, "iocampaign/datasets/cid") == 6  # the images and manifest
    assert objects.sizes_under(handle, endpoint, "iocampaign") == {}
    assert (store / "bucket" / "users" / "theirs.bin").read_bytes() == b"a user's object"
