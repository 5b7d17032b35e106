"""``python -m campaign.cache purge`` removes the tool's own leftovers and nothing else: not what is mounted
inside them (a root given as a link, a folder named with a tab or a backslash, a mount it was not told
of), not another user's files, not a dataset a running campaign reads; a killed campaign's leftovers are
listed and purged once their process is gone. Real bind mounts, a real tmpfs, a real second user, real
processes holding the locks, a real campaign.

Each test reproduces a finding of the red team (issue #58) and fails on the code before the fix.
"""

from __future__ import annotations

import glob
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from jobs import owned
from jobs.observe import provenance
from support.commands import python_env, run_module, start_module
from support.files import intact, plant, tmpfs
from support.skips import needs_fio
from support.users import as_user


def _cache(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_module("campaign.cache", *args, cwd=cwd, timeout=120)


@contextmanager
def _bound(source: Path, target: Path):
    """``source`` bind-mounted at ``target`` (root), unmounted afterwards."""
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


def _dataset(folder: Path, images: int = 3) -> Path:
    """A set as the tool leaves it: images in a class folder, its manifest, its locks."""
    (folder / "class_0000").mkdir(parents=True)
    for i in range(images):
        (folder / "class_0000" / f"img_{i:07d}.jpg").write_bytes(os.urandom(5000))
    for name in ("manifest.csv", "dataset.json", ".generating.lock"):
        (folder / name).write_text("")
    return folder


@pytest.mark.parametrize("name", ["imagenet_subset-0123456789", "set\twith a tab\\and a backslash"])
def test_purge_through_a_linked_root_keeps_a_folder_bind_mounted_inside(tmp_path, cwd, name):
    """The root given as a link, the set's name holding a tab and a backslash (mountinfo writes them \\011
    and \\134): the entry with a bind mount inside is kept, in one line. Before: the mount's files deleted,
    then a traceback (OSError: [Errno 16] Device or resource busy)."""
    real, link = tmp_path / "real", tmp_path / "link"
    link.symlink_to(real)
    entry = _dataset(owned.tool_folder(real) / "datasets" / name)
    mine = tmp_path / "mine"
    planted = plant(mine, entry / "class_0000")
    with _bound(mine, entry / "class_0000" / "mnt"):
        got = provenance.mount_of(entry / "class_0000" / "mnt" / "x")
        assert got.mount_point == str(entry / "class_0000" / "mnt")  # decoded as the record gives it
        listed = _cache("list", "--root", str(link), cwd=cwd)
        assert listed.returncode == 0 and f"{name}  [mounted: kept]" in listed.stdout, listed.stdout
        p = _cache("purge", "all", "--root", str(link), cwd=cwd)
        assert p.returncode == 0 and p.stderr == "", p.stderr
        assert f"  kept {entry}: mounted\n" in p.stdout and "freed 0 B" in p.stdout, p.stdout
        intact(planted)
    assert len(list((entry / "class_0000").glob("img_*.jpg"))) == 3


def test_removal_never_enters_a_mount_even_one_that_came_after_the_listing(tmp_path):
    """A bind mount of a folder on the same file system (the same device number) and a tmpfs (another
    device), both below a folder being removed that was listed before they came: both stay whole, each
    named with why, and everything else of the folder goes."""
    from campaign import removal

    entry = _dataset(tmp_path / "iocampaign" / "datasets" / "set")
    mine = tmp_path / "mine"
    planted = plant(mine)
    with _bound(mine, entry / "a" / "bound"), tmpfs(entry / "b" / "ram", "1m") as ram:
        (ram / "blob").write_bytes(b"x" * 1000)
        gone = removal.remove(str(entry), frozenset())  # the mounts unknown to it: only the walk sees them
        assert sorted(gone.kept) == [
            f"{entry}/a/bound: a mount point",
            f"{entry}/b/ram: on another device (a mount)",
        ]
        assert sorted(p.name for p in entry.iterdir()) == ["a", "b"] and (ram / "blob").stat().st_size == 1000
        intact(planted)
    assert gone.bytes >= 3 * 5000


def test_purge_leaves_another_users_files_and_folders_and_names_them(tmp_path, cwd, shared, other_user):
    """A real second user's folder and file inside one of the tool's sets, and a set of theirs beside the
    tool's: all stay, each named; the user's own files go. Before: the set and the other user's folder in
    it were removed."""
    name = other_user[0]
    base = owned.tool_folder(shared / "root")
    entry = _dataset(base / "datasets" / "imagenet_subset-0123456789")
    entry.chmod(0o777)  # how another user came to write in it does not matter here
    (base / "datasets").chmod(0o777)
    for argv in (
        ("mkdir", "-p", str(entry / "theirs" / "deeper")),
        ("sh", "-c", f"echo theirs > {shlex.quote(str(entry / 'theirs' / 'deeper' / 'f'))}"),
        ("sh", "-c", f"echo theirs > {shlex.quote(str(entry / 'their-file'))}"),
        ("mkdir", str(base / "datasets" / "their-set")),
    ):
        assert as_user(other_user, *argv).returncode == 0, argv
    (base / "datasets").chmod(0o755)
    listed = _cache("list", "--root", str(shared / "root"), cwd=cwd)
    assert f"datasets/their-set  [belongs to {name}: kept]" in listed.stdout, listed.stdout
    p = _cache("purge", "datasets", "--root", str(shared / "root"), cwd=cwd)
    assert p.returncode == 0, p.stderr
    for kept in (entry / "their-file", entry / "theirs", base / "datasets" / "their-set"):
        assert f"kept {kept}: belongs to {name}" in p.stdout, p.stdout
    assert (entry / "theirs" / "deeper" / "f").read_text() == "theirs\n"
    assert (entry / "their-file").read_text() == "theirs\n" and (base / "datasets" / "their-set").is_dir()
    assert sorted(x.name for x in entry.iterdir()) == ["their-file", "theirs"]  # the user's own went


def _locked_by_child(lock: Path) -> subprocess.Popen:
    """A real process holding ``lock`` exclusive (as a generation holds ``.generating.lock``) until killed."""
    code = (
        "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
        "print('held', flush=True); time.sleep(600)"
    )
    p = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "held\n"
    return p


def test_a_killed_campaigns_leftovers_are_listed_and_purged_only_once_their_process_is_gone(tmp_path, cwd):
    """An embedded server's folder and an s3fs mount point of a killed campaign (its pid gone), a set whose
    generation failed: listed, and purged. The same of a live process, and a set being generated: listed
    as kept, naming the process, and left. Before: the server's folder and the mount point were not
    listed and never purged."""
    from jobs.storage.objectstore import server

    host, base = socket.gethostname(), owned.tool_folder(tmp_path / "root")
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "600"])
    servers = [base / "s3servers" / f"{host}-{pid}-0" for pid in (dead.pid, live.pid)]
    for folder in servers:
        (folder / "data").mkdir(parents=True)
        (folder / server.MARKER).write_text("")
        (folder / "data" / "volume.dat").write_bytes(os.urandom(1_000_000))
    points = [base / "s3mounts" / f"{host}-{pid}" for pid in (dead.pid, live.pid)]
    for point in points:
        point.mkdir(parents=True)
    failed = _dataset(base / "datasets" / "imagenet_subset-aaaaaaaaaa")
    (failed / "dataset.json").unlink()
    generating = _dataset(base / "datasets" / "imagenet_subset-bbbbbbbbbb")
    (generating / "dataset.json").unlink()
    holder = _locked_by_child(generating / ".generating.lock")
    try:
        listed = _cache("list", "--root", str(tmp_path / "root"), cwd=cwd)
        out = listed.stdout
        assert f"MB  s3servers   s3servers/{servers[0].name}\n" in out, out
        assert f"s3servers/{servers[1].name}  [in use by pid {live.pid} (sleep 600): kept]" in out, out
        assert f"s3mounts/{points[0].name}\n" in out, out
        assert f"s3mounts/{points[1].name}  [in use by pid {live.pid} (sleep 600): kept]" in out, out
        assert f"{failed.name}  [partial: its generation did not finish]\n" in out, out
        partial = "[partial: its generation did not finish]"
        assert f"{generating.name}  {partial}  [in use by pid {holder.pid} (" in out, out
        p = _cache("purge", "all", "--root", str(tmp_path / "root"), cwd=cwd)
        assert p.returncode == 0, p.stderr
        assert not servers[0].exists() and not points[0].exists() and not failed.exists(), p.stdout
        assert servers[1].is_dir() and points[1].is_dir() and (generating / "class_0000").is_dir(), p.stdout
        assert f"kept {generating}: in use by pid {holder.pid} (" in p.stdout, p.stdout
    finally:
        live.kill()
        holder.kill()
        live.wait()
        holder.wait()
    p = _cache("purge", "all", "--root", str(tmp_path / "root"), cwd=cwd)
    assert p.returncode == 0 and not any(x.exists() for x in (servers[1], points[1], generating))


