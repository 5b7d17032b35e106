"""Runs that fail leave nothing that looks finished: kept sharded checkpoints that cannot all fit are refused
before the first run; a run whose shard fills its tier (a real, small tmpfs) fails in one line naming the
tier and its space, with its partial files removed and nothing marked finished; a restore that fails on a
really corrupted checkpoint takes its run folder with it. A user's files beside the run folders stay, byte
for byte."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from jobs.workloads.checkpoint.saving import ckpt_dir
from support.commands import campaign
from support.configs import TOY_SEARCHPATH
from support.files import make_jpegs, tmpfs

# ci_tiny's rank 0: 6 MB of weights and 9 MB of optimizer state, 15.0 MB a run; a tmpfs of 24 MiB holds one
# run
SHARDS = (
    "workload=sharded_checkpoint",
    "checkpoint_model=ci_tiny",
    TOY_SEARCHPATH,
    "checkpoint.ranks_written=1",
    "storage=tmpfs",
    "checkpoint.keep=true",
    "warmup=0",
)


def _plant(root: Path) -> dict[Path, bytes]:
    """A user's files: one in the tier's root, one beside the run folders in the tool's checkpoint folder."""
    planted = {root / "notes.txt": b"a user's notes\n", ckpt_dir(root) / "mine.bin": os.urandom(4096)}
    for f, data in planted.items():
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
    return planted


def test_kept_shards_that_will_not_all_fit_are_refused_before_the_first_run(tmp_path, cwd):
    """Three kept runs of 15 MB on 25.2 MB: planning checked one run (it fit), and run 2 filled the tier."""
    with tmpfs(tmp_path / "t", "24m") as root:
        p = campaign(*SHARDS, f"storage.root={root}", "repeats=3", cwd=cwd)
        lines = [x for x in p.stderr.splitlines() if x.strip()]
        assert p.returncode == 2 and len(lines) == 1, p.stdout[-2000:] + p.stderr[-2000:]
        assert (
            "checkpoint.keep=true keeps every run's shards: 3 runs (warmup + repeats) x 15.0 MB "
            f"(1 of the 4 ranks of checkpoint_model=ci_tiny) = 45.0 MB, but {root} has 25.2 MB free"
        ) in lines[0]
        assert not list(root.iterdir())
        assert (
            campaign(
                *SHARDS,
                f"storage.root={root}",
                "repeats=3",
                "checkpoint.keep=false",
                "platform.dry_run=true",
                cwd=cwd,
            ).returncode
            == 0
        )  # one run at a time: it fits


@pytest.mark.cells
def test_a_run_that_fills_its_tier_fails_in_one_line_and_leaves_no_partial_shard(tmp_path, planned_cell):
    """Three kept runs of 15 MB on a 40 MiB tmpfs, run straight through the runner (what planning now refuses,
    as when another writer fills the tier after planning): run 3 fills it. Before: a bare "OSError: [Errno
    28] No space left on device", run 3's partial shard kept and marked {"keep": true, "finished": true}, the
    tier left full."""
    from jobs import runner
    from jobs.workloads.shards import TierFullError

    # checkpoint_model=alexnet at 1.25 M parameters: one rank, 5 MB of weights and 10 MB of optimizer state
    cell = planned_cell(
        "workload=sharded_checkpoint",
        "checkpoint_model=alexnet",
        "checkpoint.model.parameters=1250000",
        "storage=tmpfs",
        f"storage.root={tmp_path / 't'}",
        "checkpoint.keep=true",
        "repeats=3",
        "warmup=0",
        f"platform.lock_dir={tmp_path / 'locks'}",
    )
    with tmpfs(tmp_path / "t", "40m") as root:
        planted = _plant(root)
        with pytest.raises(TierFullError) as e:
            runner.measure(cell, tmp_path / "job")
        message = str(e.value)
        assert re.fullmatch(
            rf"storage=tmpfs: no space left on {re.escape(str(root))} \(0\.\d MB free of 41\.9 MB\) "
            r"after 1\d\.\d MB of run 3's 15\.0 MB shard; its partial files are removed and nothing of "
            r"the run is kept",
            message,
        ), message
        runs = sorted(d for d in ckpt_dir(root).iterdir() if d.is_dir())
        # the two kept runs that finished, only
        assert [d.name.split("_")[2] for d in runs] == ["run1", "run2"]
        for d in runs:
            assert json.loads((d / "rank00000" / ".run.json").read_text()) == {"keep": True, "finished": True}
            assert sorted(f.stat().st_size for f in (d / "rank00000").glob("*.bin")) == [
                5_000_000,
                10_000_000,
            ]
        st = os.statvfs(root)
        assert st.f_bavail * st.f_frsize > 10e6  # run 3's partial shard no longer fills the tier
        assert all(f.read_bytes() == data for f, data in planted.items())


