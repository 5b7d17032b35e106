"""A real second user of the machine, and commands run as that user (the ``other_user`` fixture makes it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT

OTHER_USER = "iocampaign-other"  # a real second user of the machine, made by the tests that need one


def as_user(user: tuple[str, int, int], *argv: str, **kw) -> subprocess.CompletedProcess:
    """Run ``argv`` as ``user`` (from ``other_user``), its groups cleared, as that user's shell would."""
    _, uid, gid = user
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 120)
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv], **kw)


def user_python(user: tuple[str, int, int]) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run this project's Python as ``user``: this interpreter where
    that user may run it, else the system's Python 3 of the same version with this environment's
    packages (an interpreter under /root is not theirs to run)."""
    import sysconfig

    env = {"PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "PATH": os.environ.get("PATH", "")}
    if as_user(user, "test", "-x", os.path.realpath(sys.executable)).returncode == 0:
        return [sys.executable], env
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    env["PYTHONPATH"] += os.pathsep + sysconfig.get_paths()["purelib"]
    return [system], env


def as_user_python(
    user: tuple[str, int, int], *args: str, home: Path | None = None, **kw
) -> subprocess.CompletedProcess:
    """This project's Python run as ``user`` with ``args`` (``-c <code>``, ``-m <module> ...``), in the
    environment ``user_python`` gives it, HOME set to ``home`` when given; ``kw`` as ``as_user`` takes it."""
    python, env = user_python(user)
    if home is not None:
        env = {"HOME": str(home), **env}
    return as_user(user, "env", *(f"{k}={v}" for k, v in env.items()), *python, *args, **kw)
