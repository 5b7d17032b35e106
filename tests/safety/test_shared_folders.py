"""Folders every user can write (/tmp, /var/tmp, /dev/shm): a real second user (``useradd``) plants
folders, links, FIFOs and locks where a root campaign will write, and nothing of theirs steers it.

Each test reproduces a finding of the third reliability round and fails on the code before the fix:
lock files followed planted links (a victim truncated to 0 bytes, made 0666), and the tool's folders in
a shared root were trusted by name (root wrote its manifest through a user's link).
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from jobs import owned
from jobs.storage import locks
from support.commands import campaign
from support.configs import TINY
from support.users import as_user, as_user_python


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file of root's that another user would like a root process to write through a link."""
    p = tmp_path / "victim"
    p.write_bytes(b"root's data, never to be written by the tool\n")
    p.chmod(0o600)
    return p


def _fingerprint(p: Path) -> tuple:
    st = os.lstat(p)
    return hashlib.sha256(p.read_bytes()).hexdigest(), stat.S_IMODE(st.st_mode), st.st_uid, st.st_size


def _as(user, *argv: str) -> None:
    p = as_user(user, *argv)
    assert p.returncode == 0, p.stderr


def _root_lock_dir(shared: Path) -> Path:
    """Root's lock folder, made like /tmp (1777, sticky), where every user may add a lock file (a folder
    another user made is refused: tests/safety/test_lock_holding.py)."""
    d = shared / "locks"
    d.mkdir()
    d.chmod(0o1777)
    return d


def test_a_link_planted_at_a_lock_file_is_never_followed(other_user, shared, victim):
    lock_dir = _root_lock_dir(shared)
    lp = lock_dir / "dev-0-40.lock"
    _as(other_user, "ln", "-s", str(victim), str(lp))
    before = _fingerprint(victim)
    with (
        pytest.raises(owned.NotOurs, match=r"^platform.lock_dir: .*dev-0-40.lock is a link"),
        locks.hold(lp, "the device", timeout_s=2),
    ):
        pass
    assert _fingerprint(victim) == before  # not truncated, not made 0666
    assert os.path.islink(lp)  # and the link is theirs to remove


def test_a_lock_folder_that_is_a_link_or_open_to_all_is_refused(other_user, shared, tmp_path):
    target = tmp_path / "roots-folder"
    target.mkdir()
    _as(other_user, "ln", "-s", str(target), str(shared / "locks"))
    with pytest.raises(owned.NotOurs, match="is a link or not a folder"):
        locks.check_dir(str(shared / "locks"))
    with pytest.raises(owned.NotOurs), locks.hold(shared / "locks" / "tier-x.lock", "the tier", timeout_s=1):
        pass
    assert list(target.iterdir()) == []  # nothing made through the link
    _as(other_user, "mkdir", "-m", "777", str(shared / "open"))
    _as(other_user, "chmod", "777", str(shared / "open"))
    with pytest.raises(owned.NotOurs, match="not sticky"):
        locks.check_dir(str(shared / "open"))


def test_a_lock_of_another_user_locks_and_is_never_written(other_user, shared):
    """The lock folder is shared on purpose: root takes a lock file another user made, writes nothing in
    it."""
    lock_dir = _root_lock_dir(shared)
    lp = lock_dir / "tier-emulated_hdd.lock"
    _as(other_user, "sh", "-c", f"umask 022; printf 'their text' > {lp}")
    before = _fingerprint(lp)
    with locks.hold(lp, "the tier", timeout_s=2) as waited:
        assert waited < 1
    assert _fingerprint(lp) == before
    root_made = lock_dir / "dev-1-2.lock"
    with locks.hold(root_made, "the device", timeout_s=2):
        # read-only for others: a lock needs no write
        assert stat.S_IMODE(os.stat(root_made).st_mode) == 0o644
    # and the other user's campaign takes root's lock file in turn
    code = (
        "from pathlib import Path\nfrom jobs.storage import locks\n"
        f"with locks.hold(Path({str(root_made)!r}), 'the device', timeout_s=5) as w:\n"
        "    print('held', w < 1)\n"
    )
    p = as_user_python(other_user, "-c", code)
    assert p.returncode == 0 and "held True" in p.stdout, p.stderr[-1500:]


