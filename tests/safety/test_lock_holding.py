"""A device lock is held to the end of the cell, whatever another user does to the shared lock folder: a real
second user (``useradd``) makes a lock file, lets a real root cell lock it, then removes it.

Reproduces the red team's finding of round 4 (issue #58), which fails on the code before the fix: root's
cell locked a lock file another user had made; she removed it (the sticky bit lets an owner do that) and
root's next cell made a new one and measured at once, beside the first; both were recorded as results.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs import owned, records
from jobs.storage import locks
from support.commands import python_env, start_module
from support.configs import TOY_SEARCHPATH
from support.paths import ROOT, TOY
from support.users import as_user, user_python


@pytest.fixture
def lock_dir(shared) -> Path:
    """Root's lock folder, made like /tmp (1777, sticky): every user may add a lock file to it."""
    d = shared / "locks"
    d.mkdir()
    d.chmod(0o1777)
    return d


def _as(user, *argv: str) -> None:
    p = as_user(user, *argv)
    assert p.returncode == 0, p.stderr


def _locker(lp: Path) -> int | None:
    """The process that holds a flock on the file ``lp`` names, from the kernel's lock table (reading it
    takes no lock: the cell is never delayed by the test looking)."""
    try:
        st = os.stat(lp)
    except FileNotFoundError:
        return None
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in Path("/proc/locks").read_text().splitlines():
        f = line.split()
        if len(f) >= 6 and f[1] == "FLOCK" and f[5] == key and f[4].isdigit():
            return int(f[4])
    return None


def test_a_process_forked_while_a_lock_is_held_does_not_keep_it(tmp_path):
    """A child forked while a cell holds its device's lock (a DataLoader's worker) does not hold it: when
    the cell's process is killed, the next cell takes the lock at once though the child still lives (a
    worker that hung after its test's process was killed kept a CI run's disk locked, and every later cell
    on that disk waited out its time limit)."""
    import fcntl

    lp = tmp_path / "dev-1-2.lock"
    script = tmp_path / "holder.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "from pathlib import Path\n"
        "from jobs.storage import locks\n"
        "with locks.hold(Path(sys.argv[1]), 'the test device'):\n"
        "    child = os.fork()\n"
        "    if child == 0:\n"
        "        null = os.open(os.devnull, os.O_RDWR)\n"
        "        os.dup2(null, 1), os.dup2(null, 2)  # the test's pipes end with the holder\n"
        "        time.sleep(60)  # lives on, as a hung worker would\n"
        "        os._exit(0)\n"
        "    print(child, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)  # the cell's process killed while it holds the lock\n"
    )
    p = subprocess.run(
        [sys.executable, str(script), str(lp)], env=python_env(), capture_output=True, text=True, timeout=60
    )
    child = int(p.stdout.split()[0])
    try:
        assert p.returncode == -signal.SIGKILL, p.stderr
        for path in (lp, locks.own_lock(lp)):
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError while the child holds it
            finally:
                os.close(fd)
    finally:
        os.kill(child, signal.SIGKILL)


