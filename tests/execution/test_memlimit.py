"""A memory limit on a cell's runs (``platform.memory_limit_gb``, ``jobs.execution.memlimit``): a real
cgroup of the machine's memory controller, a real file read cold through the page cache, a real cell.
The limit holds the page cache of what the runs read (a second pass cannot be served from memory), the
record keeps it, and the tool's groups go when the runs end, a killed cell's with the next."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from jobs import records
from jobs.execution import memlimit
from support.commands import campaign, python_env
from support.configs import two_runs
from support.skips import needs_root

pytestmark = needs_root  # the tool's cgroups are root's

READER = """\
import json, os, sys
from jobs.execution import memlimit
from jobs.storage import cache
path, limit = sys.argv[1], float(sys.argv[2]) or None
cache.evict([path])
with memlimit.limited(limit) as facts:
    inside = open("/proc/self/cgroup").read()
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass
    resident = cache.resident_bytes(path)
after = open("/proc/self/cgroup").read()
print(json.dumps({**facts, "resident": resident, "inside": inside, "after": after}))
"""


def _read_under(path: Path, limit_gb: float) -> dict:
    p = subprocess.run(
        [sys.executable, "-c", READER, str(path), str(limit_gb)],
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _groups() -> list[Path]:
    mount = memlimit._v1_mount()
    return sorted(mount.rglob(f"{memlimit.PREFIX}*")) if mount else []


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> Path:
    """800 MB on the disk (not tmpfs: its pages would be charged to whoever wrote them, and never freed)."""
    path = tmp_path_factory.mktemp("memlimit") / "data.bin"
    with open(path, "wb") as f:
        for _ in range(800):
            f.write(os.urandom(1 << 20))
        os.fsync(f.fileno())
    return path


def test_the_page_cache_of_what_the_runs_read_stays_under_the_limit(big_file):
    """800 MB read cold under a 0.5 GB limit: at most the limit of it stays cached, the group never held
    more, nobody was OOM-killed; without a limit the whole file stays cached. The group is gone after, and
    the process back in the group it came from."""
    assert memlimit.available() is None
    held = _read_under(big_file, 0.5)
    size = big_file.stat().st_size
    assert held["memory_limit_bytes"] == 500_000_000
    assert 0.99 * 500_000_000 <= held["memory_limit_held_bytes"] <= 500_000_000  # rounded to pages
    assert 0 < held["memory_peak_bytes"] <= held["memory_limit_held_bytes"]
    assert held["memory_oom_kills"] == 0 and held["memory_controller"] == "memory-v1"
    assert held["resident"] <= held["memory_limit_held_bytes"] < 0.7 * size, held
    group = held["memory_cgroup"]
    assert Path(group).name == f"{memlimit.PREFIX}{Path(group).name.rsplit('-', 1)[1]}"
    assert (
        f"memory:{group.split('/memory', 1)[1]}" in held["inside"]
        and group.split("/memory", 1)[1] not in held["after"]
    )
    assert not Path(group).exists() and _groups() == []

    free = _read_under(big_file, 0)
    assert "memory_limit_bytes" not in free and free["resident"] >= 0.95 * size, free


def test_a_cell_under_a_memory_limit_records_it_and_leaves_no_group(tmp_path):
    """A real cell with platform.memory_limit_gb=2: its record keeps the limit, the kernel's figure and the
    group's peak; no group of the tool's is left."""
    root = tmp_path / "tier"
    root.mkdir()
    out = tmp_path / "c"
    p = campaign(
        "-m", "workload=readonly", "platform.memory_limit_gb=2", *two_runs(32, root, out), cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr[-3000:]
    prov = records.read(out / "0" / records.FILENAME).provenance
    assert prov["memory_limit_bytes"] == 2_000_000_000 and prov["memory_controller"] == "memory-v1"
    assert 0 < prov["memory_peak_bytes"] <= prov["memory_limit_held_bytes"] <= 2_000_000_000
    assert prov["memory_oom_kills"] == 0
    assert _groups() == []
    results = pd.read_csv(out / "results.csv")  # on each of the cell's rows, beside its rates
    assert list(results["memory_limit_bytes"]) == [2_000_000_000] * 2
    assert (results["memory_peak_bytes"] == prov["memory_peak_bytes"]).all()


@pytest.mark.parametrize(
    "value,says",
    [
        ("0.1", "must be at least 0.5 (the runs' own buffers need half a gigabyte"),
        ("18446744073.71", "is more than 1000000"),  # the kernel would have held 446,464 B of it: OOM-killed
        (str(2 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9), "it would limit nothing"),
    ],
    ids=["too small", "wraps in the kernel", "above the machine's memory"],
)
def test_a_limit_that_cannot_hold_is_refused_in_one_line(tmp_path, value, says):
    p = campaign(
        "workload=readonly", f"platform.memory_limit_gb={value}", f"storage.root={tmp_path}", cwd=tmp_path
    )
    assert p.returncode != 0
    (line,) = p.stderr.strip().splitlines()
    assert "platform.memory_limit_gb=" in line and says in line, p.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_killed_cells_group_goes_with_the_next_and_a_live_ones_stays():
    """Groups of the tool's name whose process is gone and that hold no process are removed when the next
    limit is set; one whose process runs (pid 1) stays."""
    home = memlimit._v1_home()
    dead, live = home / f"{memlimit.PREFIX}{_dead_pid()}", home / f"{memlimit.PREFIX}1"
    dead.mkdir()
    live.mkdir()
    try:
        with memlimit.limited(1.0):
            pass
        assert not dead.exists() and live.exists()
    finally:
        for g in (dead, live):
            if g.exists():
                g.rmdir()


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid
