"""The modelled HDD: its physics (seek curve, queue, cache) on the real clock, its FUSE layer mounted for
real (bytes, counters, page cache, eviction), what it refuses to touch, and a campaign cell on it."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jobs.storage.modeled import mount
from jobs.storage.modeled.disk import Disk, HddGeometry
from jobs.storage.modeled.lustre import LustreGeometry
from support.modelled import cells_on
from support.paths import ROOT

pytestmark = pytest.mark.tiers  # builds emulated or modelled tiers: the tests that do run in turn

G = HddGeometry()


def test_seek_curve_follows_the_datasheet():
    assert G.seek_s(0) == 0
    assert G.seek_s(G.track_bytes / 2) == 0  # same track: no seek
    assert G.seek_s(G.capacity_gb * 1e9) == pytest.approx(G.full_stroke_ms / 1e3)
    assert G.seek_s(2 * G.track_bytes) == pytest.approx(G.track_to_track_ms / 1e3, rel=0.05)
    rng = random.Random(0)
    cap = G.capacity_gb * 1e9
    mean = sum(G.seek_s(rng.random() * cap - rng.random() * cap) for _ in range(20000)) / 20000
    assert mean * 1e3 == pytest.approx(G.average_seek_ms, rel=0.03)  # the datasheet's average seek
    assert G.revolution_s == pytest.approx(60 / 7200)
    waits = [G.positioning_s(0, 0.5 * G.track_bytes * 1.0001, t / 997) for t in range(997)]
    assert min(waits) >= 0
    assert max(waits) <= G.revolution_s  # rotation alone, on one track: under one turn


@pytest.mark.parametrize(
    "field,value,says",
    [
        ("rpm", 0, "rpm=0 must be positive"),
        ("track_to_track_ms", 9.0, "track_to_track_ms=9.0"),
        ("queue_depth", 0, "queue_depth=0"),
        ("cache_segments", 0, "cache_segments=0"),
    ],
)
def test_impossible_drives_are_named(field, value, says):
    assert says in dataclasses.replace(G, **{field: value}).check()


def _random_reads(disk: Disk, n: int, threads: int, span: float, seed: int = 0) -> float:
    """Requests per second of the drive's own time (its busy time, not the host's clock) for ``n``
    random 4 KiB reads from ``threads`` threads."""
    rng = random.Random(seed)
    offsets = [int(rng.random() * span) // 4096 * 4096 for _ in range(n)]
    busy = disk.counters.busy_s

    def worker(k):
        for off in offsets[k::threads]:
            disk.serve(off, 4096)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return n / (disk.counters.busy_s - busy)


def test_a_deeper_queue_serves_random_reads_faster_and_sequential_reads_pay_no_positioning():
    disk = Disk(G)
    try:
        qd1 = _random_reads(disk, 150, 1, G.capacity_gb * 1e9)
        qd8 = _random_reads(disk, 160, 8, G.capacity_gb * 1e9, seed=1)
        # 1 / (seek + half a turn + overhead) = 80: the class's 75-100 IOPS. Where each read lands on the
        # turning platter depends on the clock, so the mean of 150 reads is 80 +- 1.6 (one sigma); 60
        # reads gave 74.4 once (+-2.6)
        assert 72 <= qd1 <= 100, qd1
        assert qd8 > 1.3 * qd1, (qd1, qd8)  # nearest-first from 8 queued commands
        assert disk.counters.max_queue >= 7  # waiting beside the one being served
        busy = disk.counters.busy_s
        for k in range(32):  # 4 MiB in 128 KiB reads, one after another
            disk.serve(10**9 + k * 131072, 131072)
        per_read = (disk.counters.busy_s - busy) / 32  # the drive's own time, whatever the host's load
        assert per_read < G.command_overhead_ms / 1e3 + G.transfer_s(131072) + G.revolution_s / 8, per_read
        c = disk.counters
        assert c.reads == 150 + 160 + 32 and c.read_bytes == 310 * 4096 + 32 * 131072 and c.busy_s > 0
    finally:
        disk.stop()


def test_queue_depth_one_serves_in_arrival_order():
    fifo = Disk(dataclasses.replace(G, queue_depth=1))
    try:
        qd1 = _random_reads(fifo, 60, 1, G.capacity_gb * 1e9)
        qd8 = _random_reads(fifo, 120, 8, G.capacity_gb * 1e9, seed=1)
        assert qd8 < 1.2 * qd1, (qd1, qd8)  # without NCQ, more threads only wait longer
    finally:
        fifo.stop()


@pytest.fixture
def tier(tmp_path):
    t = mount.setup("modeled_hdd", str(tmp_path / "backing"), str(tmp_path / "mnt"), G)
    yield t
    mount.teardown(t)
    assert not os.path.ismount(t.mount)


@pytest.mark.cells
def test_the_layer_serves_the_bytes_counts_what_the_drive_served_and_the_page_cache_works(tier, tmp_path):
    from jobs.storage import cache

    data = os.urandom(3 << 20)
    p = Path(tier.mount) / "d" / "f.bin"
    p.parent.mkdir()
    p.write_bytes(data)
    assert (tmp_path / "backing" / "modeled_hdd" / "d" / "f.bin").read_bytes() == data  # the backing file
    assert os.listdir(tier.mount) == ["d"]  # the backing folder's marker is not part of the tier
    report = cache.evict([str(p)])
    assert report.resident_bytes_after == 0  # eviction reaches the layer's files
    c0 = mount.counters(tier.device)
    assert p.read_bytes() == data
    c1 = mount.counters(tier.device)
    assert c1["read_bytes"] - c0["read_bytes"] >= len(data)  # a cold read: every byte from the drive
    assert p.read_bytes() == data
    assert mount.counters(tier.device)["read_bytes"] == c1["read_bytes"]  # a warm read: the page cache
    assert c1["writes"] >= 1 and c1["write_bytes"] >= len(data)
    assert mount.mounted_tier(str(p)) == tier.mount
    os.link(p, Path(tier.mount) / "d" / "hard.bin")  # fio's link farms (storage baselines) are hard links
    assert (Path(tier.mount) / "d" / "hard.bin").read_bytes() == data
    os.symlink("f.bin", Path(tier.mount) / "d" / "soft.bin")
    assert os.readlink(Path(tier.mount) / "d" / "soft.bin") == "f.bin"
    os.rename(Path(tier.mount) / "d" / "hard.bin", Path(tier.mount) / "d" / "moved.bin")
    os.unlink(Path(tier.mount) / "d" / "moved.bin")
    assert sorted(os.listdir(p.parent)) == ["f.bin", "soft.bin"]


@pytest.mark.parametrize(
    "name,geometry", [("modeled_hdd", G), ("modeled_lustre", LustreGeometry(rate_scale=0.05))]
)
def test_what_is_not_ours_is_refused_and_left_as_it_was(tmp_path, name, geometry):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("user data")
    with pytest.raises(mount.ModelError, match="is a folder with files in it"):
        mount.setup(name, str(tmp_path / "b"), str(busy), geometry)
    assert (busy / "mine.txt").read_text() == "user data" and not os.path.ismount(busy)
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(other)], check=True)
    try:
        (other / "theirs").write_text("x")
        with pytest.raises(mount.ModelError, match="which iocampaign did not mount"):
            mount.setup(name, str(tmp_path / "b"), str(other), geometry)
        assert mount.cleanup(name, str(other)) == [] and (other / "theirs").read_text() == "x"
    finally:
        subprocess.run(["umount", str(other)], check=True)
    backing = tmp_path / "b2" / name
    backing.mkdir(parents=True)
    (backing / "notes.txt").write_text("keep")
    with pytest.raises(mount.ModelError, match="which iocampaign did not create"):
        mount.setup(name, str(tmp_path / "b2"), str(tmp_path / "m2"), geometry)
    assert (backing / "notes.txt").read_text() == "keep" and not (backing / mount.MARKER).exists()


@pytest.mark.cells
def test_a_killed_owner_leaves_no_mount_and_the_next_setup_works(tmp_path):
    code = (
        f"import sys, time; sys.path.insert(0, {str(ROOT)!r})\n"
        "from jobs.storage.modeled import mount\nfrom jobs.storage.modeled.disk import HddGeometry\n"
        f"t = mount.setup('modeled_hdd', {str(tmp_path / 'b')!r}, {str(tmp_path / 'm')!r}, HddGeometry())\n"
        "print(t.pid, flush=True)\ntime.sleep(60)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    layer = int(owner.stdout.readline())
    assert os.path.ismount(tmp_path / "m")
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    deadline = time.monotonic() + 15
    while os.path.exists(f"/proc/{layer}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{layer}") or Path(f"/proc/{layer}/stat").read_text().split()[2] == "Z"
    t = mount.setup("modeled_hdd", str(tmp_path / "b"), str(tmp_path / "m"), G)  # clears a stale mount
    try:
        assert os.path.ismount(t.mount)
    finally:
        mount.teardown(t)
    assert not os.path.ismount(tmp_path / "m")


def test_a_layer_that_stops_answering_is_still_unmounted_and_ended(tmp_path, caplog):
    """Before: the tier's clean-up looked inside its mount point (``realpath``) and waited for a plain
    ``umount``; on a layer that no longer answers (stopped here: SIGSTOP) both wait for ever, and no
    signal but SIGKILL ends the process that waits. Now the clean-up reads the mount table by the mount
    point's folder, gives ``umount`` 10 s, then detaches the mount lazily, and the layer is killed."""
    beside = {tmp_path / "beside.bin": os.urandom(4096), tmp_path / "b" / "notes.txt": b"a user's notes"}
    for f, data in beside.items():  # a user's files beside the mount point and in the backing folder
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
    t = mount.setup("modeled_hdd", str(tmp_path / "b"), str(tmp_path / "m"), G)
    (tmp_path / "m" / "f").write_bytes(b"x" * 4096)
    os.kill(t.pid, signal.SIGSTOP)
    ended = threading.Event()
    caplog.set_level("WARNING", logger="jobs.storage.modeled.mount")
    worker = threading.Thread(target=lambda: (mount.teardown(t), ended.set()), daemon=True)
    t0 = time.monotonic()
    try:
        worker.start()
        worker.join(60)
        took = time.monotonic() - t0
    finally:
        with contextlib.suppress(ProcessLookupError):  # a teardown still waiting goes on, and the test ends
            os.kill(t.pid, signal.SIGCONT)
        worker.join(30)
    assert ended.is_set() and took < 60, f"teardown still waited after {took:.0f} s"
    # said, not silent (a red team, 2026-11-30: 10 s of silence in a cell's log)
    assert f"FUSE layer (pid {t.pid}) had not ended 10 s after its unmount and was killed" in caplog.text
    assert mount.cleanup("modeled_hdd", str(tmp_path / "m")) == []  # nothing mounted there any more
    assert not os.path.ismount(tmp_path / "m") and not os.path.exists(f"/proc/{t.pid}")
    assert (tmp_path / "b" / "modeled_hdd" / "f").read_bytes() == b"x" * 4096  # the bytes stay in the backing
    assert all(f.read_bytes() == data for f, data in beside.items())


