"""benchmarks.suite_census: each Python process that exits records its own CPU, what it ran and its test,
only where a census asks; the tables group them; the recorder goes when the census ends."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from benchmarks import suite_census
from support.paths import ROOT

# a Python that reads a site folder's .pth files as the environment's own site-packages are read
_WITH_SITE = "import site, sys; site.addsitedir(sys.argv[1]); "


def _python(site, code: str, env: dict, *args: str) -> None:
    subprocess.run([sys.executable, "-c", _WITH_SITE + code, str(site), *args], env=env, check=True)


def test_each_process_records_its_own_cpu_and_test_only_where_a_census_asks(tmp_path):
    site, folder = tmp_path / "site", tmp_path / "census"
    site.mkdir()
    folder.mkdir()
    written = suite_census.install(site)
    assert sorted(p.name for p in written) == ["iocampaign_census.pth", "iocampaign_census.py"]
    env = {k: v for k, v in os.environ.items() if k != suite_census.VAR}
    _python(site, "sum(range(3_000_000))", env)  # no census asked: nothing written
    assert list(folder.iterdir()) == []
    asked = {**env, suite_census.VAR: str(folder), "PYTEST_CURRENT_TEST": "tests/x/test_y.py::test_z (call)"}
    # a parent that forks a child: each records its own CPU (each does some work, as a process that only
    # starts Python may show none in clock ticks), the busier child more than its parent
    fork = "import os\nif os.fork() == 0:\n    sum(range(20_000_000))\n"
    fork += "else:\n    sum(range(2_000_000))\n    os.wait()"
    _python(site, "exec(sys.argv[2])", asked, fork)
    records = suite_census.read(folder)
    assert len(records) == 2 and len({r["pid"] for r in records}) == 2
    parent, child = sorted(records, key=lambda r: r["cpu_s"])
    assert child["cpu_s"] > parent["cpu_s"] > 0
    assert {r["test"] for r in records} == {"tests/x/test_y.py::test_z (call)"}
    # the child's parent is the first process; what each had imported of the heavy libraries
    assert child["parent"][:2] == [sys.executable, "-c"] and parent["parent"] != child["parent"]
    assert parent["imported"] == child["imported"] == []
    with pytest.raises(SystemExit, match="already there"):  # a census running, or one killed
        suite_census.install(site)


def test_a_sampled_process_is_named_by_its_program_a_warm_server_as_such_and_the_kernels_together():
    assert suite_census.program("weed", ["/venv/bin/weed", "server"]) == "weed"
    # a program run through a descriptor, as the embedded server's is: the kernel names it by the descriptor
    assert suite_census.program("10", ["weed", "-logtostderr", "server"]) == "weed"
    assert suite_census.program("kworker/0:1", [], kernel=True) == "(kernel threads)"
    server = ["/venv/bin/python", "-c", "from multiprocessing.forkserver import main; main(3, 4)"]
    assert suite_census.program("python", server) == "warm server (multiprocessing forkserver)"
    assert (
        suite_census.program("python3.11", ["/venv/bin/python", "-m", "campaign", "-m"]) == "python campaign"
    )
    assert suite_census.program("python", ["/venv/bin/python", "-u", "-c", "pass"]) == "python -c"  # xdist's


def test_what_ran_is_the_module_a_process_ran_as_python_m():
    site, tasks = suite_census.site_packages(), ROOT / "jobs" / "execution" / "tasks.py"
    assert suite_census.what_ran([str(ROOT / "campaign" / "__main__.py"), "-m"]) == "campaign"
    assert suite_census.what_ran([str(tasks), "x"]) == "jobs.execution.tasks"
    assert suite_census.what_ran([str(site / "submitit" / "core" / "_submit.py")]) == "submitit.core._submit"
    assert suite_census.what_ran([str(site / "pytest" / "__main__.py")]) == "pytest"
    assert suite_census.what_ran(["-c"]) == suite_census.what_ran([]) == "-c"
    # a worker that multiprocessing spawned (a DataLoader's or Grain's, with spawn)
    assert suite_census.what_ran(["-c", "--multiprocessing-fork"]) == "-c --multiprocessing-fork"
    assert suite_census.what_ran(["/usr/lib/some/tool.py"]) == "tool.py"


def test_the_workers_table_says_when_each_worker_ended_from_the_first_tests_start():
    def ran(worker, start, end):
        return {
            "test": "tests/a.py::t",
            "cpu_s": 1.0,
            "in_pytest": True,
            "worker": worker,
            "start": start,
            "end": end,
        }

    inside = [
        ran("gw0", 100.0, 110.0),
        ran("gw0", 110.0, 400.0),
        ran("gw1", 101.0, 200.0),
        ran("gw1", 200, 230),
    ]
    # gw1 ended 170 s before gw0: its share of the cores was idle from 130 s on
    assert suite_census.by_worker(inside) == [("gw1", 2, 129.0, 130.0), ("gw0", 2, 300.0, 300.0)]
    assert suite_census.by_worker([{"test": "t", "cpu_s": 1.0, "in_pytest": True}]) == []  # no times kept


def test_the_tables_group_processes_by_what_they_ran_and_by_the_test_module_that_started_them():
    campaign = str(ROOT / "campaign" / "__main__.py")
    records = [
        {"argv": [campaign], "test": "tests/a.py::t (call)", "cpu_s": 0.5},
        {"argv": [campaign], "test": "tests/a.py::u (call)", "cpu_s": 2.5},
        {"argv": [campaign], "test": "tests/b.py::t (setup)", "cpu_s": 1.0},
        {"argv": ["-c"], "test": "", "cpu_s": 40.0},  # a worker: it ends after its last test
    ]
    # what the tests used inside that worker (the census's pytest plugin): a table of its own, not a process
    inside = [{"argv": [], "test": "tests/b.py::t", "cpu_s": 30.0, "in_pytest": True}]
    assert suite_census.by_what(records) == [("-c", 1, 40.0, 40.0, 40.0), ("campaign", 3, 4.0, 4.0 / 3, 1.0)]
    assert suite_census.by_module(records) == [("(no test)", 40.0), ("tests/a.py", 3.0), ("tests/b.py", 1.0)]
    text = suite_census.report(records + inside, machine_s=60.0, wall_s=40.0, top=1)
    first, *rest = text.splitlines()
    machine = "machine: 60 CPU-s over 40 s (1.50 cores busy);"
    assert first.startswith(f"{machine} Python processes that recorded: 4,")
    assert "everything else (other programs, processes ended without atexit): 16 CPU-s" in first
    rows = [line.split()[:3] for line in rest if line]
    assert rows == [
        ["what", "ran", "processes"],
        ["-c", "1", "40.0"],
        ["test", "module", "(its"],
        ["(no", "test)", "40.0"],
        ["test", "module", "(in"],
        ["tests/b.py", "30.0"],
    ]
    assert "(in pytest, 30 CPU-s in all)" in text


def test_a_census_runs_pytest_prints_its_tables_passes_on_its_status_and_removes_its_recorder(
    tmp_path, monkeypatch, capsys
):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(suite_census, "site_packages", lambda: site)
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_one.py").write_text(
        textwrap.dedent(f"""
            import subprocess, sys

            def test_starts_a_python():
                code = "import site, sys; site.addsitedir({str(site)!r}); sum(range(2_000_000))"
                subprocess.run([sys.executable, "-c", code], check=True)

            def test_fails():
                assert False

            # a program that is not Python, and a Python that ends without atexit; each lives a while after
            # its work, so that a sample sees all of it
            def test_starts_others():
                sh = "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; sleep 0.5"
                subprocess.run(["sh", "-c", sh], check=True)
                code = "import os, time; sum(range(40_000_000)); time.sleep(0.5); os._exit(0)"
                subprocess.run([sys.executable, "-c", code], check=True)
        """)
    )
    args = ["--", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", str(tests), str(tests)]
    kept = tmp_path / "kept"
    monkeypatch.setattr(suite_census, "SAMPLE_S", 0.05)
    assert suite_census.main(["--top", "40", "--keep", str(kept), *args]) == 1  # pytest's: one test failed
    out = capsys.readouterr().out
    assert out.startswith("machine: ")
    # how fast the machine is, measured after the run: a fresh Python's import of TensorFlow, in CPU-s
    speed = out.splitlines()[1]
    said, cpu_s, unit = speed.rsplit(" ", 2)
    assert said == "this machine: a fresh Python imports TensorFlow in" and unit == "CPU-s", speed
    assert float(cpu_s) > 0, speed
    # what the recorder cannot see, sampled: sh, and the Python that ended without atexit
    others = out.split("everything else, sampled from /proc")[1].split("test module (its processes)")[0]
    rows = {line[:44].strip(): line.split()[-2:] for line in others.splitlines()[1:] if line}
    assert float(rows["sh"][1]) > 0 and float(rows["python -c"][1]) > 0, others
    # the test that started it, as the run named it (relative to its root); then both tests inside pytest
    # (a census of the suite itself records the inner pytest's own process too, under "(no test)")
    processes, inside = out.split("test module (its processes)")[1].split("test module (in pytest")
    assert "test_one.py" in [line.split()[0] for line in processes.splitlines()[1:] if line], out
    inside, workers = inside.split("pytest worker")
    assert [line.split()[0] for line in inside.splitlines()[1:] if line] == ["test_one.py"], out
    # one worker here (no xdist): its two tests, and its last one ended after they began
    (row,) = [line.split() for line in workers.splitlines()[1:] if line]
    assert row[:2] == ["main", "3"] and float(row[3]) >= 0, out
    assert [p for p in site.rglob("*") if p.is_file()] == []  # the recorder, its .pth and its bytecode
    # --keep: the records, as they were written; a folder already there is refused before anything runs
    started = [r for r in suite_census.read(kept) if "test_starts_a_python" in r["test"] and r["argv"]]
    assert len(started) == 1 and started[0]["cpu_s"] > 0 and started[0]["imported"] == []
    with pytest.raises(SystemExit):
        suite_census.main(["--keep", str(kept), *args])
    assert "--keep" in capsys.readouterr().err and [p for p in site.rglob("*") if p.is_file()] == []


def test_sigterm_ends_pytest_as_ctrl_c_does_and_the_census_in_one_line_with_its_recorder_removed(tmp_path):
    site, tests = tmp_path / "site", tmp_path / "t"
    site.mkdir()
    tests.mkdir()
    started, torn_down = tmp_path / "started", tmp_path / "torn-down"
    (tests / "test_long.py").write_text(
        textwrap.dedent(f"""
            import pathlib, time, pytest

            @pytest.fixture
            def cluster():
                yield
                pathlib.Path({str(torn_down)!r}).touch()  # what a real fixture stops: daemons, servers

            def test_waits(cluster):
                pathlib.Path({str(started)!r}).touch()
                time.sleep(120)
        """)
    )
    code = (
        "import pathlib, sys\n"
        "from benchmarks import suite_census\n"
        f"suite_census.site_packages = lambda: pathlib.Path({str(site)!r})\n"
        "sys.exit(suite_census.main(sys.argv[1:]))\n"
    )
    args = ["--", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", str(tests), str(tests)]
    census = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # started as a script's background job is (`... &`), SIGINT ignored: pytest must not inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        assert _appears(started, census, 60), census.communicate()
        assert sorted(p.name for p in site.iterdir()) == ["iocampaign_census.pth", "iocampaign_census.py"]
        census.terminate()
        out, err = census.communicate(timeout=60)
    finally:
        census.kill()
    assert census.returncode == 128 + 15, err
    assert err.strip().splitlines()[-1] == "suite_census: stopped by SIGTERM; its recorder removed, no table"
    assert "Traceback" not in err and "machine:" not in out
    assert torn_down.exists()  # pytest ended as Ctrl-C ends it, its fixtures' teardown run
    assert [p for p in site.rglob("*") if p.is_file()] == []


def _appears(path, process, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while not path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