def test_a_waiting_cell_names_the_holder_from_the_kernel_never_from_the_file(other_user, shared):
    lock_dir = _root_lock_dir(shared)
    lp = lock_dir / "dev-9-9.lock"
    script = (
        f"exec 9>{lp}; printf 'pid 1 $(reboot) \\033[2J forged holder' >&9; flock -x 9; echo held; sleep 30"
    )
    holder = subprocess.Popen(
        [
            "setpriv",
            f"--reuid={other_user[1]}",
            f"--regid={other_user[2]}",
            "--clear-groups",
            "bash",
            "-c",
            script,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with pytest.raises(locks.LockTimeout) as e, locks.hold(lp, "the device", timeout_s=1.0):
            pass
        assert time.monotonic() - t0 < 5
        msg = str(e.value)
        assert f"user {other_user[0]}" in msg and "forged" not in msg and "reboot" not in msg, msg
        assert "platform.lock_timeout_min" in msg
    finally:
        holder.kill()
        holder.wait()


def test_a_tool_folder_another_user_made_in_a_shared_root_is_refused_untouched(
    other_user, shared, victim, cwd
):
    """A user pre-creates <root>/iocampaign/datasets/<key>/ with links where root writes its lock and
    manifest: the campaign stops at planning, naming the folder and its owner; nothing is written."""
    key = shared / "iocampaign" / "datasets" / "imagenet_subset-0000000000"
    _as(other_user, "mkdir", "-p", str(key))
    _as(other_user, "ln", "-s", str(victim), str(key / ".generating.lock"))
    _as(other_user, "ln", "-s", str(victim), str(key / "manifest.csv.1.part"))
    before = _fingerprint(victim)
    tree = sorted(str(p) for p in shared.rglob("*"))
    p = campaign("-m", "threads=1", "storage=local", f"storage.root={shared}", *TINY, cwd=cwd, timeout=120)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{shared / 'iocampaign'} belongs to {other_user[0]}" in lines[0], p.stderr
    assert "storage.root" in lines[0]
    assert _fingerprint(victim) == before
    assert sorted(str(p) for p in shared.rglob("*")) == tree
    assert not list(cwd.rglob("record.json"))


def test_a_link_planted_in_place_of_the_tool_folder_is_not_followed(other_user, shared, tmp_path):
    target = tmp_path / "roots-folder"
    target.mkdir()
    _as(other_user, "ln", "-s", str(target), str(shared / "iocampaign"))
    with pytest.raises(
        owned.NotOurs, match=f"storage.root: {shared / 'iocampaign'} is a link made by {other_user[0]}"
    ):
        owned.under_tool_folder(shared, "datasets", setting="storage.root")
    assert list(target.iterdir()) == []


def test_each_user_has_a_folder_of_their_own_in_a_shared_root(other_user, shared):
    """In a root every user can write, another user's tool folder is ``iocampaign-<user>``: they neither
    fail on root's folder nor can plant anything in it."""
    mine = owned.under_tool_folder(shared, "datasets", setting="storage.root")
    assert mine == shared / "iocampaign" / "datasets"
    assert stat.S_IMODE(os.stat(shared / "iocampaign").st_mode) == 0o755
    code = (
        "from jobs import owned\n"
        f"print(owned.under_tool_folder({str(shared)!r}, 'datasets', setting='storage.root'))\n"
    )
    p = as_user_python(other_user, "-c", code)
    assert p.returncode == 0, p.stderr[-1500:]
    theirs = shared / f"iocampaign-{other_user[0]}"
    assert p.stdout.strip() == str(theirs / "datasets")
    assert os.stat(theirs).st_uid == other_user[1]
    # a folder the user may write but others may not: the plain name (their own scratch folder)
    private = shared / "private"
    _as(other_user, "mkdir", "-m", "755", str(private))
    p = as_user_python(
        other_user, "-c", f"from jobs import owned; print(owned.tool_folder({str(private)!r}))"
    )
    assert p.stdout.strip() == str(private / "iocampaign"), p.stderr


def test_a_forged_backing_marker_of_a_modelled_tier_is_refused(other_user, shared, tmp_path, cwd):
    """The modelled tier's marker file proved nothing: another user could write it in a folder of theirs."""
    backing = shared / "tiers" / "modeled_hdd"
    _as(other_user, "mkdir", "-p", str(backing))
    _as(other_user, "sh", "-c", f'echo \'{{"tier": "modeled_hdd"}}\' > {backing}/.iocampaign-backing')
    p = campaign(
        "storage=modeled_hdd",
        f"storage.root={tmp_path / 'mnt'}",
        f"storage.model.backing_dir={shared / 'tiers'}",
        "workload=microbench",
        "platform.dry_run=true",
        *TINY,
        cwd=cwd,
        timeout=120,
    )
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "storage.model.backing_dir" in lines[0] and other_user[0] in lines[0], p.stderr
    assert not (tmp_path / "mnt").exists()


def test_the_rule_of_a_secure_folder(tmp_path, other_user):
    """Folders on the way: root's or the user's, sticky where all may write; the tool's own: private."""
    tmp_path.chmod(0o755)
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    with pytest.raises(owned.NotOurs, match="not sticky"):
        owned.ensure(open_to_all / "iocampaign", "storage.root", own_from=open_to_all / "iocampaign")
    group = tmp_path / "iocampaign"
    group.mkdir()
    group.chmod(0o775)
    with pytest.raises(owned.NotOurs, match="may be written by others"):
        owned.check(group / "datasets", "storage.root", own_from=group)
    # a link root made is followed, as the kernel's protected_symlinks allows
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    made = owned.ensure(
        tmp_path / "alias" / "iocampaign" / "x", "storage.root", own_from=tmp_path / "alias" / "iocampaign"
    )
    assert (real / "iocampaign" / "x").is_dir() and made == tmp_path / "alias" / "iocampaign" / "x"
    assert stat.S_IMODE(os.stat(real / "iocampaign" / "x").st_mode) & 0o022 == 0


@pytest.mark.cells
def test_a_second_users_campaign_runs_beside_roots_in_a_shared_root(other_user, shared):
    """Root generated its dataset in a shared root first; another user's campaign there used to fail in
    every cell on root's ``.generating.lock``: it now runs in a folder of its own and leaves root's alone."""
    roots = owned.under_tool_folder(shared, "datasets", "imagenet_subset-0000000000", setting="storage.root")
    (roots / ".generating.lock").write_text("")
    before = {p: _fingerprint(p) for p in roots.rglob("*")}
    home = shared / "home"
    _as(other_user, "mkdir", "-m", "700", str(home))
    p = as_user_python(
        other_user,
        "-m",
        "campaign",
        "-m",
        "threads=1",
        "storage=local",
        f"storage.root={shared}",
        f"platform.lock_dir={shared / 'locks'}",
        *TINY,
        home=home,
        cwd=home,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    theirs = shared / f"iocampaign-{other_user[0]}" / "datasets"
    assert os.stat(theirs).st_uid == other_user[1] and any(theirs.rglob("*.jpg"))
    assert {p: _fingerprint(p) for p in roots.rglob("*")} == before
    assert len(list(home.rglob("record.json"))) == 1


def test_a_campaign_run_from_a_shared_folder_never_writes_into_another_users_folder(
    other_user, shared, victim
):
    """Run from /tmp, the campaign folder (multirun/, outputs/, --out) is made there: another user's
    ``multirun`` folder, or a link in its place, is refused before Hydra makes anything."""
    _as(other_user, "mkdir", str(shared / "multirun"))
    _as(other_user, "ln", "-s", str(victim.parent), str(shared / "outputs"))
    before = sorted(str(p) for p in victim.parent.rglob("*"))
    for args, folder, setting in (
        (("-m", "threads=1"), "multirun", "hydra.sweep.dir"),
        (("threads=1",), "outputs", "hydra.run.dir"),
        (("+experiment=paper", "--scale", "ci", "--out", "multirun/paper"), "multirun", "--out"),
    ):
        p = campaign(*args, "storage=local", *TINY, cwd=shared, timeout=120)
        lines = [line for line in p.stderr.splitlines() if line.strip()]
        assert p.returncode == 2 and len(lines) == 1, p.stdout[-1500:] + p.stderr[-1500:]
        assert f"{setting}: {shared / folder}" in lines[0] and other_user[0] in lines[0], lines
    assert sorted(str(p) for p in victim.parent.rglob("*")) == before
    assert list((shared / "multirun").iterdir()) == []
    p = campaign(
        "-m",
        "threads=1",
        "storage=local",
        f"hydra.sweep.dir={shared}/mine/multi",
        "platform.dry_run=true",
        *TINY,
        cwd=shared,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-1500:]


@pytest.mark.cells
def test_a_second_user_plans_the_paper_study_on_the_tiers_theirs_to_use(other_user, shared):
    """make demo as a second user stopped at once: the study's default Lustre grid wanted root's modelled tier
    (its backing folder /var/tmp/iocampaign/tiers). Without root the study plans on local disk and tmpfs."""
    home = shared / "home2"
    _as(other_user, "mkdir", "-m", "700", str(home))
    p = as_user_python(
        other_user,
        "-m",
        "campaign",
        "+experiment=paper",
        "--scale",
        "ci",
        "platform.dry_run=true",
        home=home,
        cwd=home,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "the modelled Lustre is mounted by root" in p.stdout + p.stderr
    assert "storage=local" in p.stdout and "modeled_lustre" not in p.stdout.split("[paper]")[-1]
