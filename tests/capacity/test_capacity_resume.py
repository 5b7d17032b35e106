"""A killed capacity search resumes in its folder (issue 43, item 7): its marker is written before its
first cell, so the rerun knows the folder again; a folder marked by anything else is still refused."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from support.commands import run_module, start_module
from support.configs import TOY_SEARCHPATH
from support.processes import kill_alone, session_processes


def _args(out) -> list[str]:
    """A search of at most 2 accelerators on tmpfs, into ``out``."""
    return [
        "accelerator=ci_small",
        "storage=tmpfs",
        TOY_SEARCHPATH,
        "dataset.num_images=64",
        "repeats=1",
        "--most",
        "2",
        "--out",
        str(out),
    ]


def _search_in_its_first_round(out, cwd, log, **streams):
    """A search into ``out``, started as a session leader, once its first round's first cell is planned
    (its campaign runs); ``log``: the file its output goes to, read when it never got there."""
    search = start_module("campaign.capacity", *_args(out), cwd=cwd, start_new_session=True, **streams)
    started = out / "tmpfs" / "storage_rate" / "plan.json"
    deadline = time.monotonic() + 180
    while not started.exists() and search.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert search.poll() is None and started.exists(), log.read_text()[-3000:]
    return search


@pytest.mark.cells
def test_a_killed_capacity_search_resumes_in_its_folder(tmp_path):
    out = tmp_path / "cap"
    log = tmp_path / "first.log"
    with open(log, "w") as f:
        first = _search_in_its_first_round(out, tmp_path, log, stdout=f, stderr=subprocess.STDOUT)
    assert kill_alone(first) == []
    assert not (out / "capacity.csv").exists()  # killed mid-way: no answer yet
    again = run_module("campaign.capacity", *_args(out), cwd=tmp_path, timeout=600)
    assert "not a campaign folder" not in again.stderr, again.stderr[-3000:]
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert (out / "capacity.csv").is_file() and "[capacity] tmpfs: " in again.stdout
    assert "accelerator=ci_small" in (out / "capacity.txt").read_text()


@pytest.mark.cells
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_ends_the_search_in_one_line_that_says_how_to_resume_it(tmp_path, sig):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) or SIGTERM to the search alone:
    before, a 30-line traceback and status -2, or no line at all and status -15, its round told SIGTERM
    either way. Now its round's campaign unwinds on the same signal, then one line ends the search with
    128 + the signal, naming the folder and the --out that resumes it; nothing of it is left running."""
    out = tmp_path / "cap"
    log = tmp_path / "search.log"
    with open(log, "w") as f:
        search = _search_in_its_first_round(out, tmp_path, log, stdout=subprocess.DEVNULL, stderr=f)
    os.killpg(search.pid, sig) if sig == signal.SIGINT else search.send_signal(sig)
    search.wait(180)
    err = log.read_text()
    name = signal.Signals(sig).name
    lines = [line for line in err.splitlines() if line.startswith("campaign")]
    assert search.returncode == 128 + sig and "Traceback" not in err, err[-3000:]
    assert lines[-1] == (
        f"campaign.capacity: interrupted by {name}; the rounds it finished are kept in {out}; the same "
        f"command with --out {out} resumes the search there (finished cells are skipped)"
    ), err[-3000:]
    assert all(f"interrupted by {name}" in line for line in lines), lines  # its round was told the same
    deadline = time.monotonic() + 30  # its warm server and resource tracker end as their pipes close
    while session_processes(search.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert session_processes(search.pid) == []
    assert not (out / "capacity.csv").exists()


def test_a_folder_marked_by_something_else_is_still_refused(tmp_path):
    for name in ("paper.txt", "capacity.txt", "capacity.csv"):  # another study's marker, or a user's file
        out = tmp_path / name.replace(".", "_")
        out.mkdir()
        (out / name).write_bytes(b"a user's file\n")
        p = run_module("campaign.capacity", *_args(out), cwd=tmp_path, timeout=120)
        lines = [x for x in p.stderr.splitlines() if x.strip()]
        assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("campaign.capacity: --out:"), (
            p.stderr
        )
        assert (out / name).read_bytes() == b"a user's file\n" and [x.name for x in out.iterdir()] == [name]
