"""Shared fixtures: a hermetic environment, a storage root on a real disk, the Slurm cluster, the paper
study run once, a second user, the planner's refusal. The helpers the tests share besides fixtures are
in tests/support/."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from support import collecting, slurm
from support.commands import campaign
from support.configs import compose_cell
from support.paths import CONF, ROOT, SLURM_SCRIPTS
from support.scheduling import WAITS, ApartScheduling
from support.users import OTHER_USER

# TensorFlow in the test processes themselves (imported as the modules are collected) logs as the
# commands the tests run do (support.commands.python_env): no C++ warnings on the suite's terminal, such as
# the heartbeat a tf.data service consumer left blocked on a killed worker logs each second
# (tests/execution/test_service.py) until its worker process ends
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# The suite runs on four workers (pytest-xdist, --dist loadgroup): the Slurm group and the modules marked
# ``waits`` on one of their own, first, every other group on the other three and on that one once its own
# are handed out (tests/support/scheduling.py). Tests
# that share something run on one worker, in turn: the paper study (a session fixture, run once), the
# Slurm cluster, and the tests that build emulated or modelled tiers (marked ``tiers``: fixed mount points,
# loop devices and throttle groups by tier name, that tests also build directly, outside the campaign's
# device locks). Every other module stays whole, so its module fixtures run once.
def pytest_configure(config):
    """With pytest-xdist's workers: one fork server for them all (support/forkserver.py's ``Shared``),
    started here, before them, instead of one each."""
    if getattr(config.option, "numprocesses", None) and not os.environ.get("PYTEST_XDIST_WORKER"):
        from support import forkserver
        from support.commands import python_env

        server = forkserver.Shared(python_env())
        os.environ[forkserver.SHARED] = server.path  # the workers' environment, as they start
        config.add_cleanup(server.stop)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown where xdist is not loaded (-p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    """With three workers or more, the Slurm group and the modules marked ``waits`` on one of their own, first
    (tests/support/scheduling.py)."""
    if config.getoption("dist") == "loadgroup":
        return ApartScheduling(config, log)
    return None


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
            if item.get_closest_marker("waits"):
                group = f"{WAITS}{group}"
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_finish(session):
    """What collecting imported, out of the cyclic garbage collector's way for the rest of this worker's
    tests, as a cell's process does after its imports (``tfstart.out_of_the_collectors_way``)."""
    from jobs.execution import tfstart

    session.config.stash[collecting.IMPORTED] = collecting.frameworks_imported()
    tfstart.out_of_the_collectors_way()


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


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real Slurm cluster with accounting and two nodes, n1 and n2 (tests/slurm/up.sh --nodes 2: each
    node a slurmd in its own network and UTS namespace, on one file system): the one running, or one
    started here (root) and stopped again at the end. Skips without root or Slurm packages, except
    under CI=true, where it must run; a running cluster of another size fails (stop it first)."""
    started = False
    nodes = slurm.nodes_up()
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
            [str(SLURM_SCRIPTS / "up.sh"), "--nodes", str(slurm.NODES)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if p.returncode != 0:
            pytest.fail(f"tests/slurm/up.sh failed: {p.stdout}{p.stderr}")
        started = True
    elif nodes != slurm.NODES:
        pytest.fail(
            f"a Slurm cluster of {nodes} node(s) is up; the tests need {slurm.NODES}: stop it "
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
    from analysis import standing

    # the verdict line says what the runs stood on exactly when the records cross the thresholds (issue 59)
    verdict = next(line for line in p.stdout.splitlines() if line.startswith("[paper] Reproduced "))
    said = standing.sentence(out)
    assert verdict.endswith(said) if said else "other processes held" not in verdict, verdict
    return out


@pytest.fixture
def shared() -> Path:
    """A folder like /tmp: root's, writable by every user, sticky (under /tmp, so any user reaches it)."""
    d = Path(tempfile.mkdtemp(prefix="iocampaign-shared-test-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


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


@pytest.fixture(scope="module")
def planned_cell():
    """planned_cell(*overrides): the cell (``jobs.cell.Cell``) as the campaign plans it and
    ``jobs.runner.measure`` takes it (Hydra initialised once for the module)."""
    from hydra import compose, initialize_config_dir

    from campaign import schema
    from jobs.cell import Cell

    schema.register()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield lambda *ov: Cell.from_composed(compose("config", overrides=list(ov)))


@pytest.fixture(scope="module")
def refusal():
    """refusal(*overrides): the line planning refuses the cell with, or None when it would run (the planner
    and the checks a campaign runs, in this process)."""
    from campaign import errors, planning, validate

    planner = planning.Planner(lambda ov: compose_cell(list(ov)))

    def refuse(*overrides: str) -> str | None:
        try:
            validate.check(planner.cell(list(overrides)), {})
        except errors.ConfigError as e:
            return str(e)
        return None

    return refuse
