"""Device locks are shared by every user of the machine: a root campaign leaves a lock folder and lock
files that another user's campaign can take (as /run/lock is shared), never one that blocks it."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from jobs.storage import locks

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def lock_dir():
    d = Path("/tmp") / f"iocampaign-locks-test-{uuid.uuid4().hex[:8]}"  # under /tmp: reachable by any user
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the second campaign as another user")
def test_a_lock_taken_by_root_can_then_be_taken_by_another_user(lock_dir):
    lp = locks.tier_lock_path(str(lock_dir), "emulated_hdd")
    with locks.hold(lp, "emulated tier emulated_hdd") as waited:
        assert waited < 1
        assert lp.read_text() == f"pid {os.getpid()}\n"  # the holder is named while it holds the lock
    assert stat.S_IMODE(os.stat(lock_dir).st_mode) == 0o1777
    assert stat.S_IMODE(os.stat(lp).st_mode) == 0o666
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from pathlib import Path\nfrom jobs.storage import locks\n"
            f"with locks.hold(Path({str(lp)!r}), 'the tier', timeout_s=5):\n"
            "    import os; print(os.getpid(), open(" + repr(str(lp)) + ").read().strip())\n")
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-1500:]
    pid, holder = p.stdout.split(" ", 1)
    assert holder.strip() == f"pid {pid}"  # the other user's campaign wrote itself in
    assert lp.read_text() == ""  # released


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a lock file another user cannot write")
def test_a_lock_file_another_user_cannot_write_still_locks(lock_dir):
    lock_dir.mkdir(mode=0o755)
    os.chmod(lock_dir, 0o1777)
    lp = lock_dir / "old.lock"
    lp.write_text("")
    os.chmod(lp, 0o644)  # as versions before shared locks left them
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from pathlib import Path\nfrom jobs.storage import locks\n"
            f"with locks.hold(Path({str(lp)!r}), 'the tier', timeout_s=5) as w:\n"
            "    print('held', w < 1)\n")
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "held True" in p.stdout, p.stderr[-1500:]
