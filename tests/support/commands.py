"""The project's commands, run as a user runs them: ``python -m <module>`` in a folder of the test's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from support import forkserver
from support.paths import ROOT


def python_env(**extra: str) -> dict[str, str]:
    """This process's environment for a command of the checkout: its packages on PYTHONPATH, TensorFlow's
    start-up lines quiet, Hydra's short errors (as a user has them); ``extra`` added over it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", **extra}
    env.pop("HYDRA_FULL_ERROR", None)
    env.pop(forkserver.SHARED, None)  # the suite's own, not the commands'
    return env


def without_tensorflow(folder: Path) -> dict[str, str]:
    """``python_env`` of a node that has PyTorch alone (a GPU node's image): ``import tensorflow`` and
    ``import keras`` fail in every process the command starts (its cells' tasks and workers too). A command
    run with it starts in a new Python (``run_module``: another PYTHONPATH)."""
    blocker = folder / "no_tensorflow"
    for name in ("tensorflow", "keras"):
        (blocker / name).mkdir(parents=True, exist_ok=True)
        refusal = f"raise ImportError('{name} is not installed on this node')\n"
        (blocker / name / "__init__.py").write_text(refusal)
    return python_env(PYTHONPATH=f"{blocker}{os.pathsep}{ROOT}")


def run_module(
    module: str,
    *args: str,
    cwd: Path,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    fresh: bool = False,
) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` in ``cwd``, its output captured; a hang fails the test at ``timeout``.
    It runs in a process forked from a warm interpreter (support/forkserver.py: the heavy libraries
    already imported) where ``warm_runs`` says it may; ``fresh``, or IOCAMPAIGN_TESTS_FRESH=1 for every
    command, starts a new Python instead (a test of what a cold start prints or writes: TensorFlow's
    start-up lines)."""
    env = env or python_env()
    fresh = fresh or not warm_runs(env)
    if fresh or os.environ.get("IOCAMPAIGN_TESTS_FRESH") == "1":
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    return _warm().run(module, list(args), cwd, env, timeout)


def warm_runs(env: dict[str, str]) -> bool:
    """Whether a command of ``env`` runs as it would in a new Python when forked from the warm one: its
    PYTHONPATH holds the checkout, and every other folder on it (a workload or a back-end from outside the
    package) holds none of the packages already imported here, which the server imported too and which
    that folder would otherwise shadow (``without_tensorflow``'s ``tensorflow`` needs a new Python)."""
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in paths:
        return False
    imported = {name.partition(".")[0] for name in sys.modules}
    for folder in paths:
        if folder == str(ROOT):
            continue
        try:
            names = {entry.partition(".")[0] for entry in os.listdir(folder)}
        except OSError:
            return False
        if names & imported:
            return False
    return True


_SERVER: list[forkserver.Client] = []


def _warm() -> forkserver.Client:
    """This test process's fork server, started on first use (again if it ended)."""
    if not _SERVER or not _SERVER[0].alive():
        _SERVER[:] = [forkserver.Client(python_env())]
    return _SERVER[0]


# a line of TensorFlow's, CUDA's or absl's C++ logging (``I0000 00:00:… port.cc:153] …``) or about them, or
# a library's Python warning (PyTorch's of more workers than cores)
NOISE = re.compile(
    r"^[IWEF]\d{4} |\.cc:\d+\]|cuInit|oneDNN|absl|TF_ENABLE_ONEDNN_OPTS|TF-TRT|cuda|Warning: ", re.I
)


def as_typed(module: str, *args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m <module>`` as a user types it, started cold: no TF_CPP_MIN_LOG_LEVEL of the
    Makefile's, so every line of TensorFlow's that reaches the terminal is in its output."""
    env = python_env()
    del env["TF_CPP_MIN_LOG_LEVEL"]
    return run_module(module, *args, cwd=cwd, env=env, timeout=timeout, fresh=True)  # a cold start's lines


def noise(p: subprocess.CompletedProcess) -> list[str]:
    """The lines of ``p``'s output that are TensorFlow's, CUDA's or absl's (``NOISE``)."""
    return [x for x in (p.stdout + p.stderr).splitlines() if NOISE.search(x)]


def start_module(
    module: str, *args: str, cwd: Path, env: dict[str, str] | None = None, fresh: bool = False, **popen
) -> subprocess.Popen:
    """``python -m <module> <args>`` started in ``cwd`` and left running; ``popen``: where its output goes,
    whether it leads a session of its own (as ``subprocess.Popen`` takes them). Forked from the warm
    interpreter as ``run_module``'s commands are (``forkserver.Started`` answers as a ``Popen`` does), or a
    new Python where ``run_module`` would start one."""
    env = env or python_env()
    if fresh or not warm_runs(env) or os.environ.get("IOCAMPAIGN_TESTS_FRESH") == "1":
        return subprocess.Popen([sys.executable, "-m", module, *args], cwd=cwd, env=env, **popen)
    return _warm().start(module, list(args), cwd, env, **popen)


def campaign(
    *args: str, cwd: Path, timeout: float = 600, fresh: bool = False, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``python -m campaign <args>`` in ``cwd`` (``fresh``: in a new Python, as run_module says)."""
    return run_module("campaign", *args, cwd=cwd, timeout=timeout, fresh=fresh, env=env)


def analysis(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m analysis <args>`` in ``cwd``."""
    return run_module("analysis", *args, cwd=cwd, timeout=timeout)


def campaign_status(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m campaign.status <args>`` in ``cwd`` (this process's folder if none)."""
    return run_module("campaign.status", *args, cwd=cwd, timeout=timeout)


def one_line(p: subprocess.CompletedProcess) -> str:
    """The one line a refused command printed on stderr (blank lines aside); fails on any other count."""
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr[-3000:]
    return lines[0]
