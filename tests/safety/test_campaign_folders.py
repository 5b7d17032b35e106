"""Campaign folders and what they hold (records, plan.json, the analysis' tables) stay the user's: a resume
with a changed grid keeps every completed record, a refusal removes no folder that existed before, a
folder or file of the user's named as an output is refused untouched, a sweep folder that would add an
#SBATCH line is refused, damaged plans and records give one line, and the analysis writes nothing in a
folder without records and never writes over a table it did not write. Real campaigns and files.

Each test reproduces a failure found by trying the tool as a new user (issue #10) and fails on the code
before the fix.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from jobs import records
from support.commands import analysis, campaign, campaign_status, one_line, run_module
from support.configs import TINY
from support.files import intact, make_jpegs, plant


@pytest.mark.cells
def test_resume_with_a_changed_grid_keeps_every_completed_record(tmp_path, cwd):
    """A resume keeps each cell in the folder it was planned in and puts new cells in new ones: it wrote
    cells into folders by their place in the grid, so a changed grid overwrote a completed record."""
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


def test_a_refusal_never_removes_a_folder_that_existed_before(tmp_path, cwd):
    """A refusal deleted a run folder that existed before; a dry run deleted a folder holding
    multirun.yaml. What the refused command made itself goes again."""
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


def test_an_existing_output_folder_or_file_of_the_user_is_refused_untouched(tmp_path, cwd):
    """The paper study's --out, hydra.sweep.dir, campaign.capacity's --out and compare --csv wrote over
    a user's files."""
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
    p = run_module("campaign.capacity", "accelerator=resnet50_a100", "--out", str(mine), cwd=cwd)
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


def test_bad_options_of_the_paper_study_leave_no_folder(cwd):
    for args, says in (
        (["--tiers", "nvme,floppy"], "unknown tier 'nvme'"),
        (["--tiers", ","], "unknown tier ''"),
        (["--only", "fig99"], "unknown grid(s) fig99"),
    ):
        p = campaign("+experiment=paper", "--scale", "ci", *args, cwd=cwd)
        assert p.returncode == 2 and says in one_line(p), p.stderr[-2000:]
    assert list(cwd.iterdir()) == []  # no empty multirun/paper-* folder, no paper.txt


@pytest.mark.cells
def test_a_damaged_plan_or_record_is_one_line_to_analysis_status_and_resume(tmp_path, cwd):
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
    status = campaign_status(str(out), cwd=cwd)
    assert status.returncode == 1 and "unreadable" in status.stdout
    shutil.rmtree(out / "1")
    (out / "1").mkdir()  # a cell killed after it started: folder, no record
    status = campaign_status(str(out), cwd=cwd)
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
    status = campaign_status(str(out), cwd=cwd)
    assert status.returncode == 2 and "not a readable plan" in one_line(status)
    p = campaign(*common, cwd=cwd)  # resume into it
    assert p.returncode == 2 and "not a readable plan" in one_line(p)


def test_analysis_of_a_folder_without_records_writes_nothing(tmp_path):
    """The analysis wrote results.csv, summary.csv and cells.csv into a folder without records."""
    planted = plant(tmp_path)
    p = analysis(str(tmp_path), cwd=tmp_path)
    assert p.returncode == 1 and "nothing written" in one_line(p)
    intact(planted)
    assert sorted(tmp_path.iterdir()) == sorted(planted)


@pytest.mark.cells
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
    after = {f: f.stat().st_mtime_ns for f in grid.iterdir() if f.is_file()}
    assert after == before  # nothing written at all
