"""``storage=azure`` as a campaign's tier, run as a user runs it: Azurite (Microsoft's emulator, a real
Azure Blob server) started for the campaign and gone after it, the dataset uploaded as one blob per image
and read by both frameworks' native readers through azure-storage-blob, every GET counted and the run
proved cold by the server's own disk reads; a server killed mid-run fails the run naming the endpoint,
with no key in any file; planning refuses, one line each, what the Azure service does not do yet."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from jobs.storage.objectstore import services
from jobs.storage.objectstore.services import azurite
from support.commands import campaign, python_env, start_module
from support.configs import TINY_BURST_BUFFER, TOY_SEARCHPATH
from support.processes import working_under as _procs_under

pytestmark = [pytest.mark.cells, pytest.mark.waits]  # real campaigns on a real Azurite (GETs wait)


def _rows(folder: Path) -> list[dict]:
    with open(next(folder.glob("multirun/*/*/results.csv"))) as f:
        return sorted(csv.DictReader(f), key=lambda r: int(r["cell_dir"]))


def _listening_ports() -> set[int]:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_both_frameworks_read_azurite_cold_by_counted_gets_and_nothing_is_left(disk_root, cwd):
    root = disk_root / "azroot"
    root.mkdir()
    p = campaign(
        "-m",
        "storage=azure",
        f"storage.root={root}",
        "framework=tensorflow,pytorch",
        "threads=2",
        "dataset.num_images=96",
        "repeats=2",
        cwd=cwd,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    runs = _rows(cwd)  # one row per measured run
    assert [r["framework"] for r in runs] == ["tensorflow"] * 2 + ["pytorch"] * 2
    for r in runs:  # one GET per image, each counted, none failed; read from the server's disk
        assert float(r["requests"]) == float(r["images"]) == 96 and float(r["request_errors"]) == 0
        assert 0 < float(r["get_latency_p50_ms"]) <= float(r["get_latency_p99_ms"])
        assert r["cache_state"] == "cold"
        assert float(r["server_bytes_read"]) >= 0.9 * float(r["bytes_consumed"]) > 0
    folder = next(cwd.glob("multirun/*/*/results.csv")).parent
    cells = [r for r in runs if r["run"] == runs[0]["run"]]
    stores = [json.loads((folder / r["record"]).read_text())["provenance"]["object_store"] for r in cells]
    assert {(s["service"], s["server"], s["client"]) for s in stores} == {
        ("azure", "embedded Azurite", "azure-storage-blob")
    }
    # one server for the campaign: put once, by its first cell to run (PyTorch's run before TensorFlow's)
    assert [s["objects_put"] for s in stores] == [0, 96]
    assert len({s["endpoint"] for s in stores}) == 1
    record = json.loads((folder / cells[0]["record"]).read_text())
    assert record["dataset"]["location"].startswith("az://iocampaign/iocampaign/datasets/")
    # the SDK's per-request header lines stay out of the cells' logs
    logs = [f for f in folder.rglob("*.log") if f.is_file()]
    assert logs and not any("x-ms-request-id" in f.read_text() for f in logs)
    # Azurite is gone with its folder, and its port no longer listens
    assert list((root / "iocampaign" / "s3servers").iterdir()) == []
    assert _procs_under(root) == []
    assert int(stores[0]["endpoint"].split(":")[2].split("/")[0]) not in _listening_ports()


def test_azurite_killed_mid_run_fails_the_run_naming_the_endpoint_and_no_key_is_written(disk_root, cwd):
    root = disk_root / "azkill"
    root.mkdir()
    env = python_env(TF_CPP_MIN_LOG_LEVEL="1")
    p = start_module(
        "campaign",
        "storage=azure",
        f"storage.root={root}",
        "threads=1",
        "dataset.num_images=256",
        "repeats=5",
        "warmup=0",
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    try:
        for line in p.stdout:  # the runs start as soon as the dataset is in the store
            lines.append(line)
            if " in az://" in line:
                break
        time.sleep(0.5)
        (node,) = _procs_under(root)
        environ = Path(f"/proc/{node}/environ").read_bytes().split(b"\0")
        account, key = (
            next(v for v in environ if v.startswith(b"AZURITE_ACCOUNTS=")).split(b"=", 1)[1].split(b":")
        )
        cmdline = Path(f"/proc/{node}/cmdline").read_bytes()
        assert key not in cmdline  # the key is in its environment only, never on a command line
        os.kill(node, signal.SIGKILL)
        rest = p.stdout.read()
        p.wait(timeout=120)
    finally:
        p.kill()
    err = "".join(lines) + rest
    assert p.returncode != 0, err[-2000:]
    assert "the embedded Azure Blob server (Azurite) at http://127.0.0.1:" in err, err[-2000:]
    assert "was killed by SIGKILL during the run" in err, err[-2000:]
    assert err.count("Traceback") == 0, err[-3000:]
    record = json.loads(next(cwd.glob("outputs/*/*/record.json")).read_text())
    assert record["status"] == "failed" and "http://127.0.0.1:" in record["error"]["message"]
    assert not record.get("runs")
    assert list((root / "iocampaign" / "s3servers").iterdir()) == [] and _procs_under(root) == []
    # the account's key is in no file the tool wrote, nor in what it printed
    assert key.decode() not in err
    for folder in (cwd, root):
        for f in folder.rglob("*"):
            if f.is_file() and not f.is_symlink():
                assert key not in f.read_bytes(), f
    assert account  # the account's name (not secret) was one of the tool's making


def test_ctrl_c_during_a_tensorflow_run_stops_the_server_and_removes_its_folder(disk_root, cwd):
    """SIGINT while TensorFlow's reader waits on a GET: the campaign ends at once (130) without its
    interpreter's shutdown, where ``atexit`` does not run; the server and its folder of blobs went with it
    all the same (they stayed until the next campaign, found by a red team; SeaweedFS's alike)."""
    root = disk_root / "azint"
    root.mkdir()
    p = start_module(
        "campaign",
        "storage=azure",
        f"storage.root={root}",
        "framework=tensorflow",
        "threads=1",
        "dataset.num_images=512",
        "repeats=5",
        "warmup=0",
        cwd=cwd,
        env=python_env(),
        fresh=True,  # python -m campaign as a user starts it: its own end, not a warm server's
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    try:
        for line in p.stdout:
            lines.append(line)
            if " in az://" in line:  # the runs start now: a fetch is in flight most of the time
                break
        time.sleep(1.5)
        p.send_signal(signal.SIGINT)
        rest = p.stdout.read()
        p.wait(timeout=60)
    finally:
        p.kill()
    out = "".join(lines) + rest
    assert p.returncode == 130, out[-3000:]
    assert list((root / "iocampaign" / "s3servers").iterdir()) == [], out[-2000:]
    assert _procs_under(root) == []


def test_both_frameworks_read_a_users_own_account_by_its_keys_and_leave_its_blobs_alone(disk_root, cwd):
    """``storage.endpoint`` on Azure: the user's own account (here a second Azurite with blobs of the user's),
    reached with the user's keys from Azure's usual environment; the dataset put under the tool's prefix
    only, read by counted GETs, its cache unknown (the store's disks are not this machine's to see)."""
    users = services.get("azure").start(disk_root / "users" / "iocampaign" / "server", "userdata")
    handle = services.get("azure").connect(users.endpoint, users.credentials)
    planted = {"alice/data.bin": os.urandom(50_000), "iocampaign-not-ours/x.bin": os.urandom(1000)}
    for key, body in planted.items():
        services.get("azure").put(handle, users.endpoint, key, body)
    root = disk_root / "azusers"
    root.mkdir()
    try:
        account = (users.credentials.access_key, users.credentials.secret_key)
        keys = dict(zip(services.get("azure").key_env, account))  # AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_KEY
        p = campaign(
            "-m",
            "storage=azure",
            f"storage.endpoint={users.endpoint.url}",
            "storage.bucket=userdata",
            f"storage.root={root}",
            "framework=tensorflow,pytorch",
            "threads=2",
            "dataset.num_images=64",
            "repeats=1",
            "warmup=0",
            cwd=cwd,
            env=python_env(**keys),
        )
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        rows = _rows(cwd)
        assert [r["framework"] for r in rows] == ["tensorflow", "pytorch"]
        for r in rows:
            assert float(r["requests"]) == float(r["images"]) == 64 and float(r["request_errors"]) == 0
            assert r["cache_state"] == "unknown" and r["server_bytes_read"] == ""
        held = services.get("azure").sizes_under(handle, users.endpoint, "alice")
        assert held == {"alice/data.bin": 50_000}
        for key, body in planted.items():
            assert services.get("azure").get(handle, users.endpoint, key) == body
        theirs = {b.name for b in handle.list_blobs()} - {k for k in planted}
        assert theirs and all(k.startswith("iocampaign/") for k in theirs)  # the dataset, under the prefix
        assert not (root / "iocampaign" / "s3servers").exists()  # no server of the tool's started
        secret = users.credentials.secret_key.encode()
        for f in (*cwd.rglob("*"), *root.rglob("*")):
            if f.is_file() and not f.is_symlink():
                assert secret not in f.read_bytes(), f
    finally:
        users.end()


def test_a_burst_buffer_drains_to_azurite_verifies_and_restores_cold(disk_root, cwd):
    """``storage@checkpoint.slow=azure``: the burst buffer's requests are its service's, so its checkpoints
    go to Azurite's container as to an S3 bucket: put with their MD5, read back cold and checked, the old
    one deleted, the last restored equal to the saved weights, and nothing of the run left behind."""
    root = disk_root / "azckpt"
    root.mkdir()
    p = campaign(
        *TINY_BURST_BUFFER,
        "storage@checkpoint.slow=azure",
        f"checkpoint.slow.root={root}",
        "framework=pytorch",
        f"storage.root={root}",
        cwd=cwd,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    run = json.loads(next(cwd.glob("outputs/*/*/record.json")).read_text())["runs"][-1]
    assert [c["step"] for c in run["checkpoints"]] == [2, 4]
    assert [n.rsplit("-", 1)[1] for n in run["durable"]["slow"]] == ["4"]  # max_to_keep=1: step 2 deleted
    where = run["checkpoint_store"]
    assert (where["service"], where["server"]) == ("azure", "embedded Azurite")
    fast, slow = run["restores"]
    assert fast["weights_equal"] is True and slow["source"].startswith(
        "az://iocampaign/iocampaign/checkpoints/"
    )
    assert slow["weights_equal"] is True and slow["checksums"] == "match" and slow["bytes"] > 1e6
    assert slow["cache_state"] == "cold" and slow["bytes_read_device"] >= 0.9 * slow["bytes"]
    assert run["checkpoint_bytes_left"] == 0
    assert not Path(run["checkpoint_dir"]).exists()
    assert list((root / "iocampaign" / "s3servers").iterdir()) == [] and _procs_under(root) == []
    assert list((root / "iocampaign" / "uploads").iterdir()) == []  # the run's record of its keys gone
    # the account's key (64 random bytes, base64: azurite.fresh_account) reached no file, the drain's included
    key = re.compile(rb"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{86}==")  # on its own, not the end of a figure's
    for f in (*cwd.rglob("*"), *root.rglob("*")):
        if f.is_file() and not f.is_symlink():
            assert not key.search(f.read_bytes()), f


def test_table_i_of_azurite_gets_and_puts_at_each_count_cold_through_the_tools_client(disk_root, cwd):
    root = disk_root / "aztable"
    root.mkdir()
    p = campaign(
        "workload=baseline",
        "storage=azure",
        f"storage.root={root}",
        "workload.file_gb=0.07",  # one object of 64 MiB: 2 in flight is measured on small objects only
        "workload.requests_in_flight=[1,2]",
        "dataset.num_images=64",
        "repeats=1",
        "warmup=0",
        cwd=cwd,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    folder = next(cwd.glob("outputs/*/*/record.json")).parent
    with open(folder / "table_i.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert (row["storage"], row["tool"]) == ("azure", "azure-storage-blob")
    assert float(row["read_mb_s"]) > 0 and float(row["write_mb_s"]) > 0
    (run,) = [r for r in json.loads((folder / "record.json").read_text())["runs"] if not r.get("warmup")]
    rates = run["object_mb_s"]
    assert set(rates["get_small"]) == set(rates["put_small"]) == {"1", "2"}
    assert set(rates["get_large"]) == set(rates["put_large"]) == {"1"}  # 2 in flight: more than one object
    assert run["object_device_ratio"]["get_large"] >= 0.9  # Azurite read every byte from its disk
    assert list((root / "iocampaign" / "s3servers").iterdir()) == [] and _procs_under(root) == []


def test_a_sharded_checkpoint_is_put_in_blocks_and_read_back_cold(disk_root, cwd):
    """``workload=sharded_checkpoint storage=azure``: the rank's shard put as blobs of 5 MiB blocks (the
    service's ``put_parts``), read back cold from Azurite's disk and checked, then removed with the
    server."""
    root = disk_root / "azshards"
    root.mkdir()
    p = campaign(
        "workload=sharded_checkpoint",
        "storage=azure",
        f"storage.root={root}",
        "checkpoint_model=ci_tiny",
        TOY_SEARCHPATH,
        "checkpoint.ranks_written=1",
        "workload.block_mb=1",
        "framework=tensorflow",
        "repeats=1",
        "warmup=0",
        cwd=cwd,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (run,) = json.loads(next(cwd.glob("outputs/*/*/record.json")).read_text())["runs"]
    assert run["ranks_written"] == 1 and run["checkpoint_gb"] * 1e9 > 1e7  # more than one block
    assert run["save_duration_s"] > 0 and run["load_duration_s"] > 0 and run["checkpoint_bytes_left"] == 0
    assert run["cache_state"] == "cold" and run["bytes_read_device"] >= 0.9 * run["bytes_consumed"]
    assert list((root / "iocampaign" / "s3servers").iterdir()) == [] and _procs_under(root) == []
    assert list((root / "iocampaign" / "uploads").iterdir()) == []  # the rank's record gone with its blobs


def test_a_key_that_cannot_sign_is_one_line_naming_it_and_not_the_sdks_crash():
    """A key the SDK cannot sign with (not base64) fails before any request is sent: one line naming the
    store and AZURE_STORAGE_KEY (it was an AttributeError from the error's missing code)."""
    from jobs.storage.objectstore.client import StoreError
    from jobs.storage.objectstore.endpoint import Credentials, Endpoint

    azure = services.get("azure")
    endpoint = Endpoint("http://127.0.0.1:9/account", "data", service="azure")
    handle = azure.connect(endpoint, Credentials("account", "not a key"))
    with pytest.raises(StoreError) as e:
        azure.check_bucket(handle, endpoint)
    said = str(e.value)
    assert "\n" not in said and said.startswith(azure.where(endpoint)), said
    assert "could not be signed with AZURE_STORAGE_KEY" in said, said


def test_planning_refuses_what_azure_does_not_do_yet_in_one_line(refusal, monkeypatch, tmp_path):
    def one(line, *words):
        assert line is not None and "\n" not in line, line
        for w in words:
            assert w in line, line

    assert refusal("storage=azure") is None
    assert refusal("storage=azure", "framework=pytorch") is None
    one(
        refusal("storage=azure", "storage.reader=fuse"),
        "storage.reader=fuse",
        "s3fs",
        "storage.service=azure",
    )
    # the user's own account: its name and key in Azure's usual environment, or one line before anything runs
    users = "storage.endpoint=http://127.0.0.1:9/account"
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_KEY", raising=False)
    one(refusal("storage=azure", users), users, "AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY not set")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", "account")
    one(refusal("storage=azure", users), "AZURE_STORAGE_KEY not set")
    monkeypatch.setenv("AZURE_STORAGE_KEY", "not a key")
    one(refusal("storage=azure", users), users, "AZURE_STORAGE_KEY is not an account key")
    monkeypatch.setenv("AZURE_STORAGE_KEY", "a2V5")
    assert refusal("storage=azure", users) is None
    # S3's keys are boto3's: its variables, or a profile, its files or a role (the S3 tests hold the rest)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_PROFILE", "users-profile")
    assert refusal("storage=s3", "storage.endpoint=http://127.0.0.1:9") is None
    bad_port = refusal("storage=azure", "storage.endpoint=http://127.0.0.1:99999/a")
    one(bad_port, "storage.endpoint", "Azure Blob")
    sas = "storage.endpoint='https://acct.blob.core.windows.net/?sv=2022-11-02&sig=abc'"
    one(refusal("storage=azure", sas), "carries credentials", "AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY")
    tasks = refusal("storage=azure", "platform.tasks_per_node=2")
    one(tasks, "platform.tasks_per_node=2", "not built", "several task processes in a cell")
    checkpoint = ("workload=sharded_checkpoint", "checkpoint_model=llama3_8b", "checkpoint.ranks_written=2")
    # what the service lacks, not a dataset's reads, for a workload that reads no dataset
    one(refusal("storage=azure", *checkpoint, "platform.tasks_per_node=2"), "several task processes")
    # every ability has its words for a refusal
    assert set(services.Abilities.WORDS) == {
        v for k, v in vars(services.Abilities).items() if k.isupper() and isinstance(v, str)
    }
    assert refusal("storage=azure", "workload=baseline") is None  # its requests are the service's
    assert refusal("storage=azure", "workload=sharded_checkpoint") is None  # TensorFlow's: put in blocks
    said = refusal("storage=azure", "workload=sharded_checkpoint", "framework=pytorch")
    one(said, "framework=pytorch", "s3torchconnector's S3StorageWriter", "speaks s3", "use storage=s3")
    one(refusal("storage=azure", "dataset.format=tfrecord"), "dataset.format", "not built")
    one(refusal("storage=azure", "storage.client=boto3"), "storage.client=boto3", "speaks s3")
    one(refusal("storage=s3", "storage.client=azure-storage-blob"), "azure-storage-blob speaks azure")
    one(refusal("storage=azure", "storage.bucket=two--dashes"), "storage.bucket=two--dashes", "container")
    # the service is the preset's: storage=azure storage.service=s3 measured SeaweedFS and said azure
    for contradicting in (("storage=azure", "storage.service=s3"), ("storage=s3", "storage.service=azure")):
        one(refusal(*contradicting), contradicting[1], "its preset's", "storage=azure")
    one(refusal("storage=azure", "storage.service=gcs"), "storage.service=gcs", "its preset's")
    one(refusal("storage=local", "storage.service=azure"), "storage.service=azure", "its preset's")
    bb = ("workload=checkpoint", "storage@checkpoint.slow=azure", "checkpoint.target=burst_buffer")
    assert refusal(*bb) is None
    one(refusal(*bb, "checkpoint.slow.client=boto3"), "checkpoint.slow.client=boto3", "azure-storage-blob")
    # a service that declares no checkpoints is refused, naming the ones that do
    monkeypatch.setitem(
        services.SERVICES, "azure", dataclasses.replace(services.get("azure"), can=frozenset())
    )
    one(refusal(*bb), "checkpoint.slow=azure", "a store of s3 so far", "storage@checkpoint.slow=s3")
    said = refusal("storage=azure", "workload=sharded_checkpoint")
    one(said, "workload=sharded_checkpoint", "not built for Azure Blob", "use storage=s3")
    monkeypatch.undo()
    monkeypatch.setattr(azurite, "program", lambda: None)
    one(refusal("storage=azure"), "storage=azure", "Azurite", "make install")
    assert services.get("azure").server_missing() is not None
    # the SDK's timeouts as they reach its transport (given beside a transport, the client's own are not
    # used: a stopped server held a run 300 s)
    from jobs.storage.objectstore.endpoint import Credentials, Endpoint

    handle = services.get("azure").connect(
        Endpoint("http://127.0.0.1:9/a", "c", service="azure"), Credentials("a", "a2V5")
    )
    config = handle._client._client._pipeline._transport.connection_config
    assert (config.timeout, config.read_timeout) == (5, 30)
    one(refusal("storage=azure", "storage.bucket=Upper"), "storage.bucket=Upper", "Azure Blob container name")
    one(refusal("storage=s3", "storage.bucket=Upper"), "storage.bucket=Upper", "S3 bucket name")