@pytest.mark.cells
def test_a_cell_on_the_modelled_hdd_is_cold_counted_and_bound_by_its_queue(cwd, tmp_path):
    runs, recs = cells_on("modeled_hdd", cwd, tmp_path, 96, "storage.model.track_to_track_ms=0.6")
    assert all(r["provenance"]["modeled_tiers"][0]["geometry"]["average_seek_ms"] == 8.2 for r in recs)
    # the log names the drive as this campaign set it, not as its preset's description (before: "0.5 ms")
    said = "".join(f.read_text() for f in (tmp_path / "c").rglob("*.log"))
    named = "(4000 GB 7200 rpm HDD: 8.2 ms average seek, 0.6 ms track-to-track, "
    assert said.count(named) == 2, said[-2000:]
    for run in runs.values():  # busy: a share of wall time, which the suite's other work stretches
        assert run["device_busy"] > 0 and run["device_read_mb_s"] > 0
    # more reads in flight: one reader has one at a time (the kernel's read-ahead now and then a second); four
    # keep more, as the drive saw them arrive: a count, not the time-averaged queue depth, which a busy CPU
    # lowers (1.46 in a loaded CI run; the count 1.03 and 2.3 at load 5)
    one, four = runs[1]["device_requests_in_flight"], runs[4]["device_requests_in_flight"]
    assert 1.0 <= one < 1.25 < 1.5 < four <= 4 + 1, (one, four)