def _corrupt_when_saved(folder: Path, step: int, found: list, stop: threading.Event) -> None:
    """Once a run's checkpoint of ``step`` is durable in ``folder`` (its manifest written), flip 64 bytes in
    the middle of its data file, keeping its size: a checkpoint gone bad on the tier before the restore."""
    while not stop.is_set():
        for man in folder.glob(f"ckpt_*/*-{step}.manifest.json"):
            data = next(man.parent.glob(f"*-{step}.data-*"))
            with open(data, "r+b") as f:
                f.seek(data.stat().st_size // 2)
                chunk = f.read(64)
                f.seek(-len(chunk), 1)
                f.write(bytes(b ^ 0xFF for b in chunk))
            found.append(data)
            return
        time.sleep(0.002)


@pytest.mark.cells
def test_a_restore_that_fails_on_a_corrupt_checkpoint_takes_its_run_folder_with_it(tmp_path):
    """checkpoint.restore=true, the last checkpoint (step 12 of 14) corrupted on the tier before the restore
    reads it back: the cell fails, saying so, and its run folder goes. Before: the failure was reported, but
    the folder stayed, marked finished, so no later run's recovery would ever remove it."""
    make_jpegs(tmp_path / "data", 32, classes=2)
    slow = tmp_path / "slow"
    planted = _plant(slow)
    found, stop = [], threading.Event()
    corrupter = threading.Thread(
        target=_corrupt_when_saved, args=(ckpt_dir(slow), 12, found, stop), daemon=True
    )
    corrupter.start()
    try:
        p = campaign(
            "workload=checkpoint",
            "workload.image_side=64",
            "workload.width=0.25",
            "workload.steps=14",
            "checkpoint.every=4",
            "checkpoint.target=slow",
            "checkpoint.restore=true",
            f"checkpoint.slow.root={slow}",
            f"checkpoint.fast.root={tmp_path}",
            f"storage.root={tmp_path}",
            "dataset.source=folder",
            f"dataset.path={tmp_path / 'data'}",
            "batch_size=2",
            "repeats=1",
            "warmup=0",
            cwd=tmp_path,
        )
    finally:
        stop.set()
        corrupter.join()
    assert found, p.stdout[-2000:] + p.stderr[-2000:]
    lines = [x for x in p.stderr.splitlines() if x.startswith("campaign:")]
    assert p.returncode == 1 and len(lines) == 1, p.stderr[-3000:]
    assert (
        lines[0].startswith("campaign: the cell failed: DataLossError: ")
        and "Checksum does not match" in lines[0]
    )
    # the run's folder is gone, not the user's
    assert sorted(x.name for x in ckpt_dir(slow).iterdir()) == ["mine.bin"]
    assert all(f.read_bytes() == data for f, data in planted.items())


@pytest.mark.cells
def test_a_cell_refused_at_launch_after_planning_is_a_failure_with_its_reason(tmp_path, cwd):
    """Two kept cells that each fit alone: planning passes both; once the first kept its shards the second's
    own check refuses it. That cell was reported MISSING with no reason and the campaign exited 0."""
    with tmpfs(tmp_path / "t", "24m") as root:
        p = campaign("-m", *SHARDS, f"storage.root={root}", "repeats=1", "seed=1,2", cwd=cwd, timeout=300)
        out = p.stdout + p.stderr
        assert p.returncode != 0, out[-3000:]
        failed = [json.loads(r.read_text()) for r in cwd.rglob("record.json")]
        failed = [r for r in failed if r["status"] == "failed"]
        assert len(failed) == 1 and failed[0]["error"]["type"] == "ConfigError", out[-3000:]
        assert f"ranks write 15.0 MB, but {root} has " in failed[0]["error"]["message"]
        assert "1 failed" in out and "MISSING" not in out, out[-3000:]
