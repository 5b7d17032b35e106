"""End to end: real multiruns through ``python -m campaign`` with real TensorFlow on tiny data."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from jobs import records
from support.commands import campaign, python_env
from support.paths import ROOT

RESULT_COLUMNS = [
    "workload",
    "storage",
    "threads",
    "batch_size",
    "prefetch",
    "run",
    "images",
    "images_dropped",
    "seconds",
    "images_per_s",
    "mb_per_s",
    "bytes_read_device",
    "cache_state",
]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A 2 x 2 x 2 grid on a real disk and on tmpfs: both pipelines, threads 1 and 2."""
    work = tmp_path_factory.mktemp("work")
    disk = tmp_path_factory.mktemp("disk")
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else str(disk)
    out = work / "sweep"
    p = campaign(
        "-m",
        "workload=microbench,readonly",
        "threads=1,2",
        "storage=local,tmpfs",
        f"storage.root={disk}",
        "storage.fs_check=false",
        "dataset.num_images=96",
        "batch_size=16",
        "repeats=2",
        f"hydra.sweep.dir={out}",
        cwd=work,
        fresh=True,  # TensorFlow imported cold: its start-up lines are what a test below checks
    )
    # storage.root given once applies to both tiers (the tmpfs cells on disk: storage.fs_check=false); tmpfs
    # gets its own run below
    assert p.returncode == 0, p.stderr[-3000:]
    p2 = campaign(
        "-m",
        "workload=microbench",
        "threads=2",
        "storage=tmpfs",
        f"storage.root={shm}",
        "dataset.num_images=96",
        "batch_size=16",
        "repeats=2",
        f"hydra.sweep.dir={work / 'shm'}",
        cwd=work,
    )
    assert p2.returncode == 0, p2.stderr[-3000:]
    return out, work / "shm", p


@pytest.mark.cells
def test_tensorflows_start_up_lines_go_to_the_first_cells_folder_not_the_terminal(sweep):
    out, _, p = sweep
    chatter = ("absl::InitializeLog", "oneDNN custom operations", "cudart_stub", "cuInit")
    assert not [line for line in (p.stdout + p.stderr).splitlines() if any(c in line for c in chatter)]
    logs = sorted(out.glob("*/tensorflow_startup.log"))
    assert [x.parent.name for x in logs] == ["0"]  # imported once, by the campaign's first cell
    assert "absl::InitializeLog" in logs[0].read_text()


@pytest.mark.cells
def test_results_table_has_every_cell_and_run(sweep):
    out, _, _ = sweep
    df = pd.read_csv(out / "results.csv")
    assert list(df.columns[:20]) == [
        "workload",
        "kind",
        "pipeline",
        "framework",
        "storage",
        "reader",
        "client",
        "stage",
        "tasks_per_cell",
        "nodes",
        "service",
        "dataset",
        "format",
        "shuffle",
        "threads",
        "loader_workers",
        "batch_size",
        "prefetch",
        "prefetch_to",
        "cache",
    ]
    assert set(df["framework"]) == {"tensorflow"} and df["loader_workers"].isna().all()
    assert set(df["nodes"]) == {1}
    assert set(df["prefetch_to"]) == {"host"}
    assert set(zip(df["format"], df["shuffle"])) == {("files", "global")}  # the defaults: the paper's layout
    assert set(zip(df["workload"], df["pipeline"])) == {
        ("microbench", "decode_resize"),
        ("readonly", "read_only"),
    }
    for col in RESULT_COLUMNS:
        assert col in df.columns
    assert len(df) == 8 * 2  # 8 cells x 2 measured runs, warm-ups excluded
    assert sorted(df["run"].unique()) == [1, 2]
    assert set(df["images"]) == {96} and set(df["images_dropped"]) == {0}
    assert (df["images_per_s"] > 0).all()
    assert df["mb_per_s"].tolist() == pytest.approx((df["bytes_consumed"] / df["seconds"] / 1e6).tolist())


@pytest.mark.cells
def test_cold_runs_read_what_they_consume_from_the_device(sweep):
    out, shm, _ = sweep
    df = pd.read_csv(out / "results.csv")
    # storage.root was a real disk folder for both tiers in this sweep
    assert set(df["cache_state"]) == {"cold"}
    ratio = df["bytes_read_device"] / df["bytes_consumed"]
    assert ratio.between(0.9, 1.5).all(), ratio.describe()
    tm = pd.read_csv(shm / "results.csv")
    if set(tm["fs_type"]) == {"tmpfs"}:
        assert set(tm["cache_state"]) == {"memory"}


