"""The micro-benchmark through PyTorch's DataLoader (``framework=pytorch``), end to end with real PyTorch:
one campaign over the three formats and both pipelines (run once for the module, asserted many ways), a
worker killed mid-run, and the loader settings a campaign refuses."""

import json
import os
import re
import signal
import subprocess
import time

import pandas as pd
import pytest

from jobs import records
from support.commands import campaign, one_line, start_module
from support.files import make_jpegs, on_disk

GOOD = 47  # real JPEGs, and one truncated one: 48 files


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One campaign: files, HDF5 and TFRecord × decode_resize and read_only, 2 workers, cold, 48 files."""
    root = on_disk(tmp_path_factory, "pytorch")
    good = make_jpegs(root / "data", GOOD, side=384)
    data = good[0].read_bytes()
    (root / "data" / "c1" / "truncated.jpg").write_bytes(data[: len(data) // 3])
    out = root / "sweep"
    p = campaign(
        "-m",
        "framework=pytorch",
        "workload=microbench,readonly",
        "dataset.format=files,hdf5,tfrecord",
        "dataset.source=folder",
        f"dataset.path={root / 'data'}",
        f"storage.root={root}",
        "dataset.shard_mb=1",
        "loader.num_workers=2",
        "batch_size=8",
        "repeats=1",
        "warmup=0",
        f"hydra.sweep.dir={out}",
        cwd=root,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    cells = {}
    for rec in sorted(out.glob("*/record.json")):
        r = records.read(rec)
        cells[(r.config["workload"]["pipeline"], r.config["dataset"]["format"])] = r
    return out, good, cells


@pytest.mark.cells
def test_every_cell_ran_through_the_dataloader_with_two_forked_workers(sweep):
    out, _, cells = sweep
    assert sorted(cells) == sorted(
        (p, f) for p in ("decode_resize", "read_only") for f in ("files", "hdf5", "tfrecord")
    )
    for key, r in cells.items():
        assert r.status == "completed" and r.config["framework"]["name"] == "pytorch", key
        (run,) = [x for x in r.runs if not x["warmup"]]
        assert (run["workers"], run["start_method"]) == (2, "fork"), key
        assert 0 < run["startup_s"] <= run["seconds"] and run["first_batch_s"] <= run["seconds"], key
        assert "torch" in json.dumps(r.provenance), key  # the framework's version is recorded


@pytest.mark.cells
def test_every_run_was_cold_and_read_from_the_device_what_it_consumed(sweep):
    _, _, cells = sweep
    for key, r in cells.items():
        for run in r.runs:
            assert run["cache_state"] == "cold" and run["resident_bytes_before"] == 0, key
            # the workers' reads are the run's: at least what was delivered came from the device. No upper
            # bound: the process's read_bytes also take in the pages of torch's libraries faulted in during
            # the run, which after another test's drop_caches=true came to 5.7x this tiny set's bytes
            ratio = run["bytes_read_device"] / run["bytes_consumed"]
            assert ratio >= 0.95, (key, ratio)
            assert run["bytes_read_syscall"] >= run["bytes_consumed"], key  # children's /proc/self/io counted


@pytest.mark.cells
def test_images_delivered_are_the_set_and_the_corrupt_jpeg_is_dropped_by_the_decode(sweep):
    _, _, cells = sweep
    for (pipeline, fmt), r in cells.items():
        (run,) = r.runs
        if pipeline == "read_only":  # read whole, never decoded: every file is delivered
            assert (run["images"], run["images_dropped"], run["dropped_files"]) == (GOOD + 1, 0, []), fmt
            # TFRecord: each worker batches the shards it read, so a worker's last batch may be short
            assert run["batches"] == 6 if fmt != "tfrecord" else 6 <= run["batches"] <= 7, fmt
            continue
        assert (run["images"], run["images_dropped"]) == (GOOD, 1), fmt
        (where,) = run["dropped_files"]
        assert where.endswith("truncated.jpg" if fmt == "files" else "(truncated.jpg)"), where


@pytest.mark.cells
def test_results_label_what_bound_every_run(sweep):
    from analysis.tables.bounds import LABELS

    out, _, _ = sweep
    rows = pd.read_csv(out / "results.csv")
    assert len(rows) == 6 and set(rows["cache_state"]) == {"cold"}
    assert set(rows["bound"]) <= set(LABELS) - {"cache"} and rows["bound"].notna().all()
    assert set(rows["workers"]) == {2} and set(rows["format"]) == {"files", "hdf5", "tfrecord"}


@pytest.mark.cells
def test_cpu_time_covers_the_workers_that_decoded(sweep):
    """The workers are joined at the run's end, so their CPU time is in the run's: a decode run's CPU time
    exceeds the read-only run's over the same files by about the decoding itself, which only the
    workers did (measured here, in this process, with the same function)."""
    from jobs.frameworks.pytorch.loader.samples import decode

    _, good, cells = sweep
    blobs = [p.read_bytes() for p in good]
    t0 = time.process_time()
    for b in blobs:
        decode(b, 224)
    work = time.process_time() - t0
    for fmt in ("files", "hdf5", "tfrecord"):
        decoded, read = cells[("decode_resize", fmt)].runs[0], cells[("read_only", fmt)].runs[0]
        assert decoded["cpu_s"] - read["cpu_s"] >= 0.5 * work, (fmt, decoded["cpu_s"], read["cpu_s"], work)


def _workers_of(pid: int) -> list[int]:
    """The forked DataLoader workers of process ``pid``: its children running its own command line, but
    for the campaign's warm server, a copy of it too, named ``iocampaign-warm`` (``jobs.execution.warm``)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            mine = f.read()
    except OSError:
        return []
    out = []
    for k in kids:
        try:
            with open(f"/proc/{k}/cmdline", "rb") as f, open(f"/proc/{k}/comm") as name:
                if f.read() == mine and name.read().strip() != "iocampaign-warm":
                    out.append(k)
        except OSError:
            continue
    return out


