"""Issue 44, item 5: ``python -m analysis`` acts only on a campaign folder (a sweep's plan.json, a single
run's record.json, a paper study's or a capacity search's marker); any other folder, e.g. one that holds
campaigns, gets one line and nothing written (today it merged every campaign below it and wrote the report
there)."""

import os

from analysis import build, outputs
from analysis.__main__ import main
from jobs import plan
from support.commands import analysis


def _a_sweep(folder):
    """A campaign folder of one planned cell that never ran."""
    folder.mkdir(parents=True)
    plan.write(folder, [plan.PlannedCell(0, "0", ["threads=1"], "0123456789ab")])
    return folder


def _files(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_which_folders_are_campaigns(tmp_path):
    assert build.not_a_campaign(_a_sweep(tmp_path / "sweep")) is None
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "record.json").write_text("{}")
    assert build.not_a_campaign(tmp_path / "run") is None  # a single run's folder (outputs/<date>/<time>)
    study = tmp_path / "study"
    study.mkdir()
    outputs.write_text(study / "paper.txt", "scale=ci\n")  # the study's own marker, listed as the tool's
    assert build.not_a_campaign(study) is None
    search = tmp_path / "search"
    search.mkdir()
    outputs.write_text(search / "capacity.txt", "tiers=local\n")
    assert build.not_a_campaign(search) is None
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "paper.txt").write_text("my notes on the paper\n")  # a user's file of that name proves nothing
    line = build.not_a_campaign(mine)
    assert (
        line.startswith(f"{mine} is not a campaign folder: a campaign folder holds plan.json")
        and "\n" not in line
    )
    assert line.endswith("nothing was written")
    assert build.not_a_campaign(tmp_path) is not None  # the folder that holds them all


def test_a_folder_of_campaigns_is_refused_and_nothing_is_written(tmp_path, capsys):
    top = tmp_path / "multirun"
    _a_sweep(top / "2026-01-01" / "10-00-00")
    _a_sweep(top / "2026-01-02" / "11-00-00")
    before = _files(top)
    assert main([str(top)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"analysis: {top} is not a campaign folder") and err.count("\n") == 1
    assert _files(top) == before
    # a campaign itself: analysed (its cell is missing)
    assert main([str(top / "2026-01-01" / "10-00-00")]) == 1
    assert (top / "2026-01-01" / "10-00-00" / "results.csv").exists()


def test_a_plain_folder_gets_one_line_from_the_command(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine\n")
    p = analysis(str(plain), cwd=tmp_path)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, p.stderr
    assert "is not a campaign folder" in p.stderr
    assert os.listdir(plain) == ["notes.txt"]