@pytest.mark.cells
def test_a_lock_file_removed_by_its_owner_lets_no_second_cell_in_and_fails_the_cell(
    other_user, lock_dir, tmp_path
):
    """Another user makes the device's lock file, root's cell locks it, she removes it while the cell is
    frozen mid-measurement (SIGSTOP: no race with the cell's pace). Root's next cell must still wait for
    the first, and the first must fail in one line at the end of that run, with no result recorded."""
    root = tmp_path / "root"
    root.mkdir()
    lp = locks.lock_path(str(lock_dir), str(root))
    _as(other_user, "touch", str(lp))
    out = tmp_path / "cell"
    cell = start_module(
        "campaign",
        "workload=toy_sleep",
        "workload.sleep_s=1",
        "repeats=2",
        "warmup=0",
        f"storage.root={root}",
        f"platform.lock_dir={lock_dir}",
        f"hydra.run.dir={out}",
        TOY_SEARCHPATH,
        cwd=tmp_path,
        env=python_env(PYTHONPATH=f"{ROOT}{os.pathsep}{TOY}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        both = (lp, locks.own_lock(lp))  # taken in turn: frozen between them, it would hold lp alone
        while (
            any(_locker(p) != cell.pid for p in both) and cell.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        os.kill(cell.pid, signal.SIGSTOP)
        assert _locker(lp) == cell.pid, "the cell never held the other user's lock file"
        _as(other_user, "rm", str(lp))  # the sticky bit lets her: the file is hers
        with (  # before: root's next cell made a new lp and measured at once, beside the first
            pytest.raises(locks.LockTimeout, match=rf"^pid {cell.pid} \(.*user root\) held the device"),
            locks.hold(lp, f"the device of {root}", timeout_s=0),
        ):
            pass
        os.kill(cell.pid, signal.SIGCONT)
        _, err = cell.communicate(timeout=120)
    finally:
        if cell.poll() is None:
            os.kill(cell.pid, signal.SIGCONT)
            cell.kill()
            cell.wait()
    assert cell.returncode == 1, err[-3000:]  # before: 0, the cell recorded as a result
    # TensorFlow prints its own start-up lines when imported; the campaign says one line
    said = [line for line in err.splitlines() if line.startswith("campaign:")]
    assert len(said) == 1 and "Traceback" not in err, err[-3000:]
    assert said[0].startswith(f"campaign: the cell failed: LockLost: platform.lock_dir: {lp}, the lock of")
    assert f"a file of {other_user[0]}'s), was removed during the cell" in said[0]
    assert "nothing of this cell is recorded as a result" in said[0]
    assert records.read(out / "record.json").status == records.FAILED
    logged = "".join(p.read_text() for p in out.glob("*.log"))
    # it stopped at the end of the run it was frozen in, before giving that run's figures or starting run 2
    assert "LockLost" in logged and "run 1/2" not in logged and "run 2/2" not in logged, logged


def test_a_cell_of_another_user_whose_lock_file_was_removed_is_still_waited_for(other_user, lock_dir):
    """Another user's cell holds the device through a lock file of theirs, which they then remove: a new
    one by that name is free, but their own lock beside it is still held, so root waits; and their cell,
    at its end, fails (LockLost) rather than returning as if it had held the device alone."""
    lp = lock_dir / "dev-1-2.lock"
    python, env = user_python(other_user)
    code = (
        "import sys\nfrom pathlib import Path\nfrom jobs.storage import locks\n"
        f"with locks.hold(Path({str(lp)!r}), 'the device', timeout_s=5):\n"
        "    print('held', flush=True)\n    sys.stdin.read()\n"
    )
    _, uid, gid = other_user
    theirs = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "env"]
        + [f"{k}={v}" for k, v in env.items()]
        + [*python, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert theirs.stdout.readline().strip() == "held", theirs.stderr.read()[-1500:]
        _as(other_user, "rm", str(lp))
        with (  # before: root made a new lp and got in at once
            pytest.raises(
                locks.LockTimeout,
                match=rf"^pid {theirs.pid} \(.*user {other_user[0]}\) held the device "
                rf"\({lock_dir}/dev-1-2.uid-{uid}.lock\)",
            ),
            locks.hold(lp, "the device", timeout_s=0),
        ):
            pass
        _, err = theirs.communicate("", timeout=60)
    finally:
        theirs.kill()
        theirs.wait()
    assert theirs.returncode == 1 and "LockLost: platform.lock_dir: " in err, err[-1500:]
    with locks.hold(lp, "the device", timeout_s=5):  # and once their cell has ended, root's goes on
        pass


def test_a_lock_folder_of_another_user_is_refused(other_user, shared, refusal, tmp_path):
    """A folder's owner may remove any file in it, sticky or not: a lock folder another user made (here
    1777, as the tool makes it) is refused at planning and at use, in one line naming its owner."""
    theirs = shared / "locks"
    _as(other_user, "mkdir", "-m", "1777", str(theirs))
    _as(other_user, "chmod", "1777", str(theirs))
    line = refusal(f"platform.lock_dir={theirs}", f"storage.root={tmp_path}")
    assert line is not None and "\n" not in line, line
    assert line.startswith(f"platform.lock_dir={theirs} belongs to {other_user[0]}, who could remove a lock")
    with pytest.raises(owned.NotOurs, match=f"belongs to {other_user[0]}"), locks.hold(theirs / "x", "it"):
        pass
    assert list(theirs.iterdir()) == []  # nothing made in it
    assert refusal(f"platform.lock_dir={shared / 'mine'}", f"storage.root={tmp_path}") is None


def test_a_users_own_lock_made_by_another_user_is_refused_untouched(other_user, lock_dir):
    """The user's own lock beside a shared one (``dev-1-2.uid-0.lock`` for root) serializes the user's
    cells only if nobody else can remove it: one another user made first is refused, naming its owner."""
    lp = lock_dir / "dev-1-2.lock"
    own = locks.own_lock(lp)
    assert own.name == f"dev-1-2.uid-{os.geteuid()}.lock"
    _as(other_user, "touch", str(own))
    with (
        pytest.raises(owned.NotOurs, match=rf"^platform.lock_dir: {own} belongs to {other_user[0]}, who"),
        locks.hold(lp, "the device", timeout_s=1),
    ):
        pass
    assert os.stat(own).st_uid == other_user[1]  # theirs to remove
    assert _locker(lp) is None  # the shared lock was let go with the refusal