@pytest.mark.cells
def test_a_worker_killed_mid_run_fails_the_cell_naming_it(tmp_path):
    make_jpegs(tmp_path / "data", 16)
    out = tmp_path / "sweep"
    proc = start_module(
        "campaign",
        "-m",
        "framework=pytorch",
        "loader.num_workers=2",
        "workload.read_delay_ms=300",  # 8 images a worker: a run of about 2.4 s
        "batch_size=2",
        "repeats=1",
        "warmup=0",
        "dataset.source=folder",
        f"dataset.path={tmp_path / 'data'}",
        f"storage.root={tmp_path}",
        f"hydra.sweep.dir={out}",
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    killed = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            workers = _workers_of(proc.pid)
            if len(workers) == 2:
                time.sleep(0.5)  # mid-run: batches delivered, more to come
                killed = workers[0]
                os.kill(killed, signal.SIGKILL)
                break
            time.sleep(0.05)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert killed is not None, "no DataLoader worker was seen"
    assert proc.returncode == 1, stderr[-2000:]
    r = records.read(out / "0" / "record.json")
    assert r.status == "failed" and r.runs == []
    assert r.error["type"] == "WorkerDied", r.error
    assert re.search(rf"DataLoader worker \(pid(\(s\))? {killed}\)", r.error["message"]), r.error["message"]
    assert "FAILED  cell 0" in stdout
    # nothing that looks like a result: no row, no figure, nothing in the cell's folder beside its record
    assert not (out / "results.csv").exists() or pd.read_csv(out / "results.csv").empty
    assert sorted(p.name for p in (out / "0").iterdir() if p.suffix != ".log" and p.name != ".hydra") == [
        "record.json"
    ]
    assert not list(out.glob("*.png"))


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["framework=pytorch", "loader.num_workers=-1"], "loader.num_workers=-1 must be 0"),
        (["framework=pytorch", "loader.prefetch_factor=0"], "loader.prefetch_factor=0 must be at least 1"),
        (
            ["framework=pytorch", "loader.persistent_workers=true", "loader.num_workers=0"],
            "loader.persistent_workers=true needs loader.num_workers of 1 or more",
        ),
        (
            ["framework=pytorch", "loader.multiprocessing_context=bogus"],
            "loader.multiprocessing_context=bogus",
        ),
        (
            ["threads=autotune", "framework=pytorch"],
            "threads=autotune has no meaning for PyTorch's DataLoader",
        ),
        (["framework=pytorch", "prefetch=1"], "prefetch=1 is tf.data's transformation"),
        (["framework=pytorch", "workload=baseline"], "workload=baseline runs on tensorflow only"),
        (["framework=nope"], "unknown framework 'nope'"),
    ],
)
def test_a_bad_loader_setting_is_refused_in_one_line_leaving_nothing(cwd, overrides, expected):
    p = campaign(*overrides, "dataset.num_images=32", "storage=local", cwd=cwd)
    assert p.returncode == 2, p.stdout + p.stderr
    line = one_line(p)
    assert line.startswith("campaign: ") and expected in line, line
    assert list(cwd.iterdir()) == []


def test_pin_memory_is_refused_where_no_gpu_would_take_the_batches(cwd):
    """PyTorch ignores pin_memory=true without a GPU: the cell is refused here rather than recorded as
    pinned; a Slurm cell planned here for GPU nodes is not (its node has its own devices)."""
    from jobs.observe import accelerator

    p = campaign("framework=pytorch", "loader.pin_memory=true", "platform.dry_run=true", cwd=cwd)
    if accelerator.gpu_driver():
        assert p.returncode == 0, p.stderr
    else:
        assert p.returncode == 2 and "loader.pin_memory=true: this machine has no GPU" in one_line(p)
    assert list(cwd.iterdir()) == []
    p = campaign(
        "-m",
        "framework=pytorch",
        "loader.pin_memory=true",
        "platform=slurm",
        "platform.dry_run=true",
        cwd=cwd,
    )
    assert p.returncode == 0, p.stdout + p.stderr
