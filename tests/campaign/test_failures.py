"""Failure paths: a cell that raises, a campaign killed mid-way, records the analysis cannot read."""

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from jobs import records
from support.commands import analysis, campaign, start_module
from support.files import make_jpegs


@pytest.mark.cells
def test_failed_cell_is_recorded_and_the_sweep_goes_on(tmp_path):
    data = tmp_path / "data" / "c0"
    data.mkdir(parents=True)
    for i in range(8):
        (data / f"{i}.jpg").write_bytes(b"not a jpeg at all" * (i + 1))
    out = tmp_path / "sweep"
    p = campaign(
        "-m",
        "workload=microbench,readonly",
        "dataset.source=folder",
        f"dataset.path={data.parent}",
        f"storage.root={tmp_path}",
        "batch_size=4",
        "repeats=1",
        f"hydra.sweep.dir={out}",
        cwd=tmp_path,
    )
    assert p.returncode == 1, p.stderr[-2000:]
    failed = records.read(out / "0" / "record.json")
    assert failed.status == "failed" and failed.runs == []
    assert failed.error["type"] == "RuntimeError" and "no image" in failed.error["message"]
    assert records.read(out / "1" / "record.json").status == "completed"  # read-only does not decode
    cells = pd.read_csv(out / "cells.csv")
    assert cells.set_index("cell_dir").loc[0, "status"] == "failed"
    results = pd.read_csv(out / "results.csv")
    assert set(results["workload"]) == {"readonly"}  # a failed cell contributes no rows
    assert "FAILED  cell 0" in p.stdout
    # every figure names the cell it cannot draw, instead of a silent gap where its bar would be
    figures = sorted(out.glob("*.svg"))
    assert figures
    for svg in figures:
        said = re.findall(r"<!-- (Not drawn: .*?) -->", svg.read_text())
        assert said and said[0].startswith(
            "Not drawn: 1 of 2 cells have no runs: #0 failed (workload=microbench)"
        ), (
            svg.name,
            said,
        )
    assert f"rerun the failed and missing cells: the same command and hydra.sweep.dir={out} " in p.stdout
    # a campaign whose every cell failed: its report says the machine was not recorded, with no "None"
    only = tmp_path / "only_failed"
    shutil.copytree(out / "0", only / "0")
    analysis(str(only), cwd=tmp_path)
    page = (only / "report.html").read_text()
    assert "not recorded: no cell completed" in page and "None" not in page, page


@pytest.mark.cells
def test_a_killed_campaign_reports_its_missing_cells(tmp_path):
    make_jpegs(tmp_path / "data", 16)
    out = tmp_path / "sweep"
    proc = start_module(
        "campaign",
        "-m",
        "threads=1,2",
        "repeats=400",
        "warmup=0",
        "batch_size=4",
        "dataset.source=folder",
        f"dataset.path={tmp_path / 'data'}",
        f"storage.root={tmp_path}",
        f"hydra.sweep.dir={out}",
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "plan.json").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert (out / "plan.json").exists()
    p = analysis(str(out), cwd=tmp_path)
    assert p.returncode == 1
    assert "MISSING cell 0" in p.stdout and "MISSING cell 1" in p.stdout
    cells = pd.read_csv(out / "cells.csv")
    assert list(cells["status"]) == ["missing", "missing"]


def make_record(folder):
    records.write(
        records.CellRecord(
            cell_id="c0",
            status="failed",
            config={},
            overrides=[],
            runs=[],
            dataset={},
            provenance={},
            started_at="",
            finished_at="",
            error={"type": "E", "message": "m", "traceback": ""},
        ),
        folder,
    )


def test_unreadable_and_foreign_records_are_reported_not_skipped(tmp_path):
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "record.json").write_text(json.dumps({"schema_version": 999}))
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "record.json").write_text("{broken")
    p = analysis(str(tmp_path), cwd=tmp_path)
    assert p.returncode == 1  # nothing but unreadable records: named, and no tables written over the folder
    assert "2 unreadable" in p.stderr and "record schema version 999, this project reads 1" in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["0", "1"]
    (tmp_path / "2").mkdir()  # beside a readable record, every unreadable one is listed
    make_record(tmp_path / "2")
    p = analysis(str(tmp_path), "--no-figures", cwd=tmp_path)
    assert p.returncode == 1
    assert "record schema version 999, this project reads 1" in p.stdout
    assert "1/record.json: not a readable record" in p.stdout


def test_analysis_of_a_folder_without_records(tmp_path):
    p = analysis(str(tmp_path), cwd=tmp_path)
    assert (
        p.returncode == 2
        and f"{tmp_path} is not a campaign folder" in p.stderr
        and "nothing was written" in p.stderr
    )
    assert list(tmp_path.iterdir()) == []
    p = analysis(str(tmp_path / "nope"), cwd=tmp_path)
    assert p.returncode == 2 and "is not a folder" in p.stderr


def test_latest_points_at_the_newest_campaign_and_never_replaces_a_users_file(tmp_path):
    from campaign import outputs

    top = tmp_path / "multirun"
    first, second = top / "2026-11-23" / "10-00-00", top / "2026-11-23" / "10-05-00"
    for f in (first, second):
        f.mkdir(parents=True)
    assert outputs.link_latest(first, top) == top / "latest" and (top / "latest").resolve() == first
    outputs.link_latest(second, top)
    assert (top / "latest").resolve() == second and (top / "latest").is_symlink()
    assert outputs.link_latest(tmp_path / "elsewhere", top) is None  # a hydra.sweep.dir outside multirun/
    mine = tmp_path / "other"
    (mine / "sweep").mkdir(parents=True)
    (mine / "latest").write_text("the user's")
    assert outputs.link_latest(mine / "sweep", mine) is None and (mine / "latest").read_text() == "the user's"


def test_a_failed_cells_overrides_are_said_as_typed_not_as_hydra_escaped_them():
    from analysis.build import Built

    failed = {"cell_dir": "0", "overrides": r"storage.endpoint=http\://127.0.0.1\:9 threads=1", "error": "x"}
    said = Built(Path("/c"), failed=[failed]).describe()
    assert "  FAILED  cell 0 [storage.endpoint=http://127.0.0.1:9 threads=1]: x" in said.splitlines()
