"""The cluster path: safe sbatch values, the dry run, and real campaigns on a real Slurm cluster."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from campaign.slurm import sacct
from jobs import records
from support.commands import analysis, campaign, campaign_status, python_env, run_module, start_module
from support.configs import SLURM_TINY, TOY_SEARCHPATH
from support.files import make_jpegs
from support.slurm import submitted

pytestmark = pytest.mark.cells  # every test runs on the live cluster (the slurm_cluster fixture)


def _queue() -> str:
    return subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout


def _sacct(job_ids) -> dict:
    out = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join({j.split("_")[0] for j in job_ids})],
        capture_output=True,
        text=True,
    ).stdout
    states = sacct.parse_sacct("\n".join(f"{line}|0:0|x" for line in out.splitlines()))
    return {j: states[j].state for j in job_ids if j in states}


KILL_A_WORKER = """
import os, signal, sys, time
from pathlib import Path
from jobs.execution import service
folder = Path(sys.argv[1])
try:
    with service.running(2, folder, (1, 1)) as svc:
        os.kill(int((folder / "worker-1.ready").read_text()), signal.SIGKILL)
        for _ in range(300):
            svc.check()
            time.sleep(0.2)
except service.ServiceError as e:
    print("ServiceError:", e)
"""


def test_dry_run_submits_nothing(slurm_cluster, tmp_path, disk_root):
    """The dry run of a two-node cell shows its job shape (--nodes, --ntasks-per-node) and submits nothing."""
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    p = campaign(
        "-m",
        "threads=1,2",
        "platform=slurm",
        "platform.dry_run=true",
        "platform.partition=debug",
        *SLURM_TINY,
        "platform.nodes=2",
        "platform.tasks_per_node=2",
        "workload=readonly",
        "storage=shared",
        f"storage.root={disk_root}",
        "hydra.sweep.dir=sweep",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert "dry run: 2 cells would be submitted" in p.stdout
    assert "#1: workload=readonly storage=shared" in p.stdout and "threads=2" in p.stdout
    assert "#SBATCH --array=0-1%1" in p.stdout and "#SBATCH --partition=debug" in p.stdout
    assert "#SBATCH --nodes=2" in p.stdout and "#SBATCH --ntasks-per-node=2" in p.stdout
    assert _queue().strip() == ""
    # no job submitted from this test's folder since it began (an earlier session's job may still reach the
    # accounting late, after the cluster started again: only this test's own would be the dry run's)
    submitted = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-S", since, "-o", "JobID,WorkDir"], capture_output=True, text=True
    )
    assert submitted.returncode == 0, submitted.stderr
    assert not [line for line in submitted.stdout.splitlines() if str(tmp_path) in line], submitted.stdout
    assert not (tmp_path / "sweep").exists()


# A campaign of 1- and 2-task cells as Slurm jobs (job-shape arrays, srun steps, merged records, status,
# scaling figure) runs across two nodes in test_two_nodes.py::test_a_two_node_campaign_reads_on_both_nodes.


def test_a_failing_task_of_a_job_step_fails_the_cell_with_its_rank(slurm_cluster, tmp_path):
    data = tmp_path / "data" / "c0"
    make_jpegs(tmp_path / "good", 4, classes=1)
    # rank 0 reads good files, rank 1 bad ones
    for i, good in enumerate(sorted((tmp_path / "good").rglob("*.jpg"))):
        data.mkdir(parents=True, exist_ok=True)
        (data / f"{2 * i:04d}.jpg").write_bytes(good.read_bytes())
        (data / f"{2 * i + 1:04d}.jpg").write_bytes(b"not a jpeg" * 100)
    sweep = tmp_path / "sweep"
    p = campaign(
        "-m",
        "platform=slurm",
        "platform.tasks_per_node=2",
        "dataset.source=folder",
        f"dataset.path={tmp_path / 'data'}",
        f"storage.root={tmp_path}",
        "batch_size=2",
        "repeats=1",
        "warmup=0",
        "platform.poll_s=1",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert p.returncode == 1, p.stderr[-2000:]
    job = submitted(sweep)[0][-1]
    assert _sacct([job]) == {job: "FAILED"}
    rec = records.read(sweep / "0" / "record.json")
    assert rec.status == records.FAILED and rec.error["type"] == "TaskError"
    assert re.match(
        r"task 1 on \S+ failed: RuntimeError: the pipeline delivered no image", rec.error["message"]
    )
    assert (
        subprocess.run(["pgrep", "-f", f"jobs.execution.tasks {sweep}"], capture_output=True).returncode == 1
    )


# The service's workers as one job step (each worker's own counters, every file once, nothing left) run
# across two nodes in test_two_nodes.py::test_service_workers_on_both_nodes.


def test_a_dead_worker_of_the_service_step_is_named(slurm_cluster, tmp_path):
    """srun ends the workers' step when one dies (--kill-on-bad-exit) and names that task on stderr:
    the error names the worker, the step's messages reach the cell's log, nothing is left. The service
    runs on a node of the allocation, as a cell's controller does (a step of one task)."""
    folder = tmp_path / "svc"
    p = subprocess.run(
        [
            "salloc",
            "--nodes=1",
            "--ntasks=2",
            "--cpus-per-task=1",
            "--time=3",
            "srun",
            "--ntasks=1",
            sys.executable,
            "-c",
            KILL_A_WORKER,
            str(folder),
        ],
        cwd=tmp_path,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert "ServiceError: tf.data service: the worker 1 ended on " in p.stdout, p.stdout + p.stderr
    assert "(Killed); srun ended the workers' step" in p.stdout, p.stdout
    assert "srun: error:" in p.stderr  # srun's own lines, passed on
    assert not folder.exists()
    assert (
        subprocess.run(["pgrep", "-f", f"jobs.execution.service .* {folder}"], capture_output=True).returncode
        == 1
    )


def test_failure_is_failed_in_slurm_and_a_rerun_submits_only_it(slurm_cluster, tmp_path):
    data = tmp_path / "data"
    (data / "c0").mkdir(parents=True)
    for i in range(8):
        (data / "c0" / f"{i}.jpg").write_bytes(b"not a jpeg" * 50)
    sweep = tmp_path / "sweep"
    args = (
        "-m",
        "workload=microbench,readonly",
        "platform=slurm",
        "dataset.source=folder",
        f"dataset.path={data}",
        f"storage.root={tmp_path}",
        "batch_size=4",
        "repeats=1",
        "platform.poll_s=1",
        f"hydra.sweep.dir={sweep}",
    )
    p = campaign(*args, cwd=tmp_path)
    assert p.returncode == 1, p.stderr[-2000:]
    jobs = submitted(sweep)
    assert _sacct([jobs[0][-1]]) == {jobs[0][-1]: "FAILED"}  # the cell raised: Slurm says FAILED
    assert _sacct([jobs[1][-1]]) == {jobs[1][-1]: "COMPLETED"}
    slurm = records.read(sweep / "1" / "record.json").provenance["slurm"]  # cells of one shape: one array
    assert slurm["array_job_id"] == jobs[1][-1].split("_")[0] and slurm["array_task_id"] == "1"
    assert "#SBATCH --array=0-1%1" in slurm["sbatch_script"]
    st = campaign_status(str(sweep))
    assert (
        st.returncode == 1
        and "failed" in st.stdout
        and "RuntimeError: the pipeline delivered no image" in st.stdout
    )
    # mend the data, run the same command again: only the failed cell goes back to Slurm
    shutil.rmtree(data)
    make_jpegs(data, 8, classes=1)
    p = campaign(*args, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    again = submitted(sweep)
    assert len(again[0]) == 2 and len(again[1]) == 1
    assert "#1: completed before" in p.stderr + p.stdout
    df = pd.read_csv(sweep / "results.csv")
    assert sorted(set(df["workload"])) == ["microbench", "readonly"]


def test_cancelled_cell_is_reported_and_the_campaign_ends(slurm_cluster, tmp_path, disk_root):
    make_jpegs(tmp_path / "data", 32)
    sweep = tmp_path / "sweep"
    proc = start_module(
        "campaign",
        "-m",
        "threads=1",
        "platform=slurm",
        "platform.poll_s=1",
        "dataset.source=folder",
        f"dataset.path={tmp_path / 'data'}",
        f"storage.root={disk_root}",
        "batch_size=8",
        "repeats=100000",
        "warmup=0",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        job = None
        while time.monotonic() < deadline:
            if (sweep / "submitted.json").exists():
                job = submitted(sweep)[0][-1]
                if _sacct([job]).get(job) == "RUNNING":
                    break
            time.sleep(0.5)
        assert job is not None
        time.sleep(2)
        subprocess.run(["scancel", job], check=True)
        t0 = time.monotonic()
        out, _ = proc.communicate(timeout=60)  # reported and ended within a minute
        assert time.monotonic() - t0 < 60
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1
    assert "SlurmCancelled" in out and "ended CANCELLED" in out
    rec = records.read(sweep / "0" / "record.json")
    assert rec.status == "failed" and rec.error["type"] == "SlurmCancelled"
    cells = pd.read_csv(sweep / "cells.csv")
    assert list(cells["status"]) == ["failed"]
    a = analysis(str(sweep), cwd=tmp_path)
    assert a.returncode == 1 and "ended CANCELLED" in a.stdout


def test_submit_and_return_then_status(slurm_cluster, tmp_path, disk_root):
    sweep = tmp_path / "sweep"
    t0 = time.monotonic()
    p = campaign(
        "-m",
        "threads=1",
        "platform=slurm",
        "platform.wait=false",
        f"storage.root={disk_root}",
        "dataset.num_images=64",
        "batch_size=32",
        "repeats=100000",
        "warmup=0",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert p.returncode == 0 and "submitted; the shell is yours again" in p.stdout
    assert time.monotonic() - t0 < 60
    job = submitted(sweep)[0][-1]
    for _ in range(120):
        st = campaign_status(str(sweep))
        if "running" in st.stdout or "pending" in st.stdout:
            break
        time.sleep(0.5)
    assert ("running" in st.stdout or "pending" in st.stdout) and job in st.stdout and st.returncode == 0
    subprocess.run(["scancel", job], check=True)
    for _ in range(60):
        st = campaign_status(str(sweep))
        if "cancelled" in st.stdout:
            break
        time.sleep(1)
    assert "1 cancelled" in st.stdout and st.returncode == 1


def _times(job_ids) -> list[tuple[str, str]]:
    """(Start, End) of every job of the arrays named, from sacct."""
    arrays = ",".join(sorted({j.split("_")[0] for j in job_ids}))
    out = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-o", "JobID,Start,End", "-j", arrays], capture_output=True, text=True
    ).stdout
    return [tuple(line.split("|")[1:3]) for line in out.splitlines() if line.strip()]


def test_paper_study_on_slurm_without_waiting_chains_its_grids(slurm_cluster, tmp_path, disk_root):
    """platform.wait=false (the Tegner preset's default): the study submits every grid and returns, each
    grid's arrays after the grid before (no two grids' cells on the device at once), builds no report
    from unfinished cells, and campaign.status follows the study's folder."""
    out = tmp_path / "study"
    p = campaign(
        "+experiment=paper",
        "--scale",
        "ci",
        "--tiers",
        "local",
        "--only",
        "table1,fig4_fig5",
        "--out",
        str(out),
        "platform=slurm",
        "platform.wait=false",
        f"storage.root={disk_root}",
        "threads=1",
        cwd=tmp_path,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "[paper] every grid was submitted to Slurm, each after the one before" in p.stdout
    assert not (out / "report.html").exists() and not (out / "claims.csv").exists()
    table1 = [j for js in submitted(out / "table1").values() for j in js]
    figs = [j for js in submitted(out / "fig4_fig5").values() for j in js]
    assert f"platform.after={max({j.split('_')[0] for j in table1}, key=int)}" in p.stdout
    for _ in range(300):
        st = campaign_status(str(out))
        if st.returncode == 0 and "pending" not in st.stdout and "running" not in st.stdout:
            break
        time.sleep(1)
    assert st.returncode == 0 and "== table1" in st.stdout and "== fig4_fig5" in st.stdout, (
        st.stdout + st.stderr
    )
    assert "2 completed" in st.stdout and "1 completed" in st.stdout
    ends = [end for _, end in _times(table1)]
    starts = [start for start, _ in _times(figs)]
    assert len(ends) == 1 and len(starts) == 2 and min(starts) >= max(ends), (starts, ends)
    a = analysis(str(out), cwd=tmp_path)
    assert a.returncode == 0 and (out / "report.html").exists(), a.stdout + a.stderr


def test_capacity_search_runs_its_cells_as_slurm_jobs_on_two_nodes(slurm_cluster, tmp_path, disk_root):
    """python -m campaign.capacity with platform=slurm platform.nodes=2 on the shared tier: the rate
    measurements and every count of emulated accelerators are Slurm jobs, each count a cell of N
    accelerators on each node (one srun step across both); the tier's rate is read from both nodes, one
    core's on one; the two namespaced nodes share one kernel, so the prediction gives each half its cores;
    the answer is per node and in all."""
    out = tmp_path / "cap"
    p = run_module(
        "campaign.capacity",
        "accelerator=ci_small",
        "storage=shared",
        f"storage.root={disk_root}",
        TOY_SEARCHPATH,
        "dataset.num_images=256",
        "repeats=1",
        "platform=slurm",
        "platform.nodes=2",
        "platform.cpus_per_task=4",
        "platform.poll_s=1",
        "--most",
        "2",
        "--out",
        str(out),
        cwd=tmp_path,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    row = pd.read_csv(out / "capacity.csv").iloc[0]
    assert (row["nodes"], row["kernels"]) == (2, 1) and row["measured_total"] == 2 * row["measured_n"]
    prove = submitted(out / "shared" / "prove")
    assert len(prove) == len(str(row["counts_tried"]).split())
    assert set(_sacct([j[-1] for j in prove.values()]).values()) == {"COMPLETED"}
    for folder in ("storage_rate", "cpu_rate"):
        assert submitted(out / "shared" / folder)  # the prediction's inputs were Slurm jobs too
    rate = [records.read(f) for f in (out / "shared" / "storage_rate").glob("*/record.json")]
    assert {t["host"] for t in rate[0].runs[0]["task_results"]} == {"n1", "n2"}  # read from both nodes
    one = [records.read(f) for f in (out / "shared" / "cpu_rate").glob("*/record.json")]
    assert one[0].config["platform"]["nodes"] == 1
    recs = [records.read(f) for f in (out / "shared" / "prove").glob("*/record.json")]
    assert all(r.provenance["slurm"]["job_id"] for r in recs)
    for r in recs:  # N accelerators on each node
        hosts = [t["host"] for t in r.runs[0]["task_results"]]
        per_node = r.config["platform"]["tasks_per_node"]
        assert sorted(set(hosts)) == ["n1", "n2"] and hosts.count("n1") == hosts.count("n2") == per_node
    results = pd.read_csv(out / "shared" / "prove" / "results.csv")
    tried = {2 * int(c) for c in str(row["counts_tried"]).split()}
    assert set(results["nodes"]) == {2} and set(results["tasks_per_cell"]) == tried
    n, total = int(row["measured_n"]), int(row["measured_total"])
    assert (
        f"[capacity] shared: {n} ci_small accelerator(s) per node ({total} on 2 nodes) held AU >= 90%"
        in p.stdout
    )
    assert "per node on 2 nodes" in p.stdout and "2 nodes share 1 kernel(s)" in p.stdout, p.stdout
    # the test nodes have 4 CPUs and a task takes 4: no count above 1 a node is submitted (it would pend for
    # ever)
    limit = (
        "1 a node: the nodes of the default partition have 4 CPUs "
        "and each accelerator's task takes platform.cpus_per_task=4"
    )
    assert f"[capacity] at most {limit}" in p.stdout and str(row["counts_tried"]) == "1"
    assert n == 0 or row["note"] == f"at least 1: the search stopped at {limit}"


def test_a_job_no_node_can_hold_is_refused_before_submitting(slurm_cluster, tmp_path):
    """3 tasks of 2 CPUs on nodes of 4 CPUs: Slurm would keep the job pending for ever (PartitionConfig);
    the campaign says so in one line and submits nothing."""
    before = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
    p = campaign(
        "-m",
        "platform=slurm",
        "platform.tasks_per_node=3",
        "workload=readonly",
        "dataset.num_images=256",
        "batch_size=16",
        f"hydra.sweep.dir={tmp_path / 's'}",
        cwd=tmp_path,
    )
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert (
        "platform.tasks_per_node=3 x platform.cpus_per_task=2 asks for 6 CPUs a node, "
        "but the nodes of the default partition have at most 4"
    ) in lines[0] and "nothing was submitted" in lines[0]
    assert subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout == before
    assert not (tmp_path / "s" / "submitted.json").exists()
