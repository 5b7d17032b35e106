"""Data safety: nothing a user owns is deleted, overwritten, unmounted or written next to the paths the
tool writes; no result is overwritten; nothing waits forever. Real files, mounts, fio and processes.

Each test reproduces one failure found by trying the tool as a new user (issue #10) and fails on the
code before the fix.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest
from omegaconf import OmegaConf

from jobs import records
from jobs.data import datasets, synthetic
from jobs.storage import cache, iotools, tiers
from support.commands import analysis, campaign, one_line
from support.configs import TINY
from support.files import intact, make_jpegs, plant, tmpfs
from support.paths import ROOT
from support.skips import needs_fio, needs_root


# 1. fio splits --filename at ':' and cuts at ';': the tool's own folder must be all it sees
@needs_fio
def test_fio_and_small_file_reads_stay_inside_a_root_with_colon_and_semicolon(tmp_path):
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


# 2. tier set-up used to unmount whatever was mounted at storage.root
@pytest.mark.tiers
@needs_root
def test_emulated_tier_never_unmounts_or_hides_what_it_did_not_mount(tmp_path, cwd):
    mnt = tmp_path / "mnt"
    with tmpfs(mnt, "8m"):
        planted = plant(mnt)
        with pytest.raises(tiers.TierError, match="iocampaign did not mount"):
            tiers.setup("safety_tier", str(tmp_path / "images"), str(mnt), 0.3, 100, 100)
        p = campaign(
            "storage=emulated_hdd",
            f"storage.root={mnt}",
            f"storage.emulate.image_dir={tmp_path / 'images'}",
            *TINY,
            cwd=cwd,
        )
        assert p.returncode == 2 and "iocampaign did not mount" in one_line(p) and "storage.root=" in p.stderr
        assert tiers._mount_at(str(mnt)) == ("tmpfs", "tmpfs")  # still mounted
        intact(planted)
    # a folder with files: a tier mounted over it would hide them
    planted = plant(mnt)
    with pytest.raises(tiers.TierError, match="files in it"):
        tiers.setup("safety_tier", str(tmp_path / "images"), str(mnt), 0.3, 100, 100)
    intact(planted)
    # a file at the image's path that the tool did not make is never truncated or attached
    images = tmp_path / "images"
    images.mkdir()
    mine = images / "safety_tier.img"
    mine.write_bytes(b"a user's disk image")
    with pytest.raises(tiers.TierError, match="did not create"):
        tiers.setup("safety_tier", str(images), str(tmp_path / "fresh"), 0.3, 100, 100)
    assert mine.read_bytes() == b"a user's disk image" and not (tmp_path / "fresh").exists()
    assert list(cwd.iterdir()) == []


# 3. tier set-up and dataset generation ran outside the device lock: a second campaign tore the tier down
@pytest.mark.tiers
@needs_root
def test_two_campaigns_on_one_emulated_tier_both_complete(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    args = [
        "-m",
        "workload=readonly",
        "storage=emulated_ssd",
        f"storage.root={tmp_path / 'tier'}",
        f"storage.emulate.image_dir={tmp_path / 'images'}",
        "storage.emulate.size_gb=0.3",
        f"platform.lock_dir={tmp_path / 'locks'}",
        "repeats=2",
        "warmup=0",
        "batch_size=8",
        "dataset.num_images=48",
        "dataset=caltech101",
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "campaign", *args, f"hydra.sweep.dir={tmp_path / f'c{k}'}"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for k in range(2)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    recs = [records.read(tmp_path / f"c{k}" / "0" / "record.json") for k in range(2)]
    assert all(r.status == "completed" and len(r.runs) == 2 for r in recs)
    # the two cells' measured runs never overlapped on the tier: one waited for the other's whole cell (how long
    # depends on when each got past TensorFlow's import, so the order of the windows is what is checked)
    from datetime import datetime

    def window(rec):
        starts = [datetime.fromisoformat(r["started_at"]).timestamp() for r in rec.runs]
        return min(starts), max(t + r["run_wall_s"] for t, r in zip(starts, rec.runs))

    (a0, a1), (b0, b1) = sorted(window(r) for r in recs)
    assert a1 <= b0 + 0.01, ((a0, a1), (b0, b1))
    assert (
        tiers.leftovers("emulated_ssd", str(tmp_path / "images" / "emulated_ssd.img"), str(tmp_path / "tier"))
        == []
    )


# 4. resume wrote cells into folders by position: a changed grid overwrote a completed record
def test_resume_with_a_changed_grid_keeps_every_completed_record(tmp_path, cwd):
    make_jpegs(tmp_path / "data", 16)
    out = tmp_path / "sweep"
    common = (
        "workload=readonly",
        "dataset.source=folder",
        f"dataset.path={tmp_path / 'data'}",
        f"storage.root={tmp_path}",
        "repeats=1",
        "warmup=0",
        "batch_size=4",
        f"hydra.sweep.dir={out}",
    )
    p = campaign("-m", "threads=1,2", *common, cwd=cwd)
    assert p.returncode == 0, p.stderr[-2000:]
    before = {d: (out / d / "record.json").read_bytes() for d in ("0", "1")}
    p = campaign("-m", "threads=4,1", *common, cwd=cwd)  # old code: threads=4 went into folder 0
    assert p.returncode == 0, p.stderr[-2000:]
    for d, data in before.items():
        assert (out / d / "record.json").read_bytes() == data, f"record of cell {d} was rewritten"
    new = records.read(out / "2" / "record.json")
    assert new.config["threads"] == 4
    plan = json.loads((out / "plan.json").read_text())
    assert [(c["num"], c["overrides"][0]) for c in plan["cells"]] == [
        (0, "threads=1"),
        (1, "threads=2"),
        (2, "threads=4"),
    ]
    for c in plan["cells"]:
        assert records.read(out / c["dir"] / "record.json").cell_id == c["cell_id"]
    # the lowest level refuses too: a folder holding another cell's record is never written over
    rec = records.read(out / "0" / "record.json")
    with pytest.raises(records.RecordError, match="not replaced"):
        records.write(new, out / "0")
    assert records.read(out / "0" / "record.json") == rec


# 5. a FIFO in a file list hung the cell forever while it held the device lock
def test_a_fifo_in_the_file_list_is_skipped_counted_and_never_opened(tmp_path, cwd):
    imgs = make_jpegs(tmp_path / "data", 12)
    fifo = tmp_path / "data" / "pipe.jpg"
    os.mkfifo(fifo)
    done = threading.Event()
    threading.Thread(
        target=lambda: (
            cache.evict([str(fifo)]),
            cache.warm([str(fifo)]),
            cache.residency([str(fifo)]),
            done.set(),
        ),
        daemon=True,
    ).start()
    assert done.wait(10), "opening a FIFO blocked"
    lst = tmp_path / "list.txt"
    lst.write_text("\n".join([*map(str, imgs), str(fifo)]))
    p = campaign(
        "workload=readonly",
        "dataset.source=filelist",
        f"dataset.path={lst}",
        f"storage.root={tmp_path}",
        "repeats=1",
        "warmup=0",
        "batch_size=4",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=cwd,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    rec = records.read(tmp_path / "run" / "record.json")
    assert rec.dataset["skipped_not_regular"] == 1 and rec.dataset["skipped_files"] == [str(fifo)]
    assert rec.runs[0]["images"] == 12 and rec.runs[0]["images_dropped"] == 1
    assert str(fifo) in rec.runs[0]["dropped_files"]


def test_waiting_for_a_device_lock_has_a_time_limit(tmp_path, monkeypatch, caplog):
    """The wait ends at its limit, and says so at the start and then every NOTE_EVERY_S, naming the holder."""
    from jobs.storage import locks

    monkeypatch.setattr(locks, "NOTE_EVERY_S", 1.0)

    code = (
        "import time; from jobs.storage import locks;"
        f"cm = locks.device_lock({str(tmp_path)!r}, {str(tmp_path)!r}); cm.__enter__(); print('held', flush=True);"
        "time.sleep(60)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with (
            caplog.at_level("WARNING", logger="jobs.storage.locks"),
            pytest.raises(
                locks.LockTimeout,
                match=rf"pid {holder.pid} \([^,]+, user root\) held the device of .*lock_timeout_min",
            ),
            locks.device_lock(str(tmp_path), str(tmp_path), timeout_s=2.5),
        ):
            pass
        assert time.monotonic() - t0 < 6
        notes = [
            r.getMessage()
            for r in caplog.records
            if r.getMessage().startswith(f"waiting for pid {holder.pid}")
        ]
        assert len(notes) == 3, notes  # at 0, 1 and 2 s
    finally:
        holder.kill()
        holder.wait()


# 6. analysis wrote results.csv/summary.csv/cells.csv into a folder without records
def test_analysis_of_a_folder_without_records_writes_nothing(tmp_path):
    planted = plant(tmp_path)
    p = analysis(str(tmp_path), cwd=tmp_path)
    assert p.returncode == 1 and "nothing written" in one_line(p)
    intact(planted)
    assert sorted(tmp_path.iterdir()) == sorted(planted)


# 7. a refusal deleted a run folder that existed before; a dry run deleted a folder holding multirun.yaml
def test_a_refusal_never_removes_a_folder_that_existed_before(tmp_path, cwd):
    run = tmp_path / "earlier-run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("mine: 1\n")
    (run / "main.log").write_text("an earlier run's log\n")
    p = campaign("threads=0", f"hydra.run.dir={run}", *TINY, cwd=cwd)
    assert p.returncode == 2 and "threads=0" in one_line(p)
    assert (run / "main.log").exists() and (run / ".hydra").is_dir()
    sweep = tmp_path / "earlier-sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    p = campaign(
        "-m",
        "platform=slurm",
        "platform.dry_run=true",
        "threads=1,2",
        f"hydra.sweep.dir={sweep}",
        f"storage.root={tmp_path}",
        *TINY,
        cwd=cwd,
    )
    assert p.returncode == 0 and "dry run: 2 cells" in p.stdout, p.stderr[-2000:]
    assert (sweep / "multirun.yaml").exists()
    # what this invocation created goes again, parents included
    p = campaign("threads=0", f"hydra.run.dir={tmp_path / 'new' / 'deeper'}", *TINY, cwd=cwd)
    assert p.returncode == 2 and not (tmp_path / "new").exists()


# 8. two campaigns generating the same synthetic set collided on fixed .part names
def test_concurrent_generation_of_one_synthetic_set(tmp_path):
    code = (
        "import sys; from pathlib import Path; from jobs.data import synthetic;"
        "spec = synthetic.SyntheticSpec('c', 3, 3.0, 0.3, 0.6, 0.0, 7);"
        f"synthetic.ensure(spec, Path({str(tmp_path)!r}), 40 + 8 * int(sys.argv[1]), workers=1)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(k)], env=env, stderr=subprocess.PIPE, text=True)
        for k in range(6)
    ]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, errs
    spec = synthetic.SyntheticSpec("c", 3, 3.0, 0.3, 0.6, 0.0, 7)
    folder = tmp_path / spec.key()
    rows = synthetic.read_manifest(folder)
    assert len(rows) == 80 and all((folder / p).stat().st_size == b for p, _, b in rows)
    assert not list(folder.rglob("*.part"))
    # a damaged set is repaired from its manifest before it is used again
    (folder / rows[3][0]).write_bytes(b"truncated")
    (folder / rows[5][0]).unlink()
    synthetic.ensure(spec, tmp_path, 80, workers=1)
    assert (folder / rows[3][0]).stat().st_size == rows[3][2] and (
        folder / rows[5][0]
    ).stat().st_size == rows[5][2]


# 9. Ctrl-C deadlocked with workload.read_delay_ms > 0; SIGINT printed a traceback, SIGTERM nothing
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_sweep_ends_with_one_line_and_resumes(tmp_path, sig):
    make_jpegs(tmp_path / "data", 32)
    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "campaign",
            "-m",
            "workload=microbench",
            "threads=2",
            "repeats=500",
            "warmup=0",
            "batch_size=4",
            "workload.read_delay_ms=3",
            "dataset.source=folder",
            f"dataset.path={tmp_path / 'data'}",
            f"storage.root={tmp_path}",
            f"hydra.sweep.dir={out}",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "run 2/500" not in "".join(
            p.read_text() for p in out.glob("0/*.log")
        ):
            time.sleep(0.3)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)  # old code: hung here in 2 of 5 tries
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err[-3000:]
    # TensorFlow prints its own start-up lines when imported; the campaign ends with exactly one line
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and sum(line.startswith("campaign:") for line in lines) == 1, err[-3000:]
    assert f"interrupted by {signal.Signals(sig).name}" in lines[-1] and f"hydra.sweep.dir={out}" in lines[-1]
    assert not (out / "0" / "record.json").exists()


# 10. checkpoints: a tier that fills up left files behind; the fast tier was checked for one checkpoint
@pytest.mark.tiers
@needs_root
def test_a_checkpoint_run_that_fills_its_tier_leaves_nothing(tmp_path):
    from jobs.workloads.alexnet import training as alexnet
    from jobs.workloads.checkpoint import saving as checkpoint

    make_jpegs(tmp_path / "imgs", 32, classes=4)
    ds = datasets.resolve(
        OmegaConf.create({"name": "t", "source": "folder", "path": str(tmp_path / "imgs"), "num_images": 32}),
        str(tmp_path),
        0,
    )
    small = tmp_path / "small"
    with tmpfs(small, "3m"):
        planted = plant(small)
        train = alexnet.TrainSettings(
            threads=2, batch_size=4, prefetch=1, image_side=64, width=0.5, steps=4, seed=0, device="cpu"
        )
        s = checkpoint.CheckpointSettings(train, 2, "slow", None, small, "fsync", "sync", 2, "full")
        with pytest.raises(Exception) as e:  # ResourceExhaustedError or OSError: the tier is full
            checkpoint.run_once(ds, s)
        assert "space" in str(e.value).lower() or "exhausted" in type(e.value).__name__.lower()
        assert not (small / "iocampaign" / "checkpoints" / "full").exists()
        intact(planted)
        # the fast tier holds max_to_keep + 1 checkpoints at once: too small for them, it falls back
        (tmp_path / "slow").mkdir()
        s = checkpoint.CheckpointSettings(
            train, 1, "fast", small, tmp_path / "slow", "fsync", "sync", 3, "fb"
        )
        r = checkpoint.run_once(ds, s)
        assert r["effective_target"] == "slow" and "max_to_keep" in r["fallback"]
        intact(planted)


# 11-14. one line instead of a traceback or a silent wrong measurement
def test_dataset_path_without_a_source_is_refused(tmp_path, cwd):
    make_jpegs(tmp_path / "data", 4)
    p = campaign(f"dataset.path={tmp_path / 'data'}", *TINY, cwd=cwd)
    assert p.returncode == 2 and "add dataset.source=folder" in one_line(p)
    (tmp_path / "l.txt").write_text("x.jpg\n")
    p = campaign(f"dataset.path={tmp_path / 'l.txt'}", *TINY, cwd=cwd)
    assert p.returncode == 2 and "add dataset.source=filelist" in one_line(p)
    assert list(cwd.iterdir()) == []


def test_file_list_defects_give_one_line(tmp_path, cwd):
    imgs = make_jpegs(tmp_path / "data", 4)
    bad = tmp_path / "binary.txt"
    bad.write_bytes(b"\xff\xfe\x00\x01" * 10)
    twice = tmp_path / "twice.txt"
    twice.write_text(f"{imgs[0]}\n{imgs[1]}\n{imgs[0]}\n")
    for lst, expected in ((bad, "not a UTF-8 text file"), (twice, "twice (lines 1 and 3)")):
        p = campaign(
            "dataset.source=filelist", f"dataset.path={lst}", f"storage.root={tmp_path}", *TINY, cwd=cwd
        )
        assert p.returncode == 2 and expected in one_line(p)
    assert list(cwd.iterdir()) == []


def test_a_symlink_loop_in_a_dataset_folder_is_counted_not_a_traceback(tmp_path, cwd):
    make_jpegs(tmp_path / "data", 8)
    os.symlink("loop_b.jpg", tmp_path / "data" / "c0" / "loop_a.jpg")
    os.symlink("loop_a.jpg", tmp_path / "data" / "c0" / "loop_b.jpg")
    p = campaign(
        "workload=readonly",
        "dataset.source=folder",
        f"dataset.path={tmp_path / 'data'}",
        f"storage.root={tmp_path}",
        "repeats=1",
        "warmup=0",
        "batch_size=2",
        f"hydra.run.dir={tmp_path / 'r'}",
        cwd=cwd,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert records.read(tmp_path / "r" / "record.json").runs[0]["images_dropped"] == 2


def test_damaged_plan_and_records_give_one_line(tmp_path, cwd):
    make_jpegs(tmp_path / "data", 16)
    out = tmp_path / "sweep"
    common = (
        "-m",
        "workload=readonly",
        "threads=1,2",
        "dataset.source=folder",
        f"dataset.path={tmp_path / 'data'}",
        f"storage.root={tmp_path}",
        "repeats=1",
        "warmup=0",
        "batch_size=4",
        f"hydra.sweep.dir={out}",
    )
    assert campaign(*common, cwd=cwd).returncode == 0
    (out / "1" / "record.json").write_text("[1, 2, 3]")  # JSON, but not a record
    p = analysis(str(out), cwd=cwd)
    assert p.returncode == 1 and "UNREADABLE" in p.stdout and "not an object" in p.stdout
    status = subprocess.run(
        [sys.executable, "-m", "campaign.status", str(out)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert status.returncode == 1 and "unreadable" in status.stdout
    shutil.rmtree(out / "1")
    (out / "1").mkdir()  # a cell killed after it started: folder, no record
    status = subprocess.run(
        [sys.executable, "-m", "campaign.status", str(out)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert "started but wrote no record" in status.stdout
    cmp = analysis("compare", str(out), str(out), cwd=cwd)
    assert cmp.returncode == 0
    (out / "0" / "record.json").write_text('{"schema_version": 1}')
    cmp = analysis("compare", str(out), str(out), cwd=cwd)
    assert cmp.returncode == 1 and "UNREADABLE" in cmp.stderr
    plan = (out / "plan.json").read_text()
    (out / "plan.json").write_text(plan[: len(plan) // 2])  # truncated
    p = analysis(str(out), cwd=cwd)  # no readable record, no readable plan: one line, nothing written
    assert p.returncode == 1 and "nothing written" in one_line(p) and "unreadable" in p.stderr
    assert (
        not (out / "results.csv").exists()
        or (out / "results.csv").stat().st_mtime < (out / "plan.json").stat().st_mtime
    )
    status = subprocess.run(
        [sys.executable, "-m", "campaign.status", str(out)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert status.returncode == 2 and "not a readable plan" in one_line(status)
    p = campaign(*common, cwd=cwd)  # resume into it
    assert p.returncode == 2 and "not a readable plan" in one_line(p)


@pytest.mark.tiers
@needs_root
def test_a_storage_root_too_small_for_the_synthetic_set_is_one_line(tmp_path, cwd):
    small = tmp_path / "small"
    with tmpfs(small, "2m"):
        p = campaign(
            "storage=tmpfs",
            f"storage.root={small}",
            "dataset.num_images=200",
            "batch_size=4",
            "repeats=1",
            f"hydra.run.dir={tmp_path / 'r'}",
            cwd=cwd,
        )
        assert (
            p.returncode == 2 and "storage.root" in one_line(p) and "free" in p.stderr
        )  # at planning, before a cell
        assert not list((small / "iocampaign" / "datasets").rglob("*.jpg"))


def test_a_sweep_folder_that_would_add_an_sbatch_directive_is_refused(tmp_path, cwd):
    p = campaign(
        "-m",
        "platform=slurm",
        "platform.dry_run=true",
        "hydra.sweep.dir='out\n#SBATCH --uid=0'",
        f"storage.root={tmp_path}",
        *TINY,
        cwd=cwd,
    )
    assert p.returncode == 2 and "hydra.sweep.dir=" in one_line(p)
    assert list(cwd.iterdir()) == []


# Everything a user owns, around every path the tool writes, through a whole session of use
@needs_fio
def test_planted_files_survive_a_whole_session(tmp_path, cwd):
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
    assert p.returncode == 0, p.stderr[
        -2000:
    ]  # converted sets written beside the planted files, into their own folders
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


def test_a_signal_during_tensorflow_iteration_waits_for_the_next_batch():
    from jobs import interrupts

    old = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    interrupts.install()
    try:
        with pytest.raises(interrupts.Interrupted, match="SIGTERM"), interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)  # the handler has run: noted, not raised inside the block
            reached = True
            interrupts.check()
        assert reached
        with pytest.raises(KeyboardInterrupt):  # outside TensorFlow's iteration: at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    finally:
        signal.signal(signal.SIGTERM, old[0])
        signal.signal(signal.SIGINT, old[1])


# 20. the output folder: the paper's --out, hydra.sweep.dir and compare --csv wrote over a user's files
def test_an_existing_output_folder_or_file_of_the_user_is_refused_untouched(tmp_path, cwd):
    mine = tmp_path / "mine"
    planted = plant(mine)
    for args in (
        ["--out", str(mine), "--tiers", "local,tmpfs", "--only", "table1"],  # a real grid would run
        ["--out", str(mine), "--tiers", "local"],
    ):
        p = campaign("+experiment=paper", "--scale", "ci", *args, cwd=cwd)
        assert p.returncode == 2 and "not a campaign folder" in one_line(p) and "nothing was run" in p.stderr
    p = campaign("-m", "threads=1", f"hydra.sweep.dir={mine}", f"storage.root={tmp_path}", *TINY, cwd=cwd)
    assert p.returncode == 2 and "hydra.sweep.dir" in one_line(p) and "not a campaign folder" in p.stderr
    p = subprocess.run(
        [sys.executable, "-m", "campaign.capacity", "accelerator=resnet50_a100", "--out", str(mine)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert (
        p.returncode == 2
        and "campaign.capacity: --out:" in one_line(p)
        and "not a campaign folder" in p.stderr
    )
    intact(planted)
    assert sorted(mine.iterdir()) == sorted(planted)
    target = mine / "results.csv"
    p = analysis("compare", str(tmp_path), str(tmp_path), "--csv", str(target), cwd=cwd)
    assert p.returncode == 2 and "--csv" in one_line(p) and "exists" in p.stderr
    intact(planted)
    assert list(cwd.iterdir()) == []


def test_bad_paper_options_leave_nothing(cwd):
    for args, says in (
        (["--tiers", "nvme,floppy"], "unknown tier 'nvme'"),
        (["--tiers", ","], "unknown tier ''"),
        (["--only", "fig99"], "unknown grid(s) fig99"),
    ):
        p = campaign("+experiment=paper", "--scale", "ci", *args, cwd=cwd)
        assert p.returncode == 2 and says in one_line(p), p.stderr[-2000:]
    assert list(cwd.iterdir()) == []  # no empty multirun/paper-* folder, no paper.txt


def test_the_analysis_never_writes_over_a_table_it_did_not_write(paper, tmp_path):
    """A file under a name the analysis writes, not listed as the tool's: refused before anything is
    written; the tool's own files (listed) are rewritten as usual."""
    from analysis import outputs

    grid = tmp_path / "fig4_fig5"
    shutil.copytree(paper / "fig4_fig5", grid)
    listed = json.loads((grid / outputs.MANIFEST).read_text())
    assert {"results.csv", "summary.csv", "report.html"} <= set(listed["files"])
    p = analysis(str(grid), cwd=tmp_path)  # the tool's own files: rebuilt
    assert p.returncode == 0, p.stderr[-2000:]
    listed["files"].remove("summary.csv")  # now as if the user had put their own summary.csv there
    (grid / outputs.MANIFEST).write_text(json.dumps(listed))
    planted = {grid / "summary.csv": hashlib.sha256((grid / "summary.csv").read_bytes()).hexdigest()}
    before = {f: f.stat().st_mtime_ns for f in grid.iterdir() if f.is_file()}
    p = analysis(str(grid), cwd=tmp_path)
    assert p.returncode == 2 and "summary.csv exists and was not written by iocampaign" in one_line(p)
    intact(planted)
    assert {
        f: f.stat().st_mtime_ns for f in grid.iterdir() if f.is_file()
    } == before  # nothing written at all
