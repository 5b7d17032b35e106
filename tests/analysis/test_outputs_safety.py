"""The analysis never writes over a file it did not write, never follows a link planted in a campaign
folder, never waits on a FIFO planted under one of the tool's names (nor does ``campaign.status``),
and refuses bad options of ``compare`` and ``profile`` in one line (issue 43, items 3, 5, 8 and 9).

One real campaign (a tiny AlexNet cell: its compute-only steps also feed ``analysis profile``) is run
once for the module; each test works on a copy of its folder."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.commands import campaign, run_module

pytestmark = pytest.mark.cells  # every test reads the module's one real campaign (``finished``)

MANIFEST = ".iocampaign-outputs.json"


def _run(module: str, *args: str, cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    """``python -m <module> ...`` as a user runs it; a hang fails the test within two minutes instead of
    stalling the suite."""
    return run_module(module, *args, cwd=cwd, timeout=timeout)


def _one_line(p: subprocess.CompletedProcess) -> str:
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    return lines[0]


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (links as their target, FIFOs by kind) -> its content's hash."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            out[str(p)] = "link " + os.readlink(p)
        elif p.is_fifo():
            out[str(p)] = "fifo"
        elif p.is_file():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished campaign folder: one AlexNet cell, analysed by the campaign itself."""
    cwd = tmp_path_factory.mktemp("outputs-safety")
    p = campaign(
        "-m",
        "workload=alexnet_small",
        "threads=1",
        "storage=local",
        "dataset.num_images=64",
        "batch_size=16",
        "repeats=1",
        "warmup=0",
        "hydra.sweep.dir=done",
        cwd=cwd,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert (cwd / "done" / "results.csv").is_file()
    return cwd / "done"


@pytest.fixture
def unfinished(finished, tmp_path) -> Path:
    """The campaign's folder as a kill (or platform.wait=false) leaves it: the plan and the cell, no table."""
    d = tmp_path / "unfinished"
    tables = json.loads((finished / MANIFEST).read_text())["files"]
    shutil.copytree(finished, d, ignore=shutil.ignore_patterns(MANIFEST, *tables))
    assert (d / "plan.json").is_file() and not (d / "results.csv").exists()
    return d


def test_a_users_tables_in_an_unfinished_campaign_are_never_written_over(unfinished):
    """Today's code took any file newer than plan.json for its own: it wrote over the user's results.csv,
    then refused summary.csv saying "nothing was written"."""
    (unfinished / "results.csv").write_bytes(b"my,own\n1,2\n")
    (unfinished / "summary.csv").write_bytes(b"my summary\n")
    before = _snapshot(unfinished)
    p = _run("analysis", str(unfinished), cwd=unfinished.parent)
    assert (unfinished / "results.csv").read_bytes() == b"my,own\n1,2\n"
    assert _snapshot(unfinished) == before  # the user's bytes, and nothing added (not even a manifest)
    line = _one_line(p)
    assert p.returncode == 2 and "results.csv exists and was not written by iocampaign" in line, line
    assert line.endswith("nothing was written")


def test_the_analysis_writes_its_own_files_again_and_lists_each(finished, tmp_path):
    d = tmp_path / "again"
    shutil.copytree(finished, d)
    p = _run("analysis", str(d), cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    listed = (d / MANIFEST).read_text()
    assert all(f'"{n}"' in listed for n in ("results.csv", "summary.csv", "report.html", "fig6.png"))
    assert not list(d.glob(".*.part")) and not list(d.glob("*.part"))  # no temporary file left


def test_a_link_planted_under_the_manifests_temporary_name_is_never_followed(unfinished, tmp_path):
    """Today's code wrote the manifest through ``.iocampaign-outputs.json.part``, following a link there."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"a file of someone else\n")
    (unfinished / ".iocampaign-outputs.json.part").symlink_to(victim)
    p = _run("analysis", str(unfinished), cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert victim.read_bytes() == b"a file of someone else\n"
    manifest = unfinished / MANIFEST
    assert manifest.is_file() and not manifest.is_symlink() and '"results.csv"' in manifest.read_text()


def test_a_link_in_place_of_one_of_the_tools_own_tables_is_refused_not_followed(finished, tmp_path):
    d = tmp_path / "linked"
    shutil.copytree(finished, d)
    victim = tmp_path / "victim.csv"
    victim.write_bytes(b"precious\n")
    (d / "cells.csv").unlink()
    (d / "cells.csv").symlink_to(victim)  # the manifest still lists cells.csv as the tool's
    before = _snapshot(d)
    p = _run("analysis", str(d), cwd=tmp_path)
    assert (
        p.returncode == 2
        and "cells.csv is a symbolic link" in _one_line(p)
        and "nothing was written" in p.stderr
    )
    assert victim.read_bytes() == b"precious\n" and _snapshot(d) == before


def _with_fifo(finished: Path, tmp_path: Path, name: str) -> Path:
    """A copy of the finished campaign with a FIFO in place of ``name``."""
    d = tmp_path / "fifo"
    shutil.copytree(finished, d)
    (d / name).unlink(missing_ok=True)
    os.mkfifo(d / name)
    return d


@pytest.mark.parametrize("name", ["plan.json", "0/record.json", ".iocampaign-outputs.json", "paper.txt"])
def test_a_fifo_under_a_tools_name_is_refused_in_one_line_never_waited_on(finished, tmp_path, name):
    """Today's code opened each of these for reading and waited for a writer for ever."""
    d = _with_fifo(finished, tmp_path, name)
    before = _snapshot(d)
    p = _run("analysis", str(d), cwd=tmp_path, timeout=120)
    if name == "plan.json":  # as a damaged plan: the records are analysed, the plan reported unreadable
        assert p.returncode == 1 and f"UNREADABLE {d / name} is a FIFO" in p.stdout, p.stdout + p.stderr
    elif name == "0/record.json":  # that cell is reported, never read
        assert p.returncode == 1 and f"UNREADABLE {d / name} is a FIFO" in p.stdout, p.stdout + p.stderr
        assert "MISSING cell 0" in p.stdout
    else:
        line = _one_line(p)
        assert (
            p.returncode == 2 and f"{d / name} is a FIFO" in line and line.endswith("nothing was written")
        ), line
        assert _snapshot(d) == before


def test_compare_and_profile_refuse_bad_options_in_one_line_and_write_nothing(finished, tmp_path):
    mine = tmp_path / "mine.txt"
    mine.write_bytes(b"the user's file\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    p = _run(
        "analysis",
        "compare",
        str(finished),
        str(finished),
        "--csv",
        str(tmp_path / "missing" / "x.csv"),
        cwd=cwd,
    )
    assert p.returncode == 2 and f"--csv {tmp_path / 'missing' / 'x.csv'}: its folder" in _one_line(p)
    assert not (tmp_path / "missing").exists() and p.stdout == ""
    p = _run("analysis", "compare", str(finished), str(finished), "--ignore", "storage,nosuch.key", cwd=cwd)
    line = _one_line(p)
    assert p.returncode == 2 and "--ignore nosuch.key: no cell of either campaign has this setting" in line
    assert "storage, threads" in line and p.stdout == ""  # the valid keys, named
    p = _run("analysis", "profile", str(finished), "--name", "here", "--out", str(mine), cwd=cwd)
    assert p.returncode == 2 and f"--out {mine}: {mine} exists and is not a folder" in _one_line(p)
    assert mine.read_bytes() == b"the user's file\n" and list(cwd.iterdir()) == []
    p = _run(
        "analysis",
        "compare",
        str(finished),
        str(finished),
        "--ignore",
        "storage.name",
        "--csv",
        "pair.csv",
        cwd=cwd,
    )
    assert p.returncode == 0 and (cwd / "pair.csv").read_text().startswith("workload.name,paired,"), p.stderr


@pytest.mark.parametrize("name", ["plan.json", "0/record.json", "paper.txt", "submitted.json"])
def test_status_never_waits_on_a_fifo_under_a_tools_name(finished, tmp_path, name):
    """Today's campaign.status opened each of these for reading and waited for a writer for ever."""
    d = _with_fifo(finished, tmp_path, name)
    before = _snapshot(d)
    p = _run("campaign.status", str(d), cwd=tmp_path, timeout=60)
    if name == "0/record.json":  # that cell is reported unreadable, the others as usual
        assert p.returncode == 1 and p.stdout.startswith("1 unreadable"), p.stdout + p.stderr
        assert "#0   unreadable" in p.stdout and f"{d / name} is a FIFO" in p.stdout
    else:
        line = _one_line(p)
        assert p.returncode == 2 and line.startswith(f"campaign.status: {d / name} is a FIFO"), line
    assert _snapshot(d) == before