def _reader(root: Path, campaign: subprocess.Popen, timeout_s: float = 300) -> tuple[Path, int]:
    """The dataset a running campaign's cell has locked for reading, and the process holding the lock."""
    from jobs.data import inuse

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for lock in glob.glob(str(owned.tool_folder(root) / "datasets" / "*" / inuse.READING)):
            pids = inuse.holders(lock)
            if pids:
                return Path(lock).parent, pids[0]
        assert campaign.poll() is None, "the campaign ended before its cell was seen reading"
        time.sleep(0.005)
    raise AssertionError("no cell took its dataset's lock")


@pytest.mark.cells
@needs_fio
def test_purge_refuses_a_dataset_a_running_campaign_reads(tmp_path, cwd):
    """A campaign's cell, stopped while it holds its set: ``purge datasets`` keeps it, naming the
    campaign's process, and ``purge <its path>`` fails; the cell then reads every image. Before: the set
    was removed under the cell (the red team's run recorded 127 images, 129 dropped, as completed)."""
    root, log = tmp_path / "root", tmp_path / "campaign.log"
    root.mkdir()
    with open(log, "w") as out:
        campaign = start_module(
            "campaign",
            "workload=baseline",
            "storage=local",
            f"storage.root={root}",
            "workload.file_gb=0.02",
            "workload.small_file_threads=[1]",
            "dataset.num_images=32",
            "batch_size=8",
            "repeats=1",
            "warmup=0",
            f"platform.lock_dir={tmp_path / 'locks'}",
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        folder, pid = _reader(root, campaign)
        os.kill(pid, signal.SIGSTOP)
        try:
            p = _cache("purge", "datasets", "--root", str(root), cwd=cwd)
            assert p.returncode == 0 and f"  kept {folder}: in use by pid {pid} (" in p.stdout, p.stdout
            p = _cache("purge", str(folder), "--root", str(root), cwd=cwd)
            assert p.returncode == 1 and f"  kept {folder}: in use by pid {pid} (" in p.stdout, p.stdout
            assert folder.is_dir()
        finally:
            os.kill(pid, signal.SIGCONT)
        assert campaign.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        if campaign.poll() is None:
            campaign.kill()
            campaign.wait()
    said = log.read_text()
    assert "32 images (0 dropped)" in said and "1 cell completed" in said, said[-3000:]
    p = _cache("purge", "datasets", "--root", str(root), cwd=cwd)
    assert f"  removed {folder} (" in p.stdout and not folder.exists(), p.stdout


def test_list_into_a_reader_that_stops_early_ends_without_a_traceback(tmp_path, cwd):
    """``list | head -2`` with more lines than a pipe holds: two lines, nothing on stderr. Before: a
    BrokenPipeError traceback."""
    datasets = owned.tool_folder(tmp_path / "root") / "datasets"
    for i in range(800):  # ~100 KB of lines: the writer is still writing when head leaves
        (datasets / f"{'x' * 100}-{i:04d}").mkdir(parents=True)
    root = shlex.quote(str(tmp_path / "root"))
    command = f"{shlex.quote(sys.executable)} -m campaign.cache list --root {root}"
    p = subprocess.run(
        ["bash", "-c", f"{command} | head -2"],
        cwd=cwd,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.stderr == "" and len(p.stdout.splitlines()) == 2, p.stderr


def _recorder(root: Path, name: str, *, stay: bool) -> subprocess.Popen:
    """A real process that records, as a run putting objects does (``journal``), 2 keys and an upload in
    a bucket, under ``root``; it stays (a live run) or ends (a killed run's record)."""
    code = (
        "import sys, time\n"
        "from jobs.storage.objectstore import journal\n"
        "from jobs.storage.objectstore.endpoint import Endpoint\n"
        f"where = journal.folder({str(root)!r}, 'storage.root')\n"
        f"j = journal.Journal.create(where, {name!r}, Endpoint('http://127.0.0.1:9000', 'their-bucket'))\n"
        "j.put('iocampaign/runs/a.bin'); j.put('iocampaign/runs/b.bin')\n"
        "j.upload('iocampaign/runs/b.bin', 'upload-1')\n"
        "print('recorded', flush=True)\n"
        f"time.sleep({600 if stay else 0})\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], env=python_env(), stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "recorded\n"
    return p


def test_a_killed_runs_upload_record_is_listed_with_a_warning_and_purged_a_live_runs_kept(tmp_path, cwd):
    """``uploads/``: the local records of the keys runs put in a bucket. A record whose process is gone is
    listed with what it names and what purging it means (the tool no longer deletes those objects), and
    purged; a live run's is kept, naming the process. Before: neither was listed, nor ever purged."""
    root = tmp_path / "root"
    dead = _recorder(root, "killed", stay=False)
    dead.wait()
    live = _recorder(root, "running", stay=True)
    records = owned.tool_folder(root) / "uploads"
    warning = (
        "a killed run's record of objects put in bucket their-bucket at http://127.0.0.1:9000 (2 keys): "
        "purged, the tool no longer deletes them"
    )
    try:
        out = _cache("list", "--root", str(root), cwd=cwd).stdout
        assert f"  uploads     uploads/killed.jsonl  [{warning}]\n" in out, out
        assert f"uploads/running.jsonl  [in use by pid {live.pid} (" in out, out
        p = _cache("purge", "all", "--root", str(root), cwd=cwd)
        assert p.returncode == 0, p.stderr
        assert f"  removed {records / 'killed.jsonl'} (" in p.stdout and f"): {warning}\n" in p.stdout, (
            p.stdout
        )
        assert f"kept {records / 'running.jsonl'}: in use by pid {live.pid} (" in p.stdout, p.stdout
        assert sorted(x.name for x in records.iterdir()) == ["running.jsonl"]
    finally:
        live.kill()
        live.wait()
    p = _cache("purge", "uploads", "--root", str(root), cwd=cwd)
    assert p.returncode == 0 and list(records.iterdir()) == [], p.stdout
