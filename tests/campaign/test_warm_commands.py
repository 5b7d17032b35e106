"""The tests start the project's commands from a warm interpreter (support/forkserver.py): a command run
that way ends, prints and exits as the same command started cold does."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from support.commands import run_module, start_module

pytestmark = pytest.mark.waits  # commands left to hang until their time limit


def _both(module: str, *args: str, cwd) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    return run_module(module, *args, cwd=cwd), run_module(module, *args, cwd=cwd, fresh=True)


def test_a_refused_command_prints_and_exits_as_a_cold_one(tmp_path):
    warm, cold = _both("campaign", "-m", "threads=oops", cwd=tmp_path)
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert warm.returncode == 2 and "threads=oops" in warm.stderr
    assert list(tmp_path.iterdir()) == []


def test_exit_codes_tracebacks_atexit_and_threads_as_python_ends(tmp_path):
    """A module of the command's folder (``python -m`` puts it first on sys.path): its exit message, an
    uncaught exception, atexit handlers and a thread still running at the end, warm as cold."""
    (tmp_path / "ends.py").write_text(
        "import atexit, sys, threading, time\n"
        "atexit.register(print, 'atexit ran')\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('thread joined'))).start()\n"
        "print('args', sys.argv[1:], flush=True)\n"
        "if sys.argv[1] == 'message':\n"
        "    sys.exit('a message')\n"
        "if sys.argv[1] == 'raise':\n"
        "    raise ValueError('uncaught')\n"
        "sys.exit(int(sys.argv[1]))\n"
    )
    for arg, code in (("0", 0), ("3", 3), ("message", 1), ("raise", 1)):
        warm, cold = _both("ends", arg, cwd=tmp_path)
        assert warm.returncode == cold.returncode == code
        assert warm.stdout == cold.stdout == f"args ['{arg}']\nthread joined\natexit ran\n"
        assert warm.stderr.splitlines()[-1:] == cold.stderr.splitlines()[-1:]


def test_a_hung_command_is_killed_at_its_timeout(tmp_path):
    (tmp_path / "hangs.py").write_text("import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(600)\n")
    with pytest.raises(subprocess.TimeoutExpired) as e:
        run_module("hangs", cwd=tmp_path, timeout=2)
    pid = int(e.value.output.decode().strip())
    for _ in range(50):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the hung command (pid {pid}) still runs after its timeout")


def test_a_started_command_that_does_not_end_times_out_its_communicate(tmp_path):
    """``communicate(timeout=…)`` on a command left running (``start_module``) raises at its timeout, as
    ``Popen.communicate`` does, even while the command keeps its output open: a test waiting on a campaign
    that never ends fails there instead of holding the suite (a CI run waited 70 min on one)."""
    (tmp_path / "hangs.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    proc = start_module("hangs", cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        t0 = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            proc.communicate(timeout=2)
        assert time.monotonic() - t0 < 10 and proc.poll() is None
    finally:
        proc.kill()
    out, _ = proc.communicate(timeout=30)  # a later call goes on reading to the end
    assert out == "started\n" and proc.returncode == -signal.SIGKILL


def test_a_command_whose_child_keeps_its_output_open_times_out(tmp_path):
    """A command that ends while a process it started still holds its standard output: its output never
    ends, so ``run_module`` raises at its timeout (as ``subprocess.run`` does) instead of waiting for ever."""
    (tmp_path / "leaves.py").write_text(
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "print(child.pid, flush=True)\n"
    )
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as e:
        run_module("leaves", cwd=tmp_path, timeout=3)
    assert time.monotonic() - t0 < 15
    os.kill(int(e.value.output.decode().split()[0]), signal.SIGKILL)


def test_the_suites_test_processes_share_one_server_which_outlives_each_of_them(tmp_path, request):
    """The server of the suite's workers (support/forkserver.py's ``Shared``: the one running, under
    pytest-xdist, or one started here): every test process's commands are forked from it, a test process
    that ends leaves it serving the others, and it ends, its socket's folder gone, when its starter stops
    it."""
    from support import forkserver
    from support.commands import python_env

    (tmp_path / "parents.py").write_text(
        "import os\nppid = os.getppid()\nprint(open(f'/proc/{ppid}/stat').read().split(')')[-1].split()[1])\n"
    )
    server, path = None, os.environ.get(forkserver.SHARED)
    if not path:
        server = forkserver.Shared(python_env())
        request.addfinalizer(server.stop)
        path = server.path
    mp = pytest.MonkeyPatch()
    request.addfinalizer(mp.undo)
    mp.setenv(forkserver.SHARED, path)
    a, b = forkserver.Client(python_env()), forkserver.Client(python_env())
    said = [c.run("parents", [], tmp_path, python_env(), 120) for c in (a, b, a)]
    assert [p.returncode for p in said] == [0, 0, 0], [p.stderr for p in said]
    servers = {int(p.stdout) for p in said}  # each command's parent is a shepherd, whose parent is the server
    assert len(servers) == 1 and "forkserver.py" in Path(f"/proc/{servers.pop()}/cmdline").read_text()
    a.control.close()  # a test process ends
    assert b.run("parents", [], tmp_path, python_env(), 120).stdout == said[0].stdout
    b.control.close()
    if server is not None:
        server.stop()
        assert server.process.returncode == 0 and not os.path.exists(server.folder)
