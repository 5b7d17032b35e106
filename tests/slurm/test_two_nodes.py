"""Cells across two nodes of a real Slurm cluster (tests/slurm/up.sh --nodes 2: n1 and n2, each a slurmd in
its own network and UTS namespace, one file system): tasks on both nodes, the tf.data service's workers
on both, a node that dies and a task that hangs, and the cluster's own set-up and tear-down."""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from jobs import records
from support.commands import campaign, campaign_status, start_module
from support.configs import TOY_SEARCHPATH
from support.paths import SLURM_SCRIPTS
from support.slurm import submitted

pytestmark = pytest.mark.cells  # every test runs on the live cluster (the slurm_cluster fixture)

NODES = {"n1", "n2"}


def _steps(job: str) -> list[dict]:
    out = subprocess.run(
        ["sacct", "-n", "-P", "-o", "JobID,NodeList,NTasks,State", "-j", job.split("_")[0]],
        capture_output=True,
        text=True,
    ).stdout
    return [
        dict(zip(("id", "nodes", "ntasks", "state"), line.split("|"))) for line in out.splitlines() if line
    ]


def _sacct_states(job_ids) -> list[str]:
    out = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join({j.split("_")[0] for j in job_ids})],
        capture_output=True,
        text=True,
    ).stdout
    return [line.split("|")[1] for line in out.splitlines() if line.split("|")[0] in job_ids]


def _left(sweep: Path) -> str:
    """Task or service processes of this campaign still alive, on any node (one kernel: one pgrep)."""
    return subprocess.run(
        ["pgrep", "-af", f"jobs.execution.(tasks|service) .*{sweep}"], capture_output=True, text=True
    ).stdout


