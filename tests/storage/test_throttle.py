"""The cgroup throttles behind emulated tiers: cgroup v2's io.max writer against a tree laid out like
the kernel's (what it writes is read back), the v2 membership rules on this machine's real cgroup2
hierarchy (it has one beside v1, without the io controller), and the choice between v1 and v2.
The v1 path throttles real loop devices in test_tiers.py; io.max on a real kernel is checked by
``python -m benchmarks.tiers`` on a machine whose cgroup2 hierarchy has the io controller."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.storage import throttle, tiers


def _v2_tree(
    root: Path, controllers: str = "cpuset cpu io memory pids", enabled: str = "cpu io memory pids"
) -> Path:
    """A cgroup-v2 root as the kernel lays it out (the files a controller reads and writes)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text(enabled + "\n")
    (root / "cgroup.procs").write_text("")
    return root


@pytest.fixture
def sleeper():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p.pid
    p.kill()
    p.wait()


def test_io_max_writer_writes_what_the_kernel_reads(tmp_path, sleeper):
    ctl = throttle.IoMaxV2(_v2_tree(tmp_path / "cg"))
    assert ctl.available() is None
    group = ctl.group("emulated_hdd")
    assert group == tmp_path / "cg" / "iocampaign-emulated_hdd"
    ctl.limit(group, throttle.Limits("7:3", 163_000_000, 133_140_000, read_iops=250))
    # one line per device, every key named, "max" where there is no limit (the kernel's own format)
    assert (group / "io.max").read_text() == "7:3 rbps=163000000 wbps=133140000 riops=250 wiops=max\n"
    assert ctl.limits(group) == {"7:3": {"rbps": 163_000_000, "wbps": 133_140_000, "riops": 250}}
    ctl.join(group, sleeper)
    assert (group / "cgroup.procs").read_text() == str(sleeper)
    ctl.leave(sleeper)  # back where it came from: the root cgroup, as /proc/<pid>/cgroup says here
    assert (tmp_path / "cg" / "cgroup.procs").read_text() == str(sleeper)


def test_io_max_read_back_as_the_kernel_shows_several_devices(tmp_path):
    ctl = throttle.IoMaxV2(_v2_tree(tmp_path / "cg"))
    group = ctl.group("cell-1")
    (group / "io.max").write_text(
        "7:1 rbps=100 wbps=200 riops=max wiops=max\n7:2 rbps=max wbps=400 riops=max wiops=9\n"
    )
    assert ctl.limits(group) == {"7:1": {"rbps": 100, "wbps": 200}, "7:2": {"wbps": 400, "wiops": 9}}


@pytest.mark.parametrize(
    "controllers,enabled,why",
    [
        ("cpu memory pids", "cpu memory", "has no io controller (it offers cpu memory pids"),
        ("cpu io memory", "cpu memory", "echo +io > "),
    ],
)
def test_io_max_says_why_it_cannot_throttle(tmp_path, controllers, enabled, why):
    ctl = throttle.IoMaxV2(_v2_tree(tmp_path / "cg", controllers, enabled))
    assert why in ctl.available()
    assert "no cgroup-v2 hierarchy" in throttle.IoMaxV2(tmp_path / "absent").available()


def test_v2_membership_on_the_real_kernel(sleeper):
    """A group made, a process moved in and home again, the group removed: on this machine's real
    cgroup2 mount (its io controller, if it lacks one, is the only part a fake tree stands in for)."""
    ctl = throttle.IoMaxV2(throttle.v2_root())
    controllers = (ctl.root / "cgroup.controllers").read_text().split()
    assert (ctl.available() is None) == (
        "io" in controllers and "io" in (ctl.root / "cgroup.subtree_control").read_text()
    )
    home = ctl.home(sleeper)
    group = ctl.group(f"test-{os.getpid()}")
    try:
        ctl.join(group, sleeper)
        rel = "/" + str(group.relative_to(ctl.root))
        assert f"0::{rel}" in Path(f"/proc/{sleeper}/cgroup").read_text().splitlines()
        ctl.leave(sleeper)
        assert ctl.home(sleeper) == home
    finally:
        assert ctl.remove(group)
    assert not group.exists()


def test_remove_touches_only_its_own_groups(tmp_path):
    ctl = throttle.IoMaxV2(_v2_tree(tmp_path / "cg"))
    theirs = tmp_path / "cg" / "system.slice"
    theirs.mkdir()
    assert ctl.remove(theirs) is False and theirs.is_dir()


def test_the_machine_picks_v1_then_v2(tmp_path, monkeypatch):
    ctl, why = throttle.current()  # this machine: blkio (v1) is mounted
    assert (ctl.name, why) == ("blkio-v1", None)
    monkeypatch.setattr(throttle, "BLKIO", tmp_path / "no-blkio")
    monkeypatch.setattr(throttle, "v2_root", lambda: _v2_tree(tmp_path / "cg"))
    ctl, why = throttle.current()
    assert (ctl.name, ctl.root, why) == ("io.max-v2", tmp_path / "cg", None)
    monkeypatch.setattr(throttle, "v2_root", lambda: _v2_tree(tmp_path / "cg1", "cpu memory", "cpu"))
    assert throttle.current()[0] is None
    why = tiers.available()
    assert "cgroup-v1 blkio controller is not mounted" in why and "has no io controller" in why


@pytest.mark.cells
def test_a_tier_throttled_by_io_max(tmp_path, monkeypatch):
    """A whole emulated tier (real loop device, ext4, mount) on a machine with only cgroup v2: its
    record names io.max-v2 and the limits it wrote are read back; tear-down leaves no mount or loop."""
    fake = _v2_tree(tmp_path / "cg")
    monkeypatch.setattr(throttle, "BLKIO", tmp_path / "no-blkio")
    monkeypatch.setattr(throttle, "v2_root", lambda: fake)
    a = {
        "name": "v2_tier",
        "image_dir": str(tmp_path / "img"),
        "mount": str(tmp_path / "mnt"),
        "size_gb": 0.2,
    }
    tier = tiers.setup(read_mb_s=50, write_mb_s=20, read_iops=250, **a)
    try:
        assert tier.throttle == "io.max-v2" and Path(tier.cgroup) == fake / "iocampaign-v2_tier"
        assert throttle.IoMaxV2(fake).limits(Path(tier.cgroup)) == {
            tier.dev: {"rbps": 50_000_000, "wbps": 20_000_000, "riops": 250}
        }
        assert tier.dev.startswith("7:")
    finally:
        monkeypatch.setattr(throttle.Controller, "remove", lambda self, g, tries=50: False)  # a plain folder
        tiers.teardown(tier)
    assert tiers.leftovers("v2_tier", tier.image, a["mount"]) == [f"cgroup {fake / 'iocampaign-v2_tier'}"]


def test_the_paper_study_says_what_it_falls_back_to(tmp_path, monkeypatch):
    from campaign import paper

    monkeypatch.setattr(throttle, "BLKIO", tmp_path / "no-blkio")
    monkeypatch.setattr(throttle, "v2_root", lambda: _v2_tree(tmp_path / "cg", "cpu memory", "cpu"))
    tiers_, line = paper.default_tiers()
    assert tiers_ == ["local", "tmpfs"]
    assert line.startswith("emulated tiers cannot be built here (no cgroup can throttle a device here: ")
    assert "falls back to the local disk and tmpfs" in line and "not measured" in line
