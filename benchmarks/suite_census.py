"""``python -m benchmarks.suite_census``: where the test suite's CPU goes. Runs the suite as ``make test``
runs it (or with the pytest arguments given after ``--``). Every Python process of the project's
environment writes, as it exits, its CPU time, what it ran and the test it ran for. The machine's own CPU
time over the run is read from ``/proc/stat``. Prints the machine's CPU-s and cores busy, how fast the
machine is (``benchmarks.machine``, measured after the run), then the Python
processes grouped by what they ran (processes, CPU-s, each on average, median), then the test modules
whose child processes used the most, then the test modules whose tests used the most CPU inside pytest's
own processes (its workers: this module is given to pytest as a plugin, ``-p benchmarks.suite_census``),
then each worker with its tests, its seconds inside them and when its last test ended.

  python -m benchmarks.suite_census [--top 15] [--keep DIR] [-- <pytest arguments>]

The recorder is a ``.pth`` file put in the environment's site-packages for the run and removed after it.
It records only where ``IOCAMPAIGN_CENSUS_DIR`` is set, so one left behind by a killed run costs one
environment lookup per Python start. A process that ends without ``atexit`` (``os._exit``: the tool's
warm servers) does not record; it is in the machine's "everything else", which a table of its own breaks
down by program, from ``/proc`` read twice a second (``Sampler``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from benchmarks import machine

ROOT = Path(__file__).resolve().parent.parent
VAR = "IOCAMPAIGN_CENSUS_DIR"
SAMPLE_S = 0.5  # how often the Sampler reads /proc
NAME = "iocampaign_census"  # the recorder's module and .pth in site-packages
# the recorder, as every Python process of the environment imports it at its start
RECORDER = f'''"""benchmarks.suite_census's recorder: removed when its run ends."""
import os

if os.environ.get("{VAR}"):
    import atexit
    import json
    import sys

    HEAVY = ("tensorflow", "torch", "jax", "grain", "pandas", "matplotlib", "hydra")

    def _parent():
        try:
            with open(f"/proc/{{os.getppid()}}/cmdline", "rb") as f:
                return [a.decode(errors="replace") for a in f.read().split(b"\\0")[:3]]
        except OSError:
            return []

    def _record(folder=os.environ["{VAR}"]):
        t = os.times()
        line = json.dumps(
            {{
                "pid": os.getpid(),
                "argv": sys.argv[:2],
                "parent": _parent(),
                "imported": [m for m in HEAVY if m in sys.modules],
                "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
                "cpu_s": t.user + t.system,
            }}
        )
        try:
            with open(os.path.join(folder, f"{{os.getpid()}}.jsonl"), "a") as f:
                f.write(line + "\\n")
        except OSError:  # another user's process: the folder is not theirs to write
            pass

    atexit.register(_record)
