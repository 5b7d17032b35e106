"""A modelled tier whose FUSE layer is SIGKILLed while a campaign uses it: mid-run (its drive had started
serving the run's reads) and between runs. The runs read nothing more (ENOTCONN), the pipeline drops
what it cannot read, and the numbers would look like a faster, cache-bound tier: each such cell must
fail, naming the tier and the run, and leave no row in results.csv."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from jobs.storage.modeled import mount
from support.commands import start_module

# builds modelled tiers and runs cells on them; the tests that build tiers run in turn
pytestmark = [pytest.mark.cells, pytest.mark.tiers]


def _layer(backing: Path) -> int:
    """The pid of the live layer process serving ``backing``."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for d in os.listdir("/proc"):
            try:
                args = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
                state = Path(f"/proc/{d}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if b"jobs.storage.modeled" in args and str(backing).encode() in args and state != b"Z":
                return int(d)
        time.sleep(0.05)
    raise AssertionError(f"no layer process serves {backing}")


def _reads(mnt: Path) -> int:
    return json.loads(os.getxattr(mnt, mount.XATTR))["reads"]


def _signal_mid_run(mnt: Path, backing: Path, sig: int = signal.SIGKILL, reads: int = 40) -> int:
    """Send ``sig`` to the layer once its drive has served ``reads`` more reads (the next run is well
    under way)."""
    pid, before = _layer(backing), _reads(mnt)
    deadline = time.monotonic() + 30
    while _reads(mnt) < before + reads:
        assert time.monotonic() < deadline, "the next run never read"
        time.sleep(0.005)
    os.kill(pid, sig)
    return pid


def _campaign(tmp_path: Path, *settings: str, **popen) -> subprocess.Popen:
    """A micro-benchmark campaign on the modelled HDD mounted at ``tmp_path/mnt`` (128 images, two runs a
    cell), started with ``settings`` first (``-m`` among them); its output is read line by line from
    ``stdout``."""
    return start_module(
        "campaign",
        *settings,
        "workload=microbench",
        "storage=modeled_hdd",
        f"storage.root={tmp_path / 'mnt'}",
        f"storage.model.backing_dir={tmp_path / 'backing'}",
        "dataset.num_images=128",
        "dataset.num_classes=2",
        "batch_size=16",
        "repeats=2",
        "warmup=0",
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def _kill_between_runs(campaign: subprocess.Popen, backing: Path) -> int:
    """SIGKILL the layer while the campaign is stopped right after a run ended."""
    campaign.send_signal(signal.SIGSTOP)
    try:
        pid = _layer(backing)
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z":
            time.sleep(0.01)
    finally:
        campaign.send_signal(signal.SIGCONT)
    return pid


def test_a_run_whose_layer_was_killed_or_stopped_fails_naming_the_tier_and_keeps_no_numbers(tmp_path):
    """Three cells (threads=1, 2, 4), two runs each: the first cell's layer is killed mid-run 2, the
    second's between its runs 1 and 2, the third's stopped (SIGSTOP) mid-run 2. Before: the first two
    completed, from a few images (162 images/s from 275 of 512, labelled cache-bound) or none ("512
    dropped as unreadable"); the third waited in the kernel until a signal (last stop's note: run 3 held
    in the cache's eviction)."""
    mnt, backing, out = tmp_path / "mnt", tmp_path / "backing", tmp_path / "c"
    beside = tmp_path / "beside.bin"
    beside.write_bytes(os.urandom(4096))  # a user's file beside the mount point
    p = _campaign(tmp_path, "-m", "threads=1,2,4", "storage.model.answer_s=5", f"hydra.sweep.dir={out}")
    killed, lines = [], []
    bound = threading.Timer(300, p.kill)  # a campaign that waits for ever prints nothing: the read below too
    bound.start()
    try:
        for line in p.stdout:
            lines.append(line)
            if "run 1/2:" in line:
                if len(killed) == 0:
                    killed.append(_signal_mid_run(mnt, backing / "modeled_hdd"))
                elif len(killed) == 1:
                    killed.append(_kill_between_runs(p, backing / "modeled_hdd"))
                else:
                    killed.append(_signal_mid_run(mnt, backing / "modeled_hdd", signal.SIGSTOP))
        p.wait(timeout=300)
    finally:
        bound.cancel()
        p.kill()
        for pid in killed:  # a stopped layer the campaign left (a failed test) ends with the test
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    text = "".join(lines)
    assert len(killed) == 3, text[-3000:]
    assert ", 3 failed" in text, text[-3000:]
    recs = {
        json.loads(f.read_text())["config"]["threads"]: json.loads(f.read_text())
        for f in out.glob("*/record.json")
    }
    assert {t: r["status"] for t, r in recs.items()} == {1: "failed", 2: "failed", 4: "failed"}, text[-3000:]
    assert all(not r["runs"] for r in recs.values())
    assert recs[1]["error"]["message"] == (
        f"storage=modeled_hdd: the tier's FUSE layer (pid {killed[0]}) died during "
        "run 2; its numbers are dropped"
    )
    assert recs[2]["error"]["message"] in [
        f"storage=modeled_hdd: the tier's FUSE layer (pid {killed[1]}) died {when} "
        "run 2; its numbers are dropped"
        for when in ("before", "during")
    ]
    assert recs[4]["error"]["message"] == (
        f"storage=modeled_hdd: the tier's FUSE layer (pid {killed[2]}) did not answer for 5 s and was ended "
        "during run 2; its numbers are dropped"
    )
    assert not os.path.exists(f"/proc/{killed[2]}")  # ended and reaped, not left stopped
    assert recs[1]["error"]["type"] == recs[4]["error"]["type"] == "TierDied"
    assert "dropped as unreadable" not in text and "run 2/2:" not in text  # no run 2 was logged as measured
    results = out / "results.csv"
    assert not results.exists() or len(results.read_text().splitlines()) <= 1  # a header at most
    assert not os.path.ismount(mnt) and beside.stat().st_size == 4096


def test_a_tier_asked_says_whether_its_layer_lives(tmp_path):
    """The tier's own answer, with no campaign around it: alive while its layer serves, dead (naming the
    pid) once the layer is SIGKILLed, though its mount is still listed in /proc/self/mountinfo."""
    from jobs.storage.modeled.disk import HddGeometry

    t = mount.setup("modeled_hdd", str(tmp_path / "b"), str(tmp_path / "m"), HddGeometry())
    try:
        assert t.dead() is None
        os.kill(t.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while t.dead() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert t.dead() == f"the tier's FUSE layer (pid {t.pid}) died"
        assert mount.mounted_here(t)  # the mount outlives its layer: only the process tells
    finally:
        mount.teardown(t)
    assert not os.path.ismount(tmp_path / "m")


def _wait_until_stopped(pid: int, timeout_s: float = 30.0) -> None:
    """Until every thread of ``pid`` is stopped: a stop signal reaches a process's threads one by one, and
    on a busy machine a thread still running answers a request first (CI, 2026-11-30: a listing answered
    at once, the layer in state R)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = set()
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/stat", "rb") as f:
                states.add(f.read().rsplit(b")", 1)[1].split()[0])
        if states <= {b"T", b"t"}:
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} did not stop within {timeout_s:g} s")


def test_a_layer_that_dies_or_stops_before_the_runs_is_named_not_its_enotconn(tmp_path):
    """What the runner does with a cell's modelled tiers between their set-up and the runs (its dataset
    listed, generated or staged there: ``liveness.named``). Before (red team, 2026-11-30): a layer killed, or
    stopped and ended by its watch, while the dataset was generated failed the cell as ``OSError: [Errno 107]
    Transport endpoint is not connected``, naming no tier."""
    from jobs.storage.modeled import liveness
    from jobs.storage.modeled.disk import HddGeometry

    for sig, why in (
        (signal.SIGKILL, "died"),
        (signal.SIGSTOP, "did not answer for 1 s and was ended"),
    ):
        where = tmp_path / why.split()[0]
        t = mount.setup("modeled_hdd", str(where / "b"), str(where / "m"), HddGeometry())
        watch = liveness.Watch(t, answer_s=1).start()
        try:
            os.kill(t.pid, sig)
            if sig == signal.SIGSTOP:
                _wait_until_stopped(t.pid)
            with pytest.raises(liveness.TierDied) as e, liveness.named([t]):
                # asks the layer (a listing is not cached): refused at once by a killed one, and waiting on a
                # stopped one until its watch ends it
                os.listdir(where / "m")
            assert str(e.value) == (
                f"storage=modeled_hdd: the tier's FUSE layer (pid {t.pid}) {why} while the cell used it; "
                "its numbers are dropped"
            )
            assert isinstance(e.value.__cause__, OSError)
        finally:
            watch.stop()
            mount.teardown(t)
        assert not os.path.ismount(where / "m") and not os.path.exists(f"/proc/{t.pid}")


def test_a_layer_that_stops_after_the_last_question_is_ended_at_the_tear_down_and_named(tmp_path, caplog):
    """A layer that stops answering after the last run (its numbers were checked). Before: the watch's
    ``stop`` returned at once, the tear-down waited 10 s for ``umount`` and 10 s more for the layer before
    killing it (22 s after the stop, measured), and no line said so. Now ``stop`` asks a last question,
    waits for it as the watch would, and ends the layer naming why."""
    from jobs.storage.modeled import liveness
    from jobs.storage.modeled.disk import HddGeometry

    t = mount.setup("modeled_hdd", str(tmp_path / "b"), str(tmp_path / "m"), HddGeometry())
    watch = liveness.Watch(t, answer_s=2).start()
    try:
        time.sleep(1.5)  # a question asked and answered
        os.kill(t.pid, signal.SIGSTOP)
        _wait_until_stopped(t.pid)
        with caplog.at_level("ERROR", logger="jobs.storage.modeled.liveness"):
            watch.stop()
        why = f"the tier's FUSE layer (pid {t.pid}) did not answer for 2 s and was ended"
        assert f"storage=modeled_hdd: {why}" in caplog.text
        assert t.dead() == why
    finally:
        mount.teardown(t)
    assert not os.path.ismount(tmp_path / "m") and not os.path.exists(f"/proc/{t.pid}")


def _held_on_the_mount(pid: int, wait_s: float = 10) -> None:
    """Until the main thread of ``pid`` waits inside the kernel for the layer's answer (the checks and the
    cache's eviction between runs read the mount), where no signal but SIGKILL reaches it; at most
    ``wait_s`` (past that it waits elsewhere, for a batch, and the signal is taken at once)."""
    deadline = time.monotonic() + wait_s
    while Path(f"/proc/{pid}/task/{pid}/wchan").read_text() != "request_wait_answer":
        if time.monotonic() > deadline:
            return
        time.sleep(0.01)


@pytest.mark.parametrize(
    "sig,between",
    [(signal.SIGINT, True), (signal.SIGTERM, True), (signal.SIGINT, False)],
    ids=["ctrl-c-between-runs", "sigterm-between-runs", "ctrl-c-mid-run"],
)
def test_ctrl_c_or_sigterm_while_the_layer_is_stopped_ends_the_campaign_without_waiting_for_its_limit(
    tmp_path, sig, between
):
    """Ctrl-C (SIGINT to the campaign's process group) or SIGTERM (to the campaign alone, as ``kill`` and
    ``scancel`` send it) while the cell's layer is stopped: mid-run 2, or as run 1 ends (``between``: the
    main thread then reads the mount and waits in the kernel). The answer limit is 10 minutes here.
    Before: the campaign ended only when the watch ended the layer at that limit (29.6 s after Ctrl-C at
    the default 30 s), as a read on the mount and the tear-down wait for the layer in the kernel, where
    no signal but SIGKILL reaches them. Then, between runs (a red team's finding): the watch's own
    thread took the signal meant for the held main thread, so neither Python's handler nor the kernel's
    pending sets showed it (31.7 s after Ctrl-C at 30 s). Now the watch's threads leave SIGINT and
    SIGTERM to the main thread, and the watch ends a layer that has not answered for a second as soon as
    the campaign is being stopped."""
    mnt, backing, out = tmp_path / "mnt", tmp_path / "backing", tmp_path / "c"
    p = _campaign(
        tmp_path, "threads=2", "storage.model.answer_s=600", f"hydra.run.dir={out}", start_new_session=True
    )
    stopped, lines = [], []
    bound = threading.Timer(300, p.kill)
    bound.start()
    try:
        for line in p.stdout:
            lines.append(line)
            if "run 1/2:" in line:
                if between:
                    stopped.append(_layer(backing / "modeled_hdd"))
                    os.kill(stopped[0], signal.SIGSTOP)
                    _wait_until_stopped(stopped[0])
                    _held_on_the_mount(p.pid)
                else:
                    stopped.append(_signal_mid_run(mnt, backing / "modeled_hdd", signal.SIGSTOP))
                    _wait_until_stopped(stopped[0])
                    time.sleep(1.5)  # the watch's question has waited a second
                t0 = time.monotonic()
                if sig == signal.SIGINT:
                    os.killpg(p.pid, sig)  # as a terminal sends Ctrl-C
                else:
                    p.send_signal(sig)
        rc = p.wait(timeout=300)
        took = time.monotonic() - t0
    finally:
        bound.cancel()
        p.kill()
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    text = "".join(lines)
    assert stopped and rc == 128 + sig, text[-3000:]
    assert took < 120, f"the campaign ended {took:.0f} s after the signal: it waited for the limit"
    assert f"campaign: interrupted by {signal.Signals(sig).name}; " in text, text[-3000:]
    assert f"the tier's FUSE layer (pid {stopped[0]}) did not answer for " in text, text[-3000:]
    assert not os.path.exists(f"/proc/{stopped[0]}") and not os.path.ismount(mnt)
    assert not (out / "record.json").exists() and "run 2/2:" not in text
