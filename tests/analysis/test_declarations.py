"""What the analysis draws and labels a workload's rows with is data it reads, not code it imports (issue
60): each record keeps the figures and metrics its workload declared (``CellRecord.declared``); records
written before (schema 1) are drawn with the built-in workloads' own, kept as ``analysis/workloads.json``;
a declaration that names a drawing function outside the analysis and the workloads' own package, or a
file name that is not plain, is not drawn."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from support.commands import python_env, run_module
from support.paths import ROOT

BUILTIN = ROOT / "analysis" / "workloads.json"


def test_the_built_in_declarations_the_analysis_keeps_are_the_workloads_own():
    """``analysis/workloads.json`` is what the tool's own workloads declare today: a workload's new figure
    or metric is a change of this file too (``UPDATE_GOLDEN=1`` writes it)."""
    from jobs import workloads

    now = workloads.builtin_declarations()
    if os.environ.get("UPDATE_GOLDEN") == "1":
        BUILTIN.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    assert json.loads(BUILTIN.read_text()) == json.loads(json.dumps(now)), (
        "analysis/workloads.json differs from the workloads' declarations: UPDATE_GOLDEN=1 rewrites it"
    )
    assert {"microbench", "alexnet", "checkpoint", "emulated"} <= set(now)
    assert any(f["key"] == "fig4" for f in now["microbench"]["figures"])


@pytest.fixture(scope="module")
def grid(paper, tmp_path_factory) -> Path:
    """A copy of the session paper study's Figs. 4-5 grid (real records, as the campaign wrote them)."""
    out = tmp_path_factory.mktemp("declared") / "fig4_fig5"
    shutil.copytree(paper / "fig4_fig5", out, symlinks=True)
    return out


def _records(folder: Path) -> list[Path]:
    return sorted(folder.rglob("record.json"))