'''


def machine_cpu_s() -> float:
    """CPU seconds the machine has spent busy since it started (``/proc/stat``: all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


def what_ran(argv: list[str]) -> str:
    """What a process ran, by its ``sys.argv``: a module run as ``python -m`` (its dotted name), a script,
    or ``-c`` (pytest's workers, fork servers, scripts given as text)."""
    if not argv or argv[0] in ("-c", ""):
        return "-c --multiprocessing-fork" if argv[1:2] == ["--multiprocessing-fork"] else "-c"
    path = Path(argv[0])
    if not path.is_absolute():
        return path.name
    for base in (site_packages(), ROOT):  # the environment may lie inside the checkout (.venv)
        if path.is_relative_to(base):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__main__":
                parts.pop()
            return ".".join(parts)
    return path.name


class Sampler(threading.Thread):
    """Every process's CPU, read from ``/proc`` every ``interval_s`` while the suite runs: what the recorder
    cannot see (other programs: SeaweedFS, Azurite's Node.js, fio, Slurm's daemons, the kernel's threads;
    Python processes that end without ``atexit``: the tool's warm servers). A process that lives less than
    ``interval_s`` may be missed; one there before the census counts only what it used during it."""

    def __init__(self, interval_s: float = SAMPLE_S) -> None:
        super().__init__(daemon=True)
        self.interval_s = interval_s
        self.seen: dict[tuple[int, int], dict] = {}  # (pid, start tick) -> its name and CPU-s, first and last
        self._ended = threading.Event()
        self._scan(before=True)

    def run(self) -> None:
        while not self._ended.wait(self.interval_s):
            self._scan()

    def stop(self) -> None:
        self._ended.set()
        self.join()
        self._scan()

    def _scan(self, before: bool = False) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
                comm, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()
                key, cpu_s = (int(entry.name), int(fields[19])), (int(fields[11]) + int(fields[12])) / tick
                known = self.seen.get(key)
                if known is not None and known["last"] == cpu_s:
                    continue
                # named again while it runs: a child forked to exec another program shows its parent's
                # command line until the exec
                cmdline = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            except (OSError, ValueError, IndexError):  # ended while read
                continue
            argv = [a.decode(errors="replace") for a in cmdline if a]
            name = program(comm, argv, kernel=int(fields[1]) == 2 or entry.name == "2")  # kthreadd's
            if known is None:
                self.seen[key] = {"name": name, "first": cpu_s if before else 0.0, "last": cpu_s}
            else:
                known.update(name=name if argv else known["name"], last=cpu_s)  # a zombie has no argv

    def others(self, recorded: set[int]) -> list[tuple[str, int, float]]:
        """(program, processes, CPU-s during the run), most first, leaving out the processes that recorded."""
        groups: dict[str, list[float]] = defaultdict(list)
        for (pid, _), p in self.seen.items():
            if pid not in recorded:
                groups[p["name"]].append(p["last"] - p["first"])
        rows = [(name, len(v), sum(v)) for name, v in groups.items()]
        return sorted(rows, key=lambda row: -row[2])


def program(comm: str, argv: list[str], kernel: bool = False) -> str:
    """A sampled process's name in the table: the kernel's threads together, a warm server (a
    multiprocessing fork server) as such, another Python by what it ran, any other program by its name."""
    if comm.isdigit() and argv:  # run through a descriptor (/proc/self/fd/N: the embedded server's weed)
        comm = Path(argv[0]).name
    if kernel:
        return "(kernel threads)"
    if any("multiprocessing.forkserver import main" in a for a in argv):
        return "warm server (multiprocessing forkserver)"
    if comm.startswith("python"):
        args = argv[1:]
        while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):  # -u, -B, -I
            args = args[1:]
        return f"python {args[1]}" if args[:1] == ["-m"] and len(args) > 1 else f"python {what_ran(args[:1])}"
    return comm


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """As a plugin of the census's pytest (and of its workers): the CPU each test used in this process."""
    folder = os.environ.get(VAR)
    before, start = os.times(), time.time()
    yield
    if folder:
        after = os.times()
        cpu_s = after.user + after.system - before.user - before.system
        # this pytest's own worker (a pytest a test starts inherits its worker's PYTEST_XDIST_WORKER)
        worker = getattr(item.config, "workerinput", {}).get("workerid", "")
        line = json.dumps(
            {
                "pid": os.getpid(),
                "argv": [],
                "test": item.nodeid,
                "cpu_s": cpu_s,
                "in_pytest": True,
                "worker": worker,
                "start": start,
                "end": time.time(),
            }
        )
        with open(Path(folder) / f"{os.getpid()}.tests.jsonl", "a") as f:
            f.write(line + "\n")


def read(folder: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.read_text().splitlines()]


def by_what(records: list[dict]) -> list[tuple[str, int, float, float, float]]:
    """(what ran, processes, CPU-s, each on average, median), most CPU first."""
    groups: dict[str, list[float]] = defaultdict(list)
    for r in records:
        groups[what_ran(r["argv"])].append(r["cpu_s"])
    rows = [(k, len(v), sum(v), sum(v) / len(v), statistics.median(v)) for k, v in groups.items()]
    return sorted(rows, key=lambda row: -row[2])


def by_module(records: list[dict]) -> list[tuple[str, float]]:
    """(test module, CPU-s of the processes its tests started), most first. Processes that ended outside a
    test are under "(no test)": pytest's workers (their own CPU, every test they ran in-process), the tests'
    fork server, and what a session's fixtures started."""
    out: dict[str, float] = defaultdict(float)
    for r in records:
        out[r["test"].split("::")[0] if r["test"] else "(no test)"] += r["cpu_s"]
    return sorted(out.items(), key=lambda kv: -kv[1])


def by_worker(inside: list[dict]) -> list[tuple[str, int, float, float]]:
    """(pytest's worker, tests, seconds inside them, when its last test ended), from the first test's start:
    a worker that ends well before the others left its share of the cores idle at the end."""
    timed = [r for r in inside if "start" in r]
    if not timed:
        return []
    t0 = min(r["start"] for r in timed)
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in timed:
        groups[r["worker"] or "main"].append(r)
    rows = [
        (w, len(rs), sum(r["end"] - r["start"] for r in rs), max(r["end"] for r in rs) - t0)
        for w, rs in groups.items()
    ]
    return sorted(rows, key=lambda row: row[3])


def report(
    records: list[dict],
    machine_s: float,
    wall_s: float,
    top: int,
    others: list[tuple] | None = None,
    speed: str | None = None,
) -> str:
    """The tables: ``records`` of processes, and of tests inside pytest's processes (``in_pytest``);
    ``others``: what the ``Sampler`` saw of everything else; ``speed``: how fast the machine is
    (``machine.yardstick``)."""
    inside = [r for r in records if r.get("in_pytest")]
    records = [r for r in records if not r.get("in_pytest")]
    python = sum(r["cpu_s"] for r in records)
    lines = [
        f"machine: {machine_s:,.0f} CPU-s over {wall_s:,.0f} s ({machine_s / wall_s:.2f} cores busy); "
        f"Python processes that recorded: {len(records)}, {python:,.0f} CPU-s; everything else "
        f"(other programs, processes ended without atexit): {machine_s - python:,.0f} CPU-s",
        *([speed] if speed else []),
        "",
        f"{'what ran':<44} {'processes':>9} {'CPU-s':>8} {'each':>6} {'median':>6}",
    ]
    for what, n, cpu, each, median in by_what(records)[:top]:
        lines.append(f"{what[:44]:<44} {n:>9} {cpu:>8.1f} {each:>6.2f} {median:>6.2f}")
    if others is not None:
        lines += ["", f"{'everything else, sampled from /proc':<44} {'processes':>9} {'CPU-s':>8}"]
        for name, n, cpu in others[:top]:
            lines.append(f"{name[:44]:<44} {n:>9} {cpu:>8.1f}")
    lines += ["", f"{'test module (its processes)':<60} {'CPU-s':>8}"]
    for module, cpu in by_module(records)[:top]:
        lines.append(f"{module[:60]:<60} {cpu:>8.1f}")
    if inside:
        total = sum(r["cpu_s"] for r in inside)
        lines += ["", f"{'test module (in pytest, ' + f'{total:,.0f} CPU-s in all)':<60} {'CPU-s':>8}"]
        for module, cpu in by_module(inside)[:top]:
            lines.append(f"{module[:60]:<60} {cpu:>8.1f}")
        workers = by_worker(inside)
        if workers:
            lines += ["", f"{'pytest worker':<14} {'tests':>6} {'in tests, s':>12} {'last ended, s':>14}"]
        for worker, n, busy, last in workers:
            lines.append(f"{worker:<14} {n:>6} {busy:>12.0f} {last:>14.0f}")
    return "\n".join(lines)


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def install(site: Path) -> list[Path]:
    """The recorder in ``site``: its module and the ``.pth`` that imports it; the files written."""
    module, pth = site / f"{NAME}.py", site / f"{NAME}.pth"
    if module.exists() or pth.exists():
        raise SystemExit(f"{module} or {pth} is already there: another census is running, or one was killed")
    module.write_text(RECORDER)
    pth.write_text(f"import {NAME}\n")
    return [pth, module]


class Stopped(Exception):
    """SIGTERM (or Ctrl-C) during the run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stopped(signum: int, frame) -> None:
    raise Stopped(signum)


def _wait(pytest: subprocess.Popen) -> int:
    """pytest's status. Stopped by SIGTERM: pytest is given SIGINT, and ends as Ctrl-C ends it (its
    fixtures torn down: the test cluster, servers, mounts); Ctrl-C at a terminal reached it already."""
    try:
        return pytest.wait()
    except Stopped:
        pytest.send_signal(signal.SIGINT)
        pytest.wait()
        raise
    except KeyboardInterrupt:
        pytest.wait()
        raise
    finally:
        if pytest.poll() is None:  # a second signal while it ended
            pytest.kill()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.suite_census", description=__doc__.split("\n")[0])
    ap.add_argument("--top", type=int, default=15, help="rows in each table")
    ap.add_argument(
        "--keep", type=Path, metavar="DIR", help="keep the records (JSON lines) in DIR, a new folder"
    )
    ap.add_argument("pytest_args", nargs="*", help="after --: what pytest is given (default: make test's)")
    args = ap.parse_args(argv)
    if args.keep is not None and (args.keep.exists() or args.keep.is_symlink()):
        ap.error(f"--keep {args.keep}: already there; give a new folder")
    written = install(site_packages())
    previous = signal.signal(signal.SIGTERM, _stopped)
    # handled here, so pytest starts with SIGINT's default even where this was started with it ignored (a
    # background job of a script, a pytest-xdist worker): pytest then ends on it, as on Ctrl-C
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with tempfile.TemporaryDirectory(prefix="iocampaign-census-") as folder:
            env = {**os.environ, VAR: folder}
            before, t0, sampler = machine_cpu_s(), time.monotonic(), Sampler()
            command = [sys.executable, "-m", "pytest", "-p", __spec__.name, *args.pytest_args]
            sampler.start()
            returncode = _wait(subprocess.Popen(command, cwd=ROOT, env=env))
            sampler.stop()
            machine_s, wall_s = machine_cpu_s() - before, time.monotonic() - t0
            records = read(Path(folder))
            others = sampler.others({r["pid"] for r in records if not r.get("in_pytest")})
            if args.keep is not None:
                shutil.copytree(folder, args.keep)
            speed = machine.yardstick()  # after the run, so that it takes none of the run's CPU
    except KeyboardInterrupt:
        stopped = Stopped(signal.SIGINT)
    except Stopped as e:
        stopped = e
    else:
        stopped = None
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        for f in (*written, *site_packages().glob(f"__pycache__/{NAME}.*.pyc")):  # its bytecode too
            f.unlink(missing_ok=True)
    if stopped is not None:  # one line, and the status the signal would have given
        print(f"suite_census: stopped by {stopped}; its recorder removed, no table", file=sys.stderr)
        return 128 + stopped.signum
    print(report(records, machine_s, wall_s, args.top, others, speed))
    return returncode


if __name__ == "__main__":
    sys.exit(main())
