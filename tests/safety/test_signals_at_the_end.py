"""Ctrl-C or SIGTERM in a campaign's last moments: while a cell's tiers are torn down, after its record is
written, and while the embedded S3 server is stopped as the process ends. Nothing is left half undone (a
loop device, a server's folder), and the one line says what is kept (a red team's 52 signalled campaigns:
5 of 8 emulated tiers left their loop device, 7 of 7 servers stopped at exit printed a traceback and 6 left
their folder, and every signal after the record said it "wrote no record")."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from jobs import interrupts, records
from jobs.storage.objectstore import server
from support.commands import python_env, start_module
from support.files import intact, plant
from support.skips import needs_root


def _until(find, deadline_s: float = 240):
    """The first truthy ``find()``, looked for every 10 ms; fails the test at the deadline."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        found = find()
        if found:
            return found
        time.sleep(0.01)
    pytest.fail("not seen before the deadline")


def _completed_record(cwd: Path) -> Path | None:
    for path in cwd.glob(f"outputs/*/*/{records.FILENAME}"):
        try:
            if records.read(path).status == records.COMPLETED:
                return path
        except (OSError, records.RecordError):  # being written
            pass
    return None


def _microbench(cwd: Path, root: Path, *settings: str) -> subprocess.Popen:
    return start_module(
        "campaign",
        "workload=microbench",
        "dataset.num_images=64",
        "batch_size=16",
        "repeats=1",
        "warmup=0",
        f"storage.root={root}",
        *settings,
        cwd=cwd,
        env=python_env(TF_CPP_MIN_LOG_LEVEL="3"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.cells
def test_a_signal_after_the_record_is_written_says_the_cell_completed_and_how_to_analyse_it(tmp_path):
    """The record is written, then the analysis runs (about a second): SIGINT there ends the campaign with a
    line that keeps the record and names the command that writes the tables, not "wrote no record; run the
    command again" (which measured the cell again in a new folder)."""
    root, cwd = tmp_path / "root", tmp_path / "cwd"
    root.mkdir()
    cwd.mkdir()
    proc = _microbench(cwd, root)
    try:
        record = _until(lambda: _completed_record(cwd))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    folder = record.parent
    assert proc.returncode == 130, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("campaign:")]
    assert lines == [
        f"campaign: interrupted by SIGINT after its cell completed; its record is kept in {folder}; "
        f"python -m analysis {folder} writes its tables and figures"
    ], err[-3000:]
    assert "Traceback" not in err and records.read(record).status == records.COMPLETED


@pytest.mark.cells
@pytest.mark.waits
def test_a_signal_while_the_embedded_server_stops_at_the_end_is_noted_and_its_folder_still_goes(tmp_path):
    """The embedded S3 server is stopped and its folder removed as the process ends, after report.html:
    SIGINT there was raised inside that removal (a traceback, exit status 0, the folder left, its marker
    gone first so that no later campaign removed it). Now the clean-up finishes, whatever the moment."""
    root, cwd = tmp_path / "root", tmp_path / "cwd"
    root.mkdir()
    cwd.mkdir()
    planted = plant(root, root / "iocampaign")  # a user's files beside the server's folder
    for delay in (0.0, 0.03, 0.08):
        proc = _microbench(cwd, root, "storage=s3")
        try:
            _until(lambda: list(cwd.glob("outputs/*/*/report.html")))
            time.sleep(delay)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
        lines = [line for line in err.splitlines() if line.startswith("campaign:")]
        if proc.returncode == 0:  # the signal came as the process ended (or after it had)
            assert lines in ([], ["campaign: SIGINT came as the campaign ended; its clean-up was finished"])
        else:  # it came before the campaign's own end: its record is kept all the same
            assert proc.returncode == 130 and len(lines) == 1 and "after its cell completed" in lines[0], err
        assert list((root / "iocampaign" / server.SUBDIR).iterdir()) == [], delay
        intact(planted)
        for report in cwd.glob("outputs/*/*/report.html"):
            report.unlink()  # the next try waits for its own


def _cut_at(k: int, calls: list[int], fn):
    """``fn``, but the ``k``-th call counted in ``calls`` raises KeyboardInterrupt (a kill at that step)."""

    def step(*a, **kw):
        calls[0] += 1
        if calls[0] == k:
            raise KeyboardInterrupt
        return fn(*a, **kw)

    return step


def test_a_removal_cut_short_at_any_step_leaves_no_data_without_its_marker(tmp_path, monkeypatch):
    """A server's folder is emptied before its marker goes: a removal that a kill cuts short at any of its
    steps (here an exception at its k-th unlink or rmdir) leaves either the marker or nothing else, and
    the next campaign removes what is left."""
    parent = tmp_path / server.SUBDIR
    folder = parent / f"{os.uname().nodename}-999999999-0"
    planted = plant(parent)  # a user's files beside the server's folder
    real = os.unlink, os.rmdir
    for k in range(1, 12):
        (folder / "data" / "vol").mkdir(parents=True)
        for n in range(3):
            (folder / "data" / "vol" / f"{n}.dat").write_bytes(b"x" * 100)
            (folder / f"weed.{n}.log").write_text("log\n")
        (folder / server.MARKER).write_text("marker\n")
        calls = [0]
        monkeypatch.setattr(os, "unlink", _cut_at(k, calls, real[0]))
        monkeypatch.setattr(os, "rmdir", _cut_at(k, calls, real[1]))
        try:
            server.remove(folder)
        except KeyboardInterrupt:
            pass
        finally:
            monkeypatch.setattr(os, "unlink", real[0])
            monkeypatch.setattr(os, "rmdir", real[1])
        left = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
        assert server.MARKER in left or left == [], (k, left)
        server.clear_stale(parent)
        assert not folder.exists() or left == [], k
        if folder.exists():
            folder.rmdir()
    intact(planted)


@pytest.mark.cells
@pytest.mark.tiers
@needs_root
def test_a_signal_between_the_unmount_and_the_detach_waits_for_the_tear_down(tmp_path, monkeypatch):
    """SIGTERM raised just after an emulated tier's unmount (the moment a red team's signals hit) is held
    until its loop device is detached and its cgroup removed, then raised: nothing of the tier is left."""
    from jobs import runner
    from jobs.storage import systools, tiers

    emulate = SimpleNamespace(
        image_dir=str(tmp_path / "images"),
        size_gb=1.0,
        read_mb_s=500.0,
        write_mb_s=500.0,
        read_iops=0,
        write_iops=0,
    )
    st = SimpleNamespace(name="signal_tier", root=str(tmp_path / "mnt"), emulate=emulate, model=None)
    cfg = SimpleNamespace(storage=st)
    unmount = systools.unmount

    def unmount_then_signalled(point, *a, **kw):
        unmount(point, *a, **kw)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(systools, "unmount", unmount_then_signalled)
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    interrupts.install()
    try:
        with pytest.raises(interrupts.Interrupted), runner._tiers(cfg, [st]) as (tier, _, _):
            image = tier.image
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
        interrupts._received.clear()
    left = tiers.leftovers("signal_tier", image, st.root)
    tiers.cleanup("signal_tier", image, st.root)  # what the code before left, undone for the next test
    assert left == []


def test_a_signal_is_held_from_a_commands_end_and_raised_again_in_the_next_one_run_in_the_same_process():
    """``hold()`` at a command's end notes a signal instead of raising it; ``release()`` (the next command
    of ``campaign.subcampaign``'s dry runs, in the same process) makes a signal raise again."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    interrupts.install()
    try:
        interrupts.hold()
        os.kill(os.getpid(), signal.SIGTERM)  # handled here, noted only
        assert interrupts.late() == signal.SIGTERM
        interrupts.release()
        with pytest.raises(interrupts.Interrupted):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs at the next bytecode
        assert interrupts.late() is None
    finally:
        interrupts.release()
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
        interrupts._received.clear()
