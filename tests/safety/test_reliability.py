"""No hang, no orphan, no overwrite: real processes, real signals, real files.

A killed campaign leaves no helper process (tasks, tf.data service, traced child, burst-buffer
drain), a resume measures with the readers its record names, a dead drain is noticed instead of
waited for, and two runs of one cell never share (or delete) each other's checkpoints."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jobs import interrupts, records
from jobs.workloads.checkpoint import store as ckpt_store
from support.commands import campaign, python_env, start_module
from support.configs import one_run_of_folder
from support.files import make_jpegs
from support.processes import kill_alone, session_processes


def _checkpoint(folder: Path, name: str, nbytes: int = 1 << 20) -> Path:
    """A complete checkpoint (data file + manifest) as the saver leaves it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.data-00000-of-00001").write_bytes(os.urandom(nbytes))
    (folder / f"{name}.index").write_bytes(b"index")
    prefix = folder / name
    ckpt_store.write_manifest(prefix, int(name.rsplit("-", 1)[1]))
    return prefix


def _finish_in_thread(d: ckpt_store.Drain) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def go():
        try:
            box["out"] = d.finish()
        except BaseException as e:  # noqa: BLE001 - the test reads it
            box["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, box


def test_a_killed_drain_is_noticed_not_waited_for(tmp_path):
    d = ckpt_store.Drain(ckpt_store.Folder(tmp_path / "slow", "ckpt_x"), 5, "fsync")
    os.kill(d.proc.pid, signal.SIGKILL)
    d.proc.join(10)
    t, box = _finish_in_thread(d)
    t.join(10)
    assert not t.is_alive(), "Drain.finish() still waits for a drain process that was killed"
    assert isinstance(box["error"], ckpt_store.DrainError) and "ended (exit status -9)" in str(box["error"])


def test_a_ctrl_c_reaching_the_drain_does_not_end_it(tmp_path):
    """Ctrl-C goes to the whole process group: the drain goes on, the run decides (here: it finishes). The
    signal comes at once, while the spawned interpreter still starts (beside a CPU hog it was still
    importing after 1 s, and a KeyboardInterrupt ended it): the drain is born with SIGINT blocked."""
    fast = tmp_path / "fast"
    d = ckpt_store.Drain(ckpt_store.Folder(tmp_path / "slow", "ckpt_y"), 5, "fsync")
    os.kill(d.proc.pid, signal.SIGINT)
    d.put(_checkpoint(fast, "ckpt_y-4"))
    out = d.finish()
    assert [x["name"] for x in out] == ["ckpt_y-4"]
    assert ckpt_store.verify(tmp_path / "slow" / "ckpt_y-4") and not list(fast.glob("ckpt_y-4*"))


def test_a_signal_during_the_drain_wait_is_raised_and_the_drain_stopped(tmp_path):
    fast = tmp_path / "fast"
    d = ckpt_store.Drain(ckpt_store.Folder(tmp_path / "slow", "ckpt_z"), 5, "fsync")
    time.sleep(1.0)
    os.kill(d.proc.pid, signal.SIGSTOP)  # a drain that makes no progress (a stalled tier)
    d.put(_checkpoint(fast, "ckpt_z-4"))
    old = signal.getsignal(signal.SIGINT)
    interrupts.install()
    try:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        t0 = time.monotonic()
        # as the runner calls a TensorFlow workload
        with pytest.raises(KeyboardInterrupt), interrupts.deferred():
            d.finish()
        assert time.monotonic() - t0 < 5
    finally:
        signal.signal(signal.SIGINT, old)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        interrupts._received.clear()
        os.kill(d.proc.pid, signal.SIGCONT)
    d.abort()
    assert not d.proc.is_alive()


def test_a_helper_ends_when_its_parent_is_killed(tmp_path):
    """jobs.lifeline: a helper started with child_env() ends when its parent dies by SIGKILL."""
    code = (
        "import os, subprocess, sys, time\n"
        "from jobs import lifeline\n"
        "c = subprocess.Popen([sys.executable, '-c', 'from jobs import lifeline; import time; "
        "lifeline.bind(); time.sleep(120)'], env=lifeline.child_env())\n"
        f"open({str(tmp_path / 'pid.part')!r}, 'w').write(str(c.pid))\n"
        f"os.rename({str(tmp_path / 'pid.part')!r}, {str(tmp_path / 'pid')!r})\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], env=python_env())
    deadline = time.monotonic() + 30
    while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int((tmp_path / "pid").read_text())
    time.sleep(1.0)  # the child has bound itself
    parent.kill()
    parent.wait()
    assert _gone([child], 10), "the helper outlived its parent"


def _gone(pids: list[int], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not [p for p in pids if _alive(p)]:
            return True
        time.sleep(0.1)
    return False


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    """The campaign started as the leader of a session of its own, its output discarded."""
    return start_module(
        "campaign",
        *args,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _wait_for(pattern: str, base: Path, proc: subprocess.Popen, within_s: float = 240) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if list(base.glob(pattern)):
            return
        if proc.poll() is not None:
            pytest.fail(f"the campaign ended (status {proc.returncode}) before {pattern} appeared")
        time.sleep(0.05)
    pytest.fail(f"{pattern} never appeared")


SCENARIOS = {
    # a cell whose runs are two tasks each, killed while the tasks wait at the barrier
    "tasks": (["workload=readonly", "platform.tasks_per_node=2", "repeats=2"], "*/tasks/*/ready-*", 0),
    # a cell on the tf.data service (the dispatcher and two workers), killed once the workers are up
    "service": (
        ["workload=readonly", "input.service=true", "input.workers=2", "repeats=3"],
        "*/service/worker-1.ready",
        0,
    ),
    # a traced cell (its measuring child), killed 6 s after the child has started: 200 runs outlast them (20
    # ended first in 1 of 2 tries on a quiet machine, and the kill found no process)
    "traced": (["workload=readonly", "trace.posix=true", "repeats=200"], "*/posix/request.json", 6),
}


@pytest.mark.cells
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_kill_9_of_the_campaign_leaves_no_process(tmp_path, scenario):
    """SIGKILL to the campaign's pid alone: every helper ends within 30 s; after the multi-task kill, a
    resume measures each run with its two tasks (none left over from the killed campaign)."""
    extra, mark, settle = SCENARIOS[scenario]
    root = tmp_path / "tier"
    root.mkdir()
    out = tmp_path / "c"
    args = [
        "-m",
        *extra,
        "dataset.num_images=96",
        "dataset.median_kb=8",
        "batch_size=8",
        "warmup=0",
        "threads=1",
        f"storage.root={root}",
        f"hydra.sweep.dir={out}",
    ]
    proc = _start(args, tmp_path)
    _wait_for(mark, out, proc)
    time.sleep(settle)
    assert kill_alone(proc) == [], "left after kill -9 of the campaign"
    if scenario != "tasks":
        return
    p = campaign(*args, cwd=tmp_path)  # the resume
    assert p.returncode == 0, p.stderr[-3000:]
    rec = records.read(next(out.glob("*/record.json")))
    assert len(rec.runs) == 2
    for run in rec.runs:
        assert run["cache_state"] == "cold" and run["images"] == 96, run
        assert run["tasks"] == 2 and [t["images"] for t in run["task_results"]] == [48, 48]


@pytest.mark.cells
def test_a_sigint_to_the_campaign_alone_reaches_its_traced_child(tmp_path):
    """kill -INT <campaign pid> (not the group): the traced child is told, cleans up, one line, status
    130."""
    root = tmp_path / "tier"
    root.mkdir()
    out = tmp_path / "c"
    proc = start_module(
        "campaign",
        "-m",
        "workload=readonly",
        "trace.posix=true",
        "dataset.num_images=400",
        "dataset.median_kb=4",
        "batch_size=8",
        "repeats=100",
        "warmup=0",
        "threads=1",
        f"storage.root={root}",
        f"hydra.sweep.dir={out}",
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for("*/posix/request.json", out, proc)
        time.sleep(8)  # the child has imported TensorFlow and measures
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - t0
    finally:
        for pid, _ in session_processes(proc.pid):
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-3000:]
    assert took < 60, f"the campaign took {took:.0f} s to end after SIGINT"
    assert session_processes(proc.pid) == []
    lines = [x for x in err.splitlines() if x.strip()]
    assert "campaign: interrupted by SIGINT" in lines[-1], err[-3000:]  # the one line, last
    assert "Traceback" not in err and "clean-up ran" in err


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in (".lock", ".recovered")
    }


@pytest.mark.cells
@pytest.mark.tiers  # its mount namespace would hold a copy of a tier mounted meanwhile (its loop device)
def test_two_runs_of_one_cell_in_pid_namespaces_never_touch_each_others_checkpoints(tmp_path):
    """Under ``unshare --pid`` both campaigns' cells run as the same pid: the kept checkpoints of the
    first survive the second byte for byte, and each run has its own folder."""
    make_jpegs(tmp_path / "data", 16, classes=2)
    slow = tmp_path / "slow"
    slow.mkdir()
    args = [
        "workload=checkpoint",
        "workload.image_side=64",
        "workload.width=0.25",
        "workload.steps=4",
        "checkpoint.every=2",
        "checkpoint.target=slow",
        "checkpoint.keep=true",
        f"checkpoint.slow.root={slow}",
        f"checkpoint.fast.root={tmp_path}",
        *one_run_of_folder(tmp_path, tmp_path / "data"),
    ]
    folders = slow / "iocampaign" / "checkpoints"
    seen = []
    for k in (1, 2):
        p = subprocess.run(
            [
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                sys.executable,
                "-m",
                "campaign",
                "-m",
                *args,
                f"hydra.sweep.dir={tmp_path / f's{k}'}",
            ],
            cwd=tmp_path,
            env=python_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert p.returncode == 0, p.stderr[-3000:]
        rec = records.read(tmp_path / f"s{k}" / "0" / "record.json")
        seen.append((rec.runs[0]["checkpoint_dir"], rec.runs[0]["durable"]["slow"]))
        if k == 1:
            first = _digest(folders)
            assert len(first) >= 3
    (dir1, durable1), (dir2, _) = seen
    # the same pid, twice
    assert dir1 != dir2 and Path(dir1).name.split("_")[3] == Path(dir2).name.split("_")[3]
    after = _digest(folders)
    assert {k: v for k, v in after.items() if k.startswith(Path(dir1).name)} == first
    assert all(ckpt_store.verify(Path(dir1) / name, checksums=False) for name in durable1)


@pytest.mark.cells
def test_kill_9_of_the_paper_study_ends_its_running_grid(tmp_path):
    """The paper study runs each grid as a campaign of its own: killed with SIGKILL, it used to leave that
    grid running (and measuring) to its end."""
    out = tmp_path / "paper"
    proc = _start(
        [
            "+experiment=paper",
            "--scale",
            "ci",
            "--tiers",
            "local",
            "--only",
            "fig4_fig5",
            "--out",
            str(out),
            f"storage.root={tmp_path}",
            "repeats=100",
        ],
        tmp_path,
    )  # a grid that would run for minutes
    _wait_for("fig4_fig5/0/*.log", out, proc)  # its first cell runs
    assert kill_alone(proc) == [], "left after kill -9 of the paper study"


@pytest.mark.cells
def test_ctrl_c_of_the_paper_study_keeps_its_cells_and_its_line_says_how_to_resume_it(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, the study and its running grid) once a cell is recorded:
    the study's last line said "interrupted by SIGINT before any cell started; nothing was kept". Now it
    names the study's folder and the --out that resumes it, and that command skips the finished cells."""
    out = tmp_path / "paper"
    args = ["+experiment=paper", "--scale", "ci", "--tiers", "local", "--only", "table1", "--out", str(out)]
    log = tmp_path / "study.log"
    with open(log, "w") as f:
        proc = start_module(
            "campaign", *args, cwd=tmp_path, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
    _wait_for("table1/*/record.json", out, proc)  # its cell is recorded; the grid writes its tables
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(120)
    said = log.read_text()
    lines = [line for line in said.splitlines() if line.startswith("campaign:")]
    assert proc.returncode == 130 and "Traceback" not in said, said[-3000:]
    assert lines[-1] == (
        f"campaign: interrupted by SIGINT; the study's finished cells are kept in {out}; the same command "
        f"with --out {out} resumes it (finished cells are skipped)"
    ), said[-3000:]
    done = len(list(out.glob("table1/*/record.json")))
    again = campaign(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"({done} done before)" in again.stdout + again.stderr, again.stdout[-3000:]