@pytest.mark.cells
def test_each_cell_has_a_schema_versioned_record(sweep):
    out, _, _ = sweep
    plan = json.loads((out / "plan.json").read_text())
    assert len(plan["cells"]) == 8
    for cell in plan["cells"]:
        rec = records.read(out / cell["dir"] / "record.json")
        assert rec.schema_version == records.SCHEMA_VERSION and rec.status == "completed"
        assert rec.overrides[:3] == cell["overrides"][:3]
        assert len(rec.runs) == 3 and rec.runs[0]["warmup"] and not any(r["warmup"] for r in rec.runs[1:])
        prov = rec.provenance
        for key in ("host", "kernel", "cpu_model", "cpu_count", "versions", "git_commit", "storage_mount"):
            assert key in prov
        assert prov["storage_mount"]["fs_type"] and prov["storage_mount"]["options"]
        assert prov["versions"]["tensorflow"]
        assert rec.config["dataset"]["num_images"] == 96
        assert rec.dataset["files"] == 96 and rec.dataset["total_bytes"] > 0
        assert (out / cell["dir"] / ".hydra" / "config.yaml").exists()


@pytest.mark.cells
def test_figures_and_tables_are_rendered(sweep):
    out, _, p = sweep
    for name in ("fig4.png", "fig4.svg", "fig5.png", "fig5.svg", "summary.csv", "cells.csv"):
        assert (out / name).stat().st_size > 1000 or name.endswith(".csv")
    assert str(out / "fig4.png") in p.stdout
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 8
    row = summary.iloc[0]
    assert row["images_per_s_min"] <= row["images_per_s_median"] <= row["images_per_s_max"]


@pytest.mark.cells
def test_analysis_rebuilds_the_same_table_without_tensorflow(sweep, tmp_path):
    out, _, _ = sweep
    before = pd.read_csv(out / "results.csv")
    (out / "results.csv").unlink()
    (out / "fig4.png").unlink()
    code = (
        "import sys; from analysis.__main__ import main; rc = main([sys.argv[1]]);"
        "assert 'tensorflow' not in sys.modules, 'analysis imported tensorflow'; sys.exit(rc)"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, str(out)], env=python_env(), capture_output=True, text=True, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr
    after = pd.read_csv(out / "results.csv")
    pd.testing.assert_frame_equal(before, after)
    assert (out / "fig4.png").exists()


@pytest.mark.cells
def test_single_cell_on_defaults_writes_record_table_and_figure(tmp_path, disk_root):
    p = campaign(
        f"storage.root={disk_root}",
        "dataset.num_images=64",
        "batch_size=32",
        "repeats=1",
        "workload=readonly",
        "hydra.run.dir=run",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    run = tmp_path / "run"
    assert records.read(run / "record.json").status == "completed"
    assert len(pd.read_csv(run / "results.csv")) == 1
    assert (run / "fig5.png").exists()
    assert "\n  mode: RUN\n" in (run / ".hydra" / "hydra.yaml").read_text()  # no -m: Hydra's single run


@pytest.mark.cells
def test_warm_cache_is_requested_and_verified(tmp_path, disk_root):
    p = campaign(
        f"storage.root={disk_root}",
        "dataset.num_images=64",
        "batch_size=32",
        "repeats=2",
        "cache=warm",
        "hydra.run.dir=run",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    df = pd.read_csv(tmp_path / "run" / "results.csv")
    assert set(df["cache"]) == {"warm"} and (df["resident_bytes_before"] >= 0.9 * df["bytes_consumed"]).all()
    # each run's label is what its device reads prove: warm, or not_warm where the device still served a
    # share; another test's global drop_caches (tests/storage/test_cache.py) can empty the page cache during
    # a run, which is then honestly not_warm, so one of the two runs verified warm is what must hold
    warm = df["cache_state"] == "warm"
    assert (df[warm]["device_read_ratio"] <= 0.1).all() and (df[~warm]["device_read_ratio"] > 0.1).all(), df
    assert set(df["cache_state"]) <= {"warm", "not_warm"} and warm.any(), df


def test_the_docs_document_every_results_column():
    from analysis.tables import tidy as tables
    from jobs import workloads

    readme = (ROOT / "docs" / "outputs.md").read_text()
    theirs = {
        m.name
        for n in workloads.names()
        if type(workloads.get(n)).__module__.startswith(workloads.EXTERNAL)
        for m in workloads.get(n).metrics
    }  # a user's own workload (tests/toy, when a test loaded it) documents its own
    for col in tables.results_frame(tables.Collected(folder=ROOT)).columns:
        assert f"`{col}`" in readme or col in theirs, col
