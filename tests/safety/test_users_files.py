"""A user's files around every path the tool writes stay as they were, byte for byte: through a whole
session of use (micro-benchmarks, baselines, a resume, converted sets, a Slurm dry run, the analysis),
and when a storage root's name holds characters fio reads as separators. Real files, fio and campaigns.

Each test reproduces a failure found by trying the tool as a new user (issue #10) and fails on the code
before the fix.
"""

from __future__ import annotations

import os
import stat

import pandas as pd
import pytest

from jobs.storage import iotools
from support.commands import analysis, campaign
from support.files import intact, make_jpegs, plant
from support.skips import needs_fio


@pytest.mark.cells
@needs_fio
def test_planted_files_survive_a_whole_session(tmp_path, cwd):
    """Everything a user owns, around every path the tool writes, through a whole session of use; the
    tool's own leftovers (baseline files, link farms, FIFOs) go."""
    root = tmp_path / "storage"
    out = tmp_path / "campaigns" / "sweep"
    planted = plant(
        root,
        tmp_path,
        tmp_path / "campaigns",
        cwd,
        root / "iocampaign",
        root / "iocampaign" / "datasets" / "converted",
    )
    common = (
        f"storage.root={root}",
        "repeats=1",
        "warmup=0",
        "batch_size=4",
        "dataset.num_images=24",
        f"hydra.sweep.dir={out}",
    )
    p = campaign("-m", "workload=microbench,readonly", "threads=1,2", *common, cwd=cwd)
    assert p.returncode == 0, p.stderr[-2000:]
    p = campaign(
        "-m",
        "workload=baseline",
        "workload.file_gb=0.01",
        "workload.small_file_threads=[1,2]",
        *common,
        cwd=cwd,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    p = campaign("-m", "workload=readonly", "threads=4,1", *common, cwd=cwd)  # resume, changed grid
    assert p.returncode == 0, p.stderr[-2000:]
    p = campaign(
        "-m", "workload=readonly", "dataset.format=tfrecord,hdf5", "dataset.shard_mb=0.1", *common, cwd=cwd
    )
    # converted sets written beside the planted files, into their own folders
    assert p.returncode == 0, p.stderr[-2000:]
    p = campaign("-m", "platform=slurm", "platform.dry_run=true", "threads=1,8", *common, cwd=cwd)
    assert p.returncode == 0, p.stderr[-2000:]
    assert analysis(str(out), cwd=cwd).returncode == 0
    cells = pd.read_csv(out / "cells.csv")
    assert (cells["status"] == "completed").all() and len(cells) == 8
    intact(planted)
    leftovers = [
        p
        for p in root.rglob("*")
        if p.is_file() and p not in planted and not p.is_relative_to(root / "iocampaign" / "datasets")
    ]
    assert leftovers == [], leftovers  # baseline files and link farms removed
    assert not any(stat.S_ISFIFO(p.lstat().st_mode) for p in root.rglob("*"))


@needs_fio
def test_fio_and_small_file_reads_stay_inside_a_root_with_colon_and_semicolon(tmp_path):
    """fio splits --filename at ':' and cuts at ';': the tool's own folder must be all it sees."""
    planted = plant(tmp_path, tmp_path / "scratch")
    root = tmp_path / "scratch" / "run:2024;x=1"  # old code: fio wrote to tmp_path/scratch/run
    (root / "iocampaign").mkdir(parents=True)
    target = root / "iocampaign" / "seq.dat"
    w = iotools.sequential(target, 4 << 20, "write", which="fio")
    r = iotools.sequential(target, 4 << 20, "read", which="fio")
    assert w.bytes == r.bytes == 4 << 20 and target.stat().st_size == 4 << 20
    assert w.command.startswith("cd ") and "run:2024" not in w.command.split("&&", 1)[1]
    files = [str(p) for p in make_jpegs(root / "data", 8, side=160)]
    dirs = iotools.link_farm(files, root / "iocampaign" / "farm", 2)
    m = iotools.small_files(dirs)
    assert 0.8 * sum(os.path.getsize(f) for f in files) <= m.bytes <= sum(os.path.getsize(f) for f in files)
    intact(planted)
    assert sorted(p.name for p in (tmp_path / "scratch").iterdir()) == sorted(
        ["run:2024;x=1", *(p.name for p in planted if p.parent == tmp_path / "scratch")]
    )
    with pytest.raises(ValueError, match="not a plain file name"):
        iotools.sequential(root / "iocampaign" / "a:b", 1 << 20, "write", which="fio")
