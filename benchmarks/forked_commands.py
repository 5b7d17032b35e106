"""Benchmark: the CPU of one ``python -m campaign`` that the test suite runs, forked from its warm copy.

    python -m benchmarks.forked_commands [--repeats 10]

The suite runs about 380 campaign commands, each forked from one warm interpreter that has the heavy
libraries and the commands' modules imported (tests/support/forkserver.py); most of them only plan or
refuse. This forks such an interpreter's copy ``--repeats`` times for each of four commands, as the tests
do, and prints the CPU-s each took on average (``getrusage`` of the children: user and system), beside how
fast the machine is (``benchmarks/machine.py``):

- refused: ``threads=0`` (one line on stderr, exit status 2);
- dry run: ``-m threads=1,2,4,8 ... platform.dry_run=true`` (four cells planned, nothing run);
- two with the campaign's own warm server: a command started warm that takes a copy of itself as the server
  of its warm children (``jobs.execution.warm.zygote``), and one that starts a fresh server and has it
  import what a cell's tasks need (``warm.start``'s preload), each followed by one child.

Each figure is the command's own CPU with that of its warm server (a fresh one, or the copy) and of the
child it started, read from ``/proc`` as the command ends. Nothing is written outside a temporary folder,
removed at the end.
"""

from __future__ import annotations

import argparse
import os
import resource
import runpy
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# in a forked command: where it writes the CPU-s of processes its parent cannot wait for
_REPORT: list[int] = []


def forked(command: Callable[[], None], repeats: int) -> float:
    """Average CPU-s of ``command`` run in a process forked from this one, ``repeats`` times, with what it
    reports of its warm server (which it does not wait for: the server ends with it)."""
    before, reported = _children_cpu_s(), 0.0
    for _ in range(repeats):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(read)
                _REPORT[:] = [write]
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
                command()
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as f:
            reported += sum(float(x) for x in f.read().split())
        os.waitpid(pid, 0)
    return (_children_cpu_s() - before + reported) / repeats


def campaign(*args: str) -> Callable[[], None]:
    """``python -m campaign <args>``, as the tests' fork server runs it in its copy."""

    def run() -> None:
        from jobs.lifeline import exit_as_python

        sys.argv = ["-m", *args]
        exit_as_python(lambda: runpy._run_module_as_main("campaign"))

    return run


def _cpu_s_of(pid: int) -> float:
    """CPU-s of process ``pid`` and of the children it has reaped (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime


def with_warm_child(zygote: bool) -> Callable[[], None]:
    """A command's process that starts one warm child (a task's module: ``json.tool --help``) with a
    cell's preload: from a copy of itself (``zygote``) or from a fresh server; the server's CPU-s (its
    child's with it) reported."""

    def command() -> None:
        from multiprocessing import forkserver

        from jobs.execution import warm

        if zygote:
            warm.zygote()
        child = warm.start("json.tool", ["--help"], dict(os.environ), (*warm.COMMON, warm.TENSORFLOW_DATA))
        child.wait()
        os.write(_REPORT[0], f"{_cpu_s_of(forkserver._forkserver._forkserver_pid)}\n".encode())

    def run() -> None:
        from jobs.lifeline import exit_as_python

        exit_as_python(command)  # as a command ends: its server folder removed, the server ended with it

    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.forked_commands", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--repeats", type=int, default=10, help="forks of each command")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from benchmarks import machine

    print(machine.yardstick(), flush=True)
    from support import forkserver  # the tests' warm interpreter: what it imports before it forks

    forkserver._preload()
    # made and removed here: a TemporaryDirectory's finalizer would run in every forked command at its end
    tmp = tempfile.mkdtemp(prefix="iocampaign-forked-")
    try:
        os.chdir(tmp)
        root = Path(tmp, "root")
        root.mkdir()
        dry = ("-m", "threads=1,2,4,8", "storage=local", f"storage.root={root}", "dataset.num_images=1024")
        rows = [
            ("refused (threads=0)", forked(campaign("threads=0"), args.repeats)),
            ("dry run, 4 cells", forked(campaign(*dry, "platform.dry_run=true"), args.repeats)),
            ("a warm child, from a copy of its parent", forked(with_warm_child(True), args.repeats)),
            ("a warm child, from a fresh server", forked(with_warm_child(False), args.repeats)),
        ]
    finally:
        os.chdir(ROOT)
        shutil.rmtree(tmp, ignore_errors=True)
    for name, cpu_s in rows:
        print(f"{name:42s} {cpu_s:6.3f} CPU-s each ({args.repeats} forks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
