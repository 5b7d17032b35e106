"""Code another user planted where a command runs is never imported: ``python -m`` puts the folder it runs
in first on ``sys.path``, and the tool imports every package of the namespace packages
``iocampaign_workloads`` and ``iocampaign_frameworks`` it finds there. Root running a command in a shared
folder (/tmp) must not run a neighbour's module."""

import os

import pytest

from support.commands import campaign

MARK = "import pathlib; pathlib.Path({marker!r}).write_text('imported')\n"


def _plant(folder, uid: int, gid: int, marker) -> None:
    """A workload module and a framework package in ``folder``, each writing ``marker`` when imported, made
    and owned by the user ``uid``."""
    workload = folder / "iocampaign_workloads" / "planted.py"
    framework = folder / "iocampaign_frameworks" / "planted" / "__init__.py"
    for path in (workload, framework):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(MARK.format(marker=str(marker)))
    for path in (workload, framework, workload.parent, framework.parent, framework.parent.parent):
        os.chown(path, uid, gid)


@pytest.mark.cells
def test_a_namespace_package_another_user_planted_where_root_runs_is_not_imported(other_user, tmp_path):
    _, uid, gid = other_user
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp: anyone may add a folder
    marker = tmp_path / "imported-by-root"
    _plant(shared, uid, gid, marker)
    p = campaign("-m", "threads=1,2", f"storage.root={tmp_path}", "platform.dry_run=true", cwd=shared)
    assert p.returncode == 0, p.stderr[-3000:]
    assert not marker.exists()  # neither module ran
    for name in ("iocampaign_workloads", "iocampaign_frameworks"):
        assert f"iocampaign: {shared / name} is not imported: it is {other_user[0]}'s" in p.stderr
    # root's own folder of the same name, where anyone may write, is left out too
    os.chown(shared / "iocampaign_workloads", 0, 0)
    (shared / "iocampaign_workloads").chmod(0o777)
    p = campaign("-m", "threads=1", f"storage.root={tmp_path}", "platform.dry_run=true", cwd=shared)
    assert p.returncode == 0 and not marker.exists(), p.stderr[-3000:]
    assert f"iocampaign: {shared / 'iocampaign_workloads'} is not imported: anyone may write it" in p.stderr
