"""Shared fixtures: hermetic environment, a storage root on a real disk, a tiny real dataset."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"


# The suite runs on two workers (pytest-xdist, --dist loadgroup). Tests that share something run on one worker, in
# turn: the paper study (a session fixture, run once), the Slurm cluster, and the tests that build emulated or
# modelled tiers (marked ``tiers``: fixed mount points, loop devices and throttle groups by tier name, that
# tests also build directly, outside the campaign's device locks). Every other module stays whole, so its
# module fixtures run once.
@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        name = Path(str(item.fspath)).name
        if "paper" in getattr(item, "fixturenames", ()):
            group = "paper"
        elif name == "test_slurm.py" or "slurm_cluster" in getattr(item, "fixturenames", ()):
            group = "slurm"
        elif item.get_closest_marker("tiers"):
            group = "tiers"
        else:
            group = str(Path(str(item.fspath)).relative_to(ROOT))
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch):
    for k in list(os.environ):
        if k.startswith(("SLURM_", "SUBMITIT_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture
def disk_root(tmp_path_factory) -> Path:
    """A directory on a block-device file system (the page-cache tests need one)."""
    base = tmp_path_factory.mktemp("storage")
    fs = subprocess.run(["stat", "-f", "-c", "%T", str(base)], capture_output=True, text=True).stdout.strip()
    if fs in ("tmpfs", "ramfs"):
        base = Path(os.environ.get("IOCAMPAIGN_TEST_DISK", "/var/tmp")) / f"iocampaign-test-{os.getpid()}"
        base.mkdir(parents=True, exist_ok=True)
    return base


@pytest.fixture
def cwd(tmp_path):
    """An empty working directory for a command, so that anything it leaves behind shows."""
    d = tmp_path / "cwd"
    d.mkdir()
    return d


@contextlib.contextmanager
def tmpfs(folder: Path, size: str):
    """A real tmpfs of ``size`` mounted at ``folder`` (root), unmounted afterwards."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


SLURM_SCRIPTS = Path(__file__).resolve().parent / "slurm"


SLURM_NODES = 2  # the test cluster: two nodes, each a slurmd in its own network and UTS namespace


def _slurm_nodes() -> int:
    """Nodes of the Slurm cluster that is up and serving (0: none)."""
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=20
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return len(
        {
            line.split()[0]
            for line in out.splitlines()
            if any(s in line for s in ("idle", "mixed", "allocated", "completing"))
        }
    )


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real Slurm cluster with accounting and two nodes, n1 and n2 (tests/slurm/up.sh --nodes 2: each
    node a slurmd in its own network and UTS namespace, on one file system): the one running, or one
    started here (root) and stopped again at the end. Skips without root or Slurm packages, except
    under CI=true, where it must run; a running cluster of another size fails (stop it first)."""
    started = False
    nodes = _slurm_nodes()
    if not nodes:
        why = None
        if os.geteuid() != 0:
            why = "not root: cannot start Slurm daemons"
        elif not all(
            shutil.which(b) or os.path.exists(f"/usr/sbin/{b}")
            for b in ("slurmctld", "slurmd", "slurmdbd", "mariadbd", "munged", "ip", "nsenter")
        ):
            why = (
                "Slurm packages not installed (apt-get install munge slurmctld slurmd slurm-client slurmdbd "
                "mariadb-server iproute2)"
            )
        if why:
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI=true but no Slurm cluster: {why}")
            pytest.skip(why)
        p = subprocess.run(
            [str(SLURM_SCRIPTS / "up.sh"), "--nodes", str(SLURM_NODES)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if p.returncode != 0:
            pytest.fail(f"tests/slurm/up.sh failed: {p.stdout}{p.stderr}")
        started = True
    elif nodes != SLURM_NODES:
        pytest.fail(
            f"a Slurm cluster of {nodes} node(s) is up; the tests need {SLURM_NODES}: stop it "
            "(tests/slurm/down.sh) and let them start theirs"
        )
    yield
    if started:
        subprocess.run([str(SLURM_SCRIPTS / "down.sh")], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="session")
def paper(tmp_path_factory) -> Path:
    """The paper's whole study at CI scale (every grid on local disk and tmpfs), run once for the
    session: the report's tests and the AlexNet figure test read it."""
    out = tmp_path_factory.mktemp("paper") / "campaign"
    p = campaign(
        "+experiment=paper",
        "--scale",
        "ci",
        "--tiers",
        "local,tmpfs",
        "--out",
        str(out),
        cwd=out.parent,
        timeout=1500,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert f"[paper] report: {out / 'report.html'}" in p.stdout
    assert "[paper] Reproduced " in p.stdout and " comparable claims of the paper." in p.stdout
    return out


def campaign(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``python -m campaign`` as a user would, in ``cwd``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "HYDRA_FULL_ERROR": ""}
    env.pop("HYDRA_FULL_ERROR")
    return subprocess.run(
        [sys.executable, "-m", "campaign", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def analysis(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "analysis", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def make_jpegs(folder: Path, n: int, classes: int = 2, side: int = 64) -> list[Path]:
    """``n`` small real JPEGs in class sub-folders."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        d = folder / f"c{i % classes}"
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{i:04d}.jpg"
        Image.fromarray(rng.integers(0, 255, (side, side, 3), dtype=np.uint8)).save(p, quality=85)
        out.append(p)
    return out


def session_processes(sid: int) -> list[tuple[int, str]]:
    """Live processes of session ``sid`` (the campaign was started as its leader)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append((int(d.name), cmd))
    return out


def kill_alone(proc, within_s: float = 30.0) -> list[tuple[int, str]]:
    """SIGKILL to ``proc`` alone (started as a session leader, so nothing of it runs its clean-up), then
    the processes of its session still alive after ``within_s``; each of those is killed too, so that a
    failing test leaves nothing behind."""
    import signal
    import time

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + within_s
    while session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = session_processes(proc.pid)
    for pid, _ in left:
        os.kill(pid, signal.SIGKILL)
    return left


OTHER_USER = "iocampaign-other"  # a real second user of the machine, made by the tests that need one


@pytest.fixture(scope="session")
def other_user():
    """A real, unprivileged second user (``useradd``; made once, kept for later sessions): what a
    hostile or careless neighbour on a shared node is. Yields (name, uid, gid). Needs root."""
    import pwd

    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but not root: the second-user tests must run")
        pytest.skip("needs root to make a second user")
    try:
        pw = pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
            check=True,
            capture_output=True,
        )
        pw = pwd.getpwnam(OTHER_USER)
    return pw.pw_name, pw.pw_uid, pw.pw_gid


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


def compose_cell(overrides: list[str]):
    """A cell's config composed as the campaign composes it (Hydra left uninitialised between calls)."""
    from hydra import compose, initialize_config_dir

    from campaign import schema

    schema.register()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=overrides)


@pytest.fixture(scope="module")
def refusal():
    """refusal(*overrides): the line planning refuses the cell with, or None when it would run (the planner and
    the checks a campaign runs, in this process)."""
    from campaign import errors, planning, validate

    planner = planning.Planner(lambda ov: compose_cell(list(ov)))

    def refuse(*overrides: str) -> str | None:
        try:
            validate.check(planner.cell(list(overrides)), {})
        except errors.ConfigError as e:
            return str(e)
        return None

    return refuse