def test_a_two_node_campaign_reads_on_both_nodes(slurm_cluster, tmp_path, disk_root, capsys):
    """platform.nodes=2 platform.tasks_per_node=1,2: the job shape in sacct (in the dry run:
    test_slurm.py::test_dry_run_submits_nothing), every run's tasks on n1 and n2 (each evicting its own shard
    first), the merged run the sum of its tasks and of its nodes, each node judged cold by its own bytes, the
    device counted once for two nodes on one kernel."""
    sweep, n = tmp_path / "sweep", 512
    args = (
        "-m",
        "platform=slurm",
        "platform.nodes=2",
        "platform.tasks_per_node=1,2",
        "workload=readonly",
        "storage=shared",
        f"storage.root={disk_root}",
        f"dataset.num_images={n}",
        "batch_size=16",
        "repeats=1",
        "warmup=0",
        "platform.poll_s=1",
        f"hydra.sweep.dir={sweep}",
    )
    t0 = time.monotonic()
    p = campaign(*args, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "waiting for Slurm: 0 of 2 cells ended" in p.stdout + p.stderr  # progress while it waits
    jobs = {num: ids[-1] for num, ids in submitted(sweep).items()}
    assert set(_sacct_states(list(jobs.values()))) == {"COMPLETED"}
    assert jobs[0].split("_")[0] != jobs[1].split("_")[0]  # two job shapes: two arrays
    recs = {
        records.read(f).config["platform"]["tasks_per_node"]: records.read(f)
        for f in sweep.glob("*/record.json")
    }
    script = recs[2].provenance["slurm"]["sbatch_script"]
    # the controller: one task
    assert "#SBATCH --ntasks-per-node=2" in script and "--nodes=1 --ntasks=1" in script
    assert f"#SBATCH --dependency=afterany:{jobs[0].split('_')[0]}" in script  # one cell at a time
    slurm = recs[1].provenance["slurm"]
    assert slurm["job_id"] == jobs[0] and slurm["array_job_id"] is None  # a shape of one cell: a plain job
    assert slurm["node"] in NODES and "#SBATCH --array" not in slurm["sbatch_script"]
    figures = []
    for per_node, rec in recs.items():
        assert "#SBATCH --nodes=2" in rec.provenance["slurm"]["sbatch_script"]
        for run in rec.runs:
            tasks = run["task_results"]
            assert len(tasks) == 2 * per_node and {t["host"] for t in tasks} == NODES
            assert sorted(t["rank"] for t in tasks) == list(range(2 * per_node))
            assert [t["images"] for t in tasks] == [n // (2 * per_node)] * (2 * per_node)
            assert run["images"] == sum(t["images"] for t in tasks) == n and run["images_dropped"] == 0
            assert (
                run["images_per_s"] == pytest.approx(n / run["seconds"])
                and 0 <= run["task_start_spread_s"] < 1.0
            )
            # each shard evicted
            assert run["cache_state"] == "cold" and run["task_resident_bytes_before"] == 0
            nodes = {x["host"]: x for x in run["per_node"]}
            assert set(nodes) == NODES and all(x["tasks"] == per_node for x in nodes.values())
            assert sum(x["images"] for x in nodes.values()) == n
            assert sum(x["bytes_consumed"] for x in nodes.values()) == run["bytes_consumed"]
            assert sum(x["bytes_read_device"] for x in nodes.values()) == run["bytes_read_device"]
            for x in nodes.values():  # each node read its own share from the device
                assert x["cache_state"] == "cold" and x["bytes_read_device"] >= 0.9 * x["bytes_consumed"] > 0
            # n1 and n2 share this machine's kernel: its disk counters are taken once, on n1
            assert nodes["n1"]["device_counted_on"] == nodes["n2"]["device_counted_on"] == "n1"
            assert nodes["n1"]["device_read_bytes"] >= 0.9 * run["bytes_consumed"]
            assert nodes["n2"]["device_read_bytes"] is None
            figures.append(
                (
                    per_node,
                    run["run"],
                    run["images_per_s"],
                    nodes["n1"]["images_per_s"],
                    nodes["n2"]["images_per_s"],
                )
            )
        left = sorted(
            p.name
            for p in (
                sweep
                / str(next(k for k, j in jobs.items() if rec.provenance["slurm"]["job_id"] == j))
                / "tasks"
            ).rglob("*")
        )
        # no barrier file, heartbeat or abort
        assert all(name.startswith(("run", "result-")) for name in left), left
    for job in jobs.values():
        steps = [s for s in _steps(job) if s["ntasks"] in ("2", "4")]
        assert len(steps) == 1 and all(s["nodes"] == "n[1-2]" and s["state"] == "COMPLETED" for s in steps), (
            steps
        )
    assert _left(sweep) == ""
    r = pd.read_csv(sweep / "results.csv")
    assert sorted(r["tasks_per_cell"]) == [2, 4] and set(r["cache_state"]) == {"cold"}
    assert (sweep / "scaling.png").stat().st_size > 10_000
    st = campaign_status(str(sweep))
    assert st.returncode == 0 and st.stdout.startswith("2 completed")
    with capsys.disabled():  # the figures the note quotes
        took = time.monotonic() - t0
        print(f"\n[two nodes] campaign {took:.0f} s; tasks per node, run, images/s: all, n1, n2")
        for row in figures:
            print("[two nodes]", row[0], row[1], *(f"{v:.0f}" for v in row[2:]))


def test_service_workers_on_both_nodes(slurm_cluster, tmp_path, disk_root):
    """input.service=true across platform.nodes=2: one worker on each node, each reached by its node's
    address (not a host name, which need not resolve), both delivering, every file read once."""
    sweep, n = tmp_path / "sweep", 128
    p = campaign(
        "-m",
        "platform=slurm",
        "platform.nodes=2",
        "input.service=true",
        "input.workers=2",
        "workload=readonly",
        "storage=shared",
        f"storage.root={disk_root}",
        f"dataset.num_images={n}",
        "batch_size=16",
        "repeats=1",
        "warmup=0",
        "platform.poll_s=1",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rec = records.read(sweep / "0" / "record.json")
    assert "#SBATCH --nodes=2" in rec.provenance["slurm"]["sbatch_script"]
    consumer = rec.provenance["slurm"]["node"]
    for run in rec.runs:
        assert run["images"] == n and run["images_dropped"] == 0 and run["cache_state"] == "cold"
        workers = dict(w.split() for w in run["worker_nodes"])
        assert set(workers) == NODES and all(
            a.startswith(("10.", "172.", "192.")) for a in workers.values()
        ), workers
        # each worker's own counters
        assert run["service_workers"] == 2 and all(r > 0 for r in run["worker_mb_s"])
        assert run["bytes_read_syscall"] >= run["bytes_consumed"]  # every file read, by the workers
        other = next(h for h in NODES if h != consumer)  # the consumer read from a worker on the other node
        assert other in workers and run["service_dispatcher"].startswith(f"grpc://{workers[consumer]}:")
    job = submitted(sweep)[0][-1]
    workers_step = [s for s in _steps(job) if s["ntasks"] == "2"]
    # the workers: one step
    assert len(workers_step) == 1 and workers_step[0]["nodes"] == "n[1-2]", _steps(job)
    assert not (sweep / "0" / "service").exists()
    assert _left(sweep) == ""


def test_an_object_store_on_both_nodes_serves_the_readers_on_both_and_a_dead_nodes_server_fails_its_run(
    slurm_cluster, tmp_path, disk_root
):
    """storage=s3 across platform.nodes=2, two cells. In the first, a volume server and an S3 gateway run on
    n1 and on n2 (the master and the filer beside the controller), each node's task GETs its share through
    its own node's gateway, and in the cold run both nodes' volume servers read from their disks: parallel
    servers. In the second, n2's volume server is killed (SIGKILL) as the run's tasks start: the run fails
    naming n2's server (not a hang, not numbers with images lost). After both, nothing is left: no server,
    folder, hand-over file or key; the other node's servers stopped when the runner asked, n2's task
    removed its own folder when its server died."""
    sweep, n, root = tmp_path / "sweep", 256, disk_root / "s3nodes"
    # a user's files beside the servers' folders: in the root, and a folder named like the folder of a
    # killed server on n2 (its process gone, but no marker: not the tool's), which the nodes' clean-up of
    # stale folders must leave alone
    mine = {
        root / "notes.bin": os.urandom(5000),
        root / "iocampaign" / "s3servers" / "n2-999999999-0" / "x": b"kept",
    }
    for f, data in mine.items():
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
    proc = start_module(
        "campaign",
        "-m",
        "platform=slurm",
        "platform.nodes=2",
        "storage=s3",
        f"storage.root={root}",
        f"dataset.num_images={n}",
        "batch_size=16",
        "threads=2",
        "seed=0,1",
        "repeats=1",
        "warmup=0",
        "platform.poll_s=1",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline, killed = time.monotonic() + 300, False
        while not killed and time.monotonic() < deadline:  # cell 1's tasks beat: kill n2's volume server
            hands = [json.loads(f.read_text()) for f in (sweep / "1" / "s3nodes").glob("node-*.json")]
            beats = list((sweep / "1" / "tasks").glob("*/beats-*/[0-9]*"))
            n2 = next((h for h in hands if h["node"] == "n2"), None)
            if n2 and beats:
                os.kill(n2["volume_pid"], signal.SIGKILL)
                killed = True
            time.sleep(0.02)
        assert killed, "cell 1's tasks never started"
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, out[-3000:]
    ok, failed = (records.read(sweep / str(k) / "record.json") for k in (0, 1))
    store = ok.provenance["object_store"]
    assert ok.status == records.COMPLETED and store["server"] == "embedded SeaweedFS on 2 nodes"
    gateways = {x["node"]: x["url"] for x in store["nodes"]}
    assert set(gateways) == NODES and len({u.split("//")[1].split(":")[0] for u in gateways.values()}) == 2
    run = ok.runs[-1]
    assert {t["host"] for t in run["task_results"]} == NODES
    assert [t["images"] for t in run["task_results"]] == [n // 2] * 2
    assert run["images"] == run["requests"] == n and run["request_errors"] == 0
    assert run["cache_state"] == "cold" and run["server_bytes_read"] >= 0.9 * run["bytes_consumed"]
    # the objects lie on both nodes' volumes, and both nodes' servers read theirs from their disks (the split
    # is SeaweedFS's, random by volume: 9% on one node in one of this test's runs, about half in most)
    served = {x["node"]: x["bytes_read"] for x in run["server_nodes"]}
    assert set(served) == NODES and all(b > 0 for b in served.values()), served
    job = submitted(sweep)[0][-1]
    steps = [s for s in _steps(job) if s["id"].startswith(f"{job}.") and s["nodes"] == "n[1-2]"]
    assert len(steps) == 2, steps  # the servers' step and the run's tasks' step
    # the dead node's server: the run failed naming it, and kept no numbers
    assert failed.status == records.FAILED and failed.runs == [], failed.error
    assert "the volume server on n2 ended" in failed.error["message"], failed.error
    # nothing left of either cell's store
    assert [p.name for p in (root / "iocampaign" / "s3servers").iterdir()] == ["n2-999999999-0"]
    assert all(f.read_bytes() == data for f, data in mine.items())
    assert not list(sweep.glob("*/s3nodes"))
    assert subprocess.run(["pgrep", "-f", str(root)], capture_output=True).stdout == b""
    assert _left(sweep) == ""
    for f in (*sweep.rglob("*"), *root.rglob("*")):
        if f.is_file() and not f.is_symlink():
            assert not re.search(rb"IOC[0-9A-F]{16}", f.read_bytes()), f


def _netns_pids(node: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", f"iocslurm-{node}"], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _beating_on(sweep: Path, cell: int, node: str) -> int | None:
    """The pid of a task of ``cell`` that runs on ``node`` and has written its heartbeat (its process sits
    in the node's network namespace; its beat names the node)."""
    if not any(
        b.read_text().startswith(f"{node} ") for b in (sweep / str(cell) / "tasks").glob("*/beats-*/[0-9]*")
    ):
        return None
    mine = set(_netns_pids(node))
    out = subprocess.run(
        ["pgrep", "-f", f"jobs.execution.tasks {sweep}/{cell}/"], capture_output=True, text=True
    ).stdout
    pids = [int(x) for x in out.split() if int(x) in mine]
    return pids[0] if pids else None


def _seen(sweep: Path, cell: int) -> str:
    """What the sweep shows of ``cell`` and what Slurm says of the nodes, for a failure's message: each task's
    heartbeats (the node each names), whether the cell's record is there, and ``sinfo``'s node states."""
    beats = sorted(
        f"{b.relative_to(sweep)}: {b.read_text()[:40]!r}"
        for b in (sweep / str(cell) / "tasks").glob("*/beats-*/[0-9]*")
    )
    record = "written" if (sweep / str(cell) / "record.json").exists() else "not written"
    nodes = subprocess.run(["sinfo", "-N", "-h", "-o", "%N %T %E"], capture_output=True, text=True).stdout
    return f"cell {cell}: record {record}; beats {beats or 'none'}; sinfo:\n{nodes}"


def _wait_record(sweep: Path, cell: int, deadline: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() < deadline and not (sweep / str(cell) / "record.json").exists():
        time.sleep(0.2)
    return time.monotonic() - t0


def test_a_drained_node_is_named_with_its_reason(slurm_cluster):
    """What the waiting line adds while a cell is pending: Slurm 22.05's reason for the job (Resources,
    ReqNodeNotAvail) names no node; sinfo names the drained one and why, as its administrator said it."""
    from campaign.slurm import sacct

    drain = ["scontrol", "update", "nodename=n2", "state=drain", "reason=disk replaced"]
    subprocess.run(drain, check=True, capture_output=True, timeout=30)
    try:
        assert sacct.out_of_service() == ["n2 drained (disk replaced)"]
    finally:
        subprocess.run(["scontrol", "update", "nodename=n2", "state=resume"], capture_output=True, timeout=30)
    deadline = time.monotonic() + 30  # a resumed node may answer Slurm's ping a moment later (idle*)
    while sacct.out_of_service() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert sacct.out_of_service() == []


@pytest.fixture
def ram_root():
    """A folder on RAM (/dev/shm, which every namespaced node sees), removed after the test: a killed task
    that was writing there ends at once. On the disk, a task killed in fsync ends only when the kernel's
    write-back of every process's dirty pages lets it: on a busy CI machine that took 596 s, Slurm drained
    the node ("Kill task failed") and the campaign's next cell waited on it for ever."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="iocampaign-test-", dir="/dev/shm"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_hung_task_and_a_dead_node_fail_their_cells_naming_the_node(
    slurm_cluster, tmp_path, ram_root, capsys
):
    """Three cells of two ranks on two nodes (sharded checkpoints: tasks without TensorFlow's import): in the
    first a task on n2 hangs (SIGSTOP), in the second n2 dies (every process in its namespace killed:
    slurmd, the step's daemon, the tasks). Each cell fails within platform.task_silence_s naming the task
    and n2, the other node's tasks are ended and nothing is left; n2 comes back (its slurmd started again,
    as after a reboot) and the third cell runs on both nodes; campaign.status says which node failed."""
    sweep = tmp_path / "sweep"
    proc = start_module(
        "campaign",
        "-m",
        "platform=slurm",
        "platform.nodes=2",
        "workload=sharded_checkpoint",
        TOY_SEARCHPATH,
        "checkpoint_model=ci_tiny",
        "checkpoint.ranks_written=2",
        "seed=0,1,2",
        "storage=shared",
        f"storage.root={ram_root}",
        "repeats=1",
        "warmup=0",
        "platform.task_silence_s=5",
        "platform.poll_s=1",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        pid = None
        while pid is None and time.monotonic() < deadline:  # cell 0: the task on n2 stops as soon as it beats
            pid = _beating_on(sweep, 0, "n2")
            time.sleep(0.02)
        assert pid, f"no task of cell 0 ran on n2: {_seen(sweep, 0)}"
        os.kill(pid, signal.SIGSTOP)
        hung_s = _wait_record(sweep, 0, deadline)
        # n2 takes cell 1 once the stopped task's step has ended (its tasks write to RAM: killed, they end)
        deadline = time.monotonic() + 240
        pid = None
        while pid is None and time.monotonic() < deadline:  # cell 1: n2 dies
            pid = _beating_on(sweep, 1, "n2")
            time.sleep(0.02)
        assert pid, f"no task of cell 1 ran on n2: {_seen(sweep, 1)}; {_seen(sweep, 0)}"
        subprocess.run(["kill", "-KILL", *map(str, _netns_pids("n2"))])
        dead_s = _wait_record(sweep, 1, deadline)
        # the node comes back (as after a reboot): the third cell and the rest of the suite run on it
        up = subprocess.run(
            [str(SLURM_SCRIPTS / "up.sh"), "--nodes", "2"], capture_output=True, text=True, timeout=120
        )
        assert up.returncode == 0 and "started the slurmd of n2 again" in up.stdout, up.stdout + up.stderr
        out, _ = proc.communicate(timeout=300)  # the third cell, once n1's killed task has ended
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, out[-3000:]
    hung, dead = (records.read(sweep / str(k) / "record.json") for k in (0, 1))
    for rec, seconds in ((hung, hung_s), (dead, dead_s)):
        assert rec.status == records.FAILED and rec.error["type"] == "TaskError", rec.error
        assert (
            "task 1 on n2 stopped its heartbeat for 5 s (platform.task_silence_s)" in rec.error["message"]
        ), rec.error
        # the silence and srun's grace, not Slurm's SlurmdTimeout or the run's limit
        assert seconds < 30, seconds
        with capsys.disabled():
            print(f"\n[two nodes] cell failed {seconds:.1f} s after the fault: {rec.error['message']}")
    ok = records.read(sweep / "2" / "record.json")  # the campaign's other cell ran, on both nodes again
    assert ok.status == records.COMPLETED and {t["host"] for t in ok.runs[0]["task_results"]} == NODES
    assert _left(sweep) == ""
    assert not [
        f for f in sweep.rglob("*") if f.name.startswith(("go-", "ready-", "abort-", "beats-", "shards_"))
    ]
    assert not list((ram_root / "iocampaign" / "checkpoints").glob("shards_*/rank*/*.bin"))
    st = campaign_status(str(sweep))
    assert st.returncode == 1 and st.stdout.count("on n2 stopped its heartbeat") == 2, st.stdout


def test_up_and_down_touch_only_their_own_namespaces_and_links(slurm_cluster, tmp_path):
    """down.sh removes the nodes' namespaces, veth pairs and bridge it made and leaves a namespace it did not
    make; up.sh refuses a bridge of its name it did not make, leaving it; then comes up clean."""
    up, down = str(SLURM_SCRIPTS / "up.sh"), str(SLURM_SCRIPTS / "down.sh")
    subprocess.run(["ip", "netns", "add", "iocslurm-n9"], check=True)  # someone else's, by a name like ours
    try:
        d = subprocess.run([down], capture_output=True, text=True, timeout=120)
        assert d.returncode == 0, d.stdout + d.stderr
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert "iocslurm0" not in links and "iocslurm-v" not in links
        assert sorted(os.listdir("/run/netns")) == ["iocslurm-n9"]
        ps = subprocess.run(["ps", "-eo", "stat=,comm="], capture_output=True, text=True).stdout.splitlines()
        # zombies are ended
        assert not [x for x in ps if x.split()[1:] == ["slurmd"] and not x.startswith("Z")], ps
        subprocess.run(["ip", "link", "add", "iocslurm0", "type", "bridge"], check=True)  # not the script's
        try:
            r = subprocess.run([up, "--nodes", "2"], capture_output=True, text=True, timeout=120)
            assert r.returncode == 2 and "iocslurm0 exists and was not made by this script" in r.stderr, (
                r.stderr
            )
            assert "iocslurm0" in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        finally:
            subprocess.run(["ip", "link", "del", "iocslurm0"], check=True)
        bad = subprocess.run([up, "--nodes", "zero"], capture_output=True, text=True)
        assert bad.returncode == 2 and "--nodes must be a whole number" in bad.stderr
        t0 = time.monotonic()
        r = subprocess.run([up, "--nodes", "2"], capture_output=True, text=True, timeout=180)
        assert r.returncode == 0 and "nodes n1 n2" in r.stdout, r.stdout + r.stderr
        print(f"\n[two nodes] up.sh --nodes 2 after down.sh: {time.monotonic() - t0:.1f} s")
        host = subprocess.run(
            ["srun", "-N2", "-n2", "hostname"], capture_output=True, text=True, timeout=60
        ).stdout
        assert sorted(host.split()) == ["n1", "n2"]
    finally:
        subprocess.run(["ip", "netns", "del", "iocslurm-n9"])
        if subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:  # leave the suite a cluster
            subprocess.run([up, "--nodes", "2"], capture_output=True, timeout=180)