def test_the_paper_study_reads_its_hdd_from_the_modelled_drive_where_fuse_works():
    from campaign import paper

    # root, FUSE, cgroup v1
    assert paper.default_tiers() == (["modeled_hdd", "emulated_ssd", "emulated_optane"], "")
    # Fig. 4's Lustre bars, on the modelled Lustre
    assert paper.default_lustre(False) == ("modeled_lustre", "")
    assert paper.default_lustre(True) == (None, "")  # --tiers given: those tiers only


def test_the_drives_cache_holds_only_its_size():
    """A stream keeps only its latest bytes in the drive's buffer (64 MB in 16 segments): bytes read
    long before are read from the platter again, not served as cache hits."""
    disk = Disk(G)
    try:
        for k in range(40):  # 40 MiB read in order: the segment keeps its last 4 MB
            disk.serve(k * 2**20, 2**20)
        busy = disk.counters.busy_s
        disk.serve(2**20, 4096)  # early in the stream: gone from the buffer
        cold = disk.counters.busy_s - busy
        busy = disk.counters.busy_s
        disk.serve(39 * 2**20, 4096)  # the stream's last MiB: still buffered
        hit = disk.counters.busy_s - busy
        assert (
            hit
            <= G.command_overhead_ms / 1e3 + 1e-6
            < G.transfer_s(4096) + G.command_overhead_ms / 1e3
            < cold
        )
    finally:
        disk.stop()
