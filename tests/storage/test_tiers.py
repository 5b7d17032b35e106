"""Emulated tiers on a real loop device with a real blkio throttle (root; CI runs as root)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from jobs.storage import iotools, tiers
from support.commands import campaign, python_env, start_module
from support.processes import signal_state
from support.skips import needs_root

pytestmark = pytest.mark.tiers  # builds emulated or modelled tiers: the tests that do run in turn


def _tier_args(tmp_path, name="test_tier"):
    return dict(name=name, image_dir=str(tmp_path / "images"), mount=str(tmp_path / "mnt"), size_gb=1.0)


@pytest.mark.cells
@needs_root
def test_emulated_tier_hits_its_read_and_write_targets(tmp_path):
    a = _tier_args(tmp_path)
    tier = tiers.setup(read_mb_s=163.0, write_mb_s=133.14, **a)
    try:
        assert tier.loop.startswith("/dev/loop") and tier.dev.startswith("7:")
        st = os.stat(tier.image)  # really allocated: mkfs must not punch it back to sparse
        assert st.st_blocks * 512 >= 0.99 * st.st_size == 0.99 * 1e9, (st.st_blocks * 512, st.st_size)
        tiers.join(tier)
        target = tmp_path / "mnt" / "seq.dat"
        w = iotools.sequential(target, 256 << 20, "write", which="fio")  # O_DIRECT + fsync: throttled
        r = iotools.sequential(target, 256 << 20, "read", which="fio")
    finally:
        tiers.teardown(tier)
    assert 133.14 * 0.85 <= w.mb_per_s <= 133.14 * 1.15, w
    assert 163.0 * 0.85 <= r.mb_per_s <= 163.0 * 1.15, r
    assert tiers.leftovers(a["name"], tier.image, a["mount"]) == []


@pytest.mark.cells
@needs_root
def test_a_request_rate_limit_makes_small_random_reads_seek_bound(tmp_path):
    """read_iops (the emulated HDD's seeks): random 4 KB reads at queue depth 8 run at the set rate,
    while sequential 1 MiB reads carry as much per request as the loop device allows."""
    from benchmarks import tiers as bench

    a = _tier_args(tmp_path)
    tier = tiers.setup(read_mb_s=100.0, write_mb_s=100.0, read_iops=60, **a)
    try:
        folder = tmp_path / "mnt"
        subprocess.run(
            ["fio", "--name=lay", "--filename=fio.dat", "--size=64m", "--rw=write", "--bs=1m", "--direct=1"],
            cwd=folder,
            capture_output=True,
            check=True,
        )
        cg = tiers.join_all([tier])
        try:
            rand_iops, _ = bench.fio(folder, "randread", "4k", 8, 2, size=64 << 20)
            _, seq_mb = bench.fio(folder, "read", "1m", 1, 2, size=64 << 20)
        finally:
            tiers.leave_all(cg)
    finally:
        tiers.teardown(tier)
    assert 40 <= rand_iops <= 66, rand_iops
    # large requests still move much more: the loop device splits a 1 MiB read into two 512 KiB
    # requests (128 segments of 4 KiB), so 60 requests/s carry ~31 MB/s, not 60 x 4 KB
    assert 25 <= seq_mb <= 66 * 1.05, seq_mb


@pytest.mark.cells
@needs_root
def test_a_killed_run_is_cleaned_up_by_the_next(tmp_path):
    a = _tier_args(tmp_path, "killed_tier")
    code = (
        "import sys, time; from jobs.storage import tiers;"
        f"t = tiers.setup(read_mb_s=100, write_mb_s=100, **{a!r}); tiers.join(t);"
        "open(t.mount + '/f', 'w').write('x'); print('ready', flush=True); time.sleep(600)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env=python_env(),
        cwd=tmp_path,
    )
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    image = os.path.join(a["image_dir"], "killed_tier.img")
    left = tiers.leftovers("killed_tier", image, a["mount"])
    assert any(x.startswith("mount") for x in left) and any(x.startswith("loop") for x in left)
    tier = tiers.setup(read_mb_s=100, write_mb_s=100, **a)  # the next run clears what was left
    assert (tmp_path / "mnt" / "f").read_text() == "x"  # the tier's data survives
    tiers.teardown(tier)
    assert tiers.leftovers("killed_tier", image, a["mount"]) == []


def test_without_root_the_error_says_what_to_use(monkeypatch):
    monkeypatch.setattr(tiers.os, "geteuid", lambda: 1000)
    assert "need root" in tiers.available()
    with pytest.raises(tiers.TierError, match="storage=local"):
        tiers.setup("emulated_hdd", "/tmp/x", "/tmp/y", 1, 1, 1)


@pytest.mark.cells
@needs_root
def test_campaign_on_emulated_tiers(tmp_path):
    out = tmp_path / "sweep"
    p = campaign(
        "-m",
        "threads=1,2",
        "storage=emulated_hdd",
        "storage.emulate.size_gb=1",
        f"storage.emulate.image_dir={tmp_path / 'img'}",
        f"storage.root={tmp_path / 'mnt'}",
        "dataset.num_images=128",
        "batch_size=32",
        "repeats=1",
        f"hydra.sweep.dir={out}",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    import pandas as pd

    from jobs import records

    df = pd.read_csv(out / "results.csv")
    assert len(df) == 2 and set(df["cache_state"]) == {"cold"} and set(df["fs_type"]) == {"ext4"}
    prov = records.read(out / "0" / "record.json").provenance
    assert prov["emulated_tier"]["read_bps"] == 163_000_000 and prov["data_mount"]["source"].startswith(
        "/dev/loop"
    )
    assert (
        tiers.leftovers("emulated_hdd", str(tmp_path / "img" / "emulated_hdd.img"), str(tmp_path / "mnt"))
        == []
    )


@pytest.mark.cells
@needs_root
def test_sigterm_mid_cell_tears_the_tier_down(tmp_path):
    """scancel and kill send SIGTERM: the cell unwinds and leaves no mount, loop device or cgroup."""

    proc = start_module(  # a synthetic set, generated on the tier (a folder elsewhere is refused)
        "campaign",
        "storage=emulated_hdd",
        "storage.emulate.size_gb=1",
        f"storage.emulate.image_dir={tmp_path / 'img'}",
        f"storage.root={tmp_path / 'mnt'}",
        "dataset.num_images=32",
        "batch_size=8",
        "repeats=100000",
        "warmup=0",
        "hydra.run.dir=run",
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    image = str(tmp_path / "img" / "emulated_hdd.img")
    try:
        deadline, mnt = time.monotonic() + 120, str(tmp_path / "mnt")
        while not tiers.leftovers("emulated_hdd", image, mnt) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)  # inside the measured runs
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=60) != 0
        except subprocess.TimeoutExpired:
            pytest.fail(f"the campaign outlived SIGTERM by 60 s:\n{signal_state(proc.pid)}")
    finally:  # a cell that outlived the signal would hold the tier's device lock for the tests after it
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert tiers.leftovers("emulated_hdd", image, str(tmp_path / "mnt")) == []
