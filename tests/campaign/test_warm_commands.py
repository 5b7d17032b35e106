"""The tests start the project's commands from a warm interpreter (support/forkserver.py): a command run
that way ends, prints and exits as the same command started cold does."""

from __future__ import annotations

import subprocess
import time

import pytest

from support.commands import run_module

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