def _analysed(folder: Path) -> tuple[str, list[str]]:
    """``python -m analysis <folder>`` in a fresh interpreter: its stderr, and the modules of
    jobs.workloads and the frameworks' engines it imported."""
    code = (
        "import sys\n"
        "from analysis.__main__ import main\n"
        f"rc = main([{str(folder)!r}])\n"
        "measuring = ('jobs.workloads', 'jobs.runner', 'tensorflow')\n"
        "print(sorted(m for m in sys.modules if m.startswith(measuring)))\n"
        "sys.exit(rc)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        cwd=folder,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stderr, json.loads(p.stdout.strip().splitlines()[-1].replace("'", '"'))


@pytest.mark.cells
def test_the_records_say_what_to_draw_and_the_analysis_imports_no_workload(grid):
    recs = [json.loads(p.read_text()) for p in _records(grid)]
    assert recs and all(r["schema_version"] == 2 for r in recs)
    fig = {f["key"]: f for f in recs[0]["declared"]["figures"]}
    assert fig["fig4"]["draw"] == "analysis.figures.bandwidth:bandwidth_figure"
    assert any(
        m["name"] == "images_per_s" and m["unit"] == "images/s" for m in recs[0]["declared"]["metrics"]
    )
    for stem in ("fig4", "fig5"):
        (grid / f"{stem}.png").unlink()
    err, imported = _analysed(grid)
    assert imported == [], imported  # nothing of the workloads, the runner or TensorFlow
    assert (grid / "fig4.png").stat().st_size > 0 and (grid / "fig5.png").stat().st_size > 0
    assert "is not drawn" not in err


@pytest.mark.cells
def test_records_of_schema_1_are_drawn_with_the_built_in_declarations(grid, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(grid, old, symlinks=True)
    for p in _records(old):
        r = json.loads(p.read_text())
        r.pop("declared")
        if r["config"]["workload"]["kind"] == "microbench":  # the first records: before workload modules
            del r["config"]["workload"]["kind"]
        p.write_text(json.dumps({**r, "schema_version": 1}))
        (old / "fig4.png").unlink(missing_ok=True)
    err, imported = _analysed(old)
    assert imported == [] and (old / "fig4.png").exists() and (old / "fig5.png").exists(), err
    assert "keep no declarations" not in err  # a record without kind is the micro-benchmark's
    assert list(pd.read_csv(old / "results.csv").columns) == list(pd.read_csv(grid / "results.csv").columns)
    assert set(pd.read_csv(old / "results.csv")["kind"]) == set(pd.read_csv(grid / "results.csv")["kind"])


@pytest.mark.cells
def test_a_declared_metric_is_a_column_and_a_declaration_that_names_other_code_is_not_drawn(grid, tmp_path):
    """A workload outside the tool declares a metric of its own: its records carry it, and results.csv
    gains the column with its values, although the workload's code is nowhere on this machine. A record
    whose figure names a function of another package (``os:system``) or a file name with a folder in it is
    drawn without them, one line each, and nothing is written outside the campaign folder."""
    own = tmp_path / "own"
    shutil.copytree(grid, own, symlinks=True)
    for p in _records(own):
        r = json.loads(p.read_text())
        r["declared"]["metrics"].append({"name": "slept_s", "unit": "s", "better": "", "doc": "time slept"})
        r["declared"]["figures"] += [
            {"key": "evil", "draw": "os:system", "title": "", "where": [], "order": 1},
            {
                "key": "../escaped",
                "draw": "analysis.figures.bandwidth:fig4",
                "title": "",
                "where": [],
                "order": 1,
            },
            {
                "key": "mine",
                "draw": "iocampaign_workloads.nowhere:draw",
                "title": "",
                "where": [],
                "order": 1,
            },
        ]
        for run in r["runs"]:
            run["slept_s"] = 1.5
        p.write_text(json.dumps(r))
    before = sorted(x.name for x in tmp_path.iterdir())
    err, _ = _analysed(own)
    assert set(pd.read_csv(own / "results.csv")["slept_s"]) == {1.5}
    lines = [line for line in err.splitlines() if "is not drawn" in line]
    assert len(lines) == 3, err  # each named once, however many records declare it
    assert any("draw='os:system' names no function of analysis.figures" in line for line in lines), lines
    assert any("'../escaped' is not a plain file name" in line for line in lines), lines
    mine = "mine ('microbench') is not drawn: iocampaign_workloads.nowhere:draw"
    assert any(mine in line for line in lines), lines
    assert sorted(x.name for x in tmp_path.iterdir()) == before and not (own / "evil.png").exists()
    assert (own / "fig4.png").exists()


@pytest.mark.cells
def test_declarations_that_are_no_declarations_leave_the_tables_whole(grid, tmp_path):
    """Records (planted, or damaged) whose declarations are not lists, a metric named like a column the
    tables make, an order no number holds, a title matplotlib cannot typeset, a function of the analysis
    that draws nothing, and a second workload's figure of the same name: the analysis ends as before,
    one line each, with every table and the figures it can draw."""
    bad = tmp_path / "bad"
    shutil.copytree(grid, bad, symlinks=True)
    paths = _records(bad)
    assert len(paths) >= 4
    declared = [
        {"metrics": 5, "figures": True},
        {
            "metrics": [{"name": "kind", "unit": "", "better": "", "doc": "x"}, {"name": 3}],
            "figures": [{"key": "huge", "draw": "analysis.figures.bandwidth:x", "order": 10**400}],
        },
        {
            "metrics": [],
            "figures": [
                {"key": "typeset", "draw": "analysis.figures.bandwidth:bandwidth_figure", "title": "$\\no{$"},
                {"key": "builder", "draw": "analysis.figures.declared:render_all"},
                {"key": "outputs", "draw": "analysis.outputs:os"},
            ],
        },
    ]
    for p, d in zip(paths, declared):
        r = json.loads(p.read_text())
        r["declared"] = d
        p.write_text(json.dumps(r))
    r = json.loads(paths[-1].read_text())
    r["config"]["workload"]["kind"] = "other"  # another kind's fig4: the first declaration keeps the name
    paths[-1].write_text(json.dumps(r))
    err, _ = _analysed(bad)
    assert "Traceback" not in err, err
    for said in (
        "the declarations of workload 'microbench' are not lists of metrics and figures",
        "a metric of workload 'microbench' is not a column: 'kind' is not a name a metric may have",
        "a metric of workload 'microbench' is not a column: {'name': 3} is no metric",
        "a figure of workload 'microbench' is not drawn: figure 'huge': order=",
        "draw='analysis.outputs:os' names no function of analysis.figures or iocampaign_workloads",
        "typeset ('microbench') is not drawn: ValueError",
        "builder ('microbench') is not drawn: AttributeError",
        "figure fig4 of workload 'other' is not drawn: 'microbench' has one of its name",
    ):
        assert sum(said in line for line in err.splitlines()) == 1, (said, err)
    results = pd.read_csv(bad / "results.csv")
    assert list(results.columns) == list(pd.read_csv(grid / "results.csv").columns)
    assert set(results["kind"]) == {"microbench", "other"}  # no metric took the column's name
    assert (bad / "fig4.png").exists() and not (bad / "typeset.png").exists()
    assert not list(bad.glob("builder*")) and not list(bad.glob("outputs*"))


def test_a_workload_whose_figure_the_analysis_would_not_draw_is_refused_when_registered():
    from jobs import workloads
    from jobs.schema import WorkloadConf

    for key, draw in (("ok", "os:system"), ("../up", "analysis.figures.bandwidth:bandwidth_figure")):

        class Odd(workloads.Workload):
            name = "odd_figure"
            schema = WorkloadConf
            figures = (workloads.Figure(key, draw),)

        with pytest.raises(workloads.WorkloadError, match="figure .* (names no function|is not a plain)"):
            workloads.register(Odd)
        assert "odd_figure" not in workloads.names()


@pytest.mark.cells
def test_a_users_file_named_as_a_declared_figure_is_left_byte_for_byte(grid, tmp_path, other_user):
    """A figure a record declares is a file name the analysis may write: where the campaign folder holds a
    user's own file of that name (or another user's link of it), the analysis writes nothing, says so in
    one line, and both are left as they were."""
    from support.commands import analysis

    _, uid, gid = other_user
    mine = tmp_path / "mine"
    shutil.copytree(grid, mine, symlinks=True)
    for p in _records(mine):
        r = json.loads(p.read_text())
        notes = {"key": "notes", "draw": "analysis.figures.bandwidth:bandwidth_figure"}
        r["declared"]["figures"].append(notes)
        p.write_text(json.dumps(r))
    own = mine / "notes.png"
    own.write_bytes(b"the user's own notes\x00")
    target = tmp_path / "target.txt"
    target.write_bytes(b"root's file the link points at\n")
    link = mine / "notes.svg"
    link.symlink_to(target)
    os.chown(link, uid, gid, follow_symlinks=False)
    results = (mine / "results.csv").read_bytes()
    p = analysis(str(mine), cwd=tmp_path)
    assert p.returncode == 2 and "nothing was written" in p.stderr and "notes" in p.stderr, p.stderr
    assert own.read_bytes() == b"the user's own notes\x00" and link.is_symlink()
    assert target.read_bytes() == b"root's file the link points at\n"
    assert (mine / "results.csv").read_bytes() == results


# a workload's own drawing code that meets a signal, and in its place raises an error of its own (as a
# library may: OmegaConf's clean-up of a node the interrupt left half built)
CATCHES_THE_SIGNAL = """
import os
import time


def draw(rows, folder, figure):
    try:
        os.kill(os.getpid(), int(os.environ["SIGNAL_TO_CATCH"]))
        time.sleep(5)
    except BaseException:
        raise AttributeError("'NoneType' object has no attribute '_invalidate_flags_cache'") from None
    return []
"""


@pytest.mark.cells
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_a_workloads_figure_is_drawn_ends_the_analysis_as_that_signal(grid, tmp_path, sig):
    """Before: the error the drawing code raised in place of the interrupt was taken for the figure's
    own (``mine ('microbench') is not drawn: AttributeError: …``), and the analysis went on and ended
    with status 0, the signal lost. Now: the signal's one line, 128 + the signal, no file half written."""
    own = tmp_path / "own"
    shutil.copytree(grid, own, symlinks=True)
    for p in _records(own):
        r = json.loads(p.read_text())
        mine = {"key": "mine", "draw": "iocampaign_workloads.catching:draw", "title": "", "where": []}
        r["declared"]["figures"].append({**mine, "order": 1})
        p.write_text(json.dumps(r))
    code = tmp_path / "code"
    (code / "iocampaign_workloads").mkdir(parents=True)
    (code / "iocampaign_workloads" / "catching.py").write_text(CATCHES_THE_SIGNAL)
    env = python_env(PYTHONPATH=f"{code}{os.pathsep}{ROOT}", SIGNAL_TO_CATCH=str(int(sig)))
    p = run_module("analysis", str(own), cwd=own, env=env)
    name = signal.Signals(sig).name
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 128 + sig and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"analysis: interrupted by {name}"), p.stderr
    assert not [x for x in own.rglob("*") if x.name.endswith(".part")]
