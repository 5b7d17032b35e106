"""Code another user planted where a command runs is never imported: ``python -m`` puts the folder it runs
in first on ``sys.path``, and the tool imports every package of the namespace packages
``iocampaign_workloads`` and ``iocampaign_frameworks`` it finds there. Root running a command in a shared
folder (/tmp) must not run a neighbour's module, whatever shape it takes."""

import os

import pytest

from support.commands import campaign

MARK = "import pathlib; pathlib.Path({marker!r}).write_text('imported')\n"


def _own(uid: int, gid: int, *paths) -> None:
    for path in paths:
        os.chown(path, uid, gid, follow_symlinks=False)


def _dry_run(folder, root):
    p = campaign("-m", "threads=1,2", f"storage.root={root}", "platform.dry_run=true", cwd=folder)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stderr


@pytest.fixture
def shared(tmp_path):
    """A folder like /tmp (root's, sticky, anyone may add to it), where root runs its commands."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    return folder


@pytest.mark.cells
def test_a_namespace_package_another_user_planted_where_root_runs_is_not_imported(
    other_user, shared, tmp_path
):
    name, uid, gid = other_user
    marker = tmp_path / "imported-by-root"
    workload = shared / "iocampaign_workloads" / "planted.py"
    framework = shared / "iocampaign_frameworks" / "planted" / "__init__.py"
    for path in (workload, framework):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(MARK.format(marker=str(marker)))
    _own(uid, gid, workload, framework, workload.parent, framework.parent, framework.parent.parent)
    said = _dry_run(shared, tmp_path)
    assert not marker.exists()  # neither module ran
    assert f"iocampaign: {workload.parent} is not imported: {workload.parent} is {name}'s" in said
    assert f"iocampaign: {framework.parent.parent} is not imported: " in said
    # root's own folder there, with a module another user owns in it, or made writable by anyone
    _own(0, 0, workload.parent)
    assert f"{workload} is {name}'s" in _dry_run(shared, tmp_path) and not marker.exists()
    _own(0, 0, workload)
    workload.parent.chmod(0o777)
    assert f"others may write {workload.parent} (mode 777)" in _dry_run(shared, tmp_path)
    assert not marker.exists()


@pytest.mark.cells
def test_a_planted_module_of_the_namespaces_name_or_a_link_to_root_code_is_not_imported(
    other_user, shared, tmp_path
):
    name, uid, gid = other_user
    marker = tmp_path / "imported-by-root"
    module = shared / "iocampaign_frameworks.py"  # a module wins over the namespace's folders on its path
    module.write_text(MARK.format(marker=str(marker)))
    _own(uid, gid, module)
    said = _dry_run(shared, tmp_path)
    assert not marker.exists()
    assert f"iocampaign: {module} is not imported: iocampaign_frameworks must be a folder" in said
    module.unlink()
    # a link another user made, to a folder of root's code that was never meant to be imported
    roots_code = tmp_path / "roots_code"
    roots_code.mkdir()
    (roots_code / "tool.py").write_text(MARK.format(marker=str(marker)))
    link = shared / "iocampaign_workloads"
    link.symlink_to(roots_code)
    _own(uid, gid, link)
    said = _dry_run(shared, tmp_path)
    assert not marker.exists()
    assert f"the way to it passes {link}, a link {name} made" in said


@pytest.mark.cells
def test_a_figure_a_record_names_in_another_users_planted_module_is_not_imported(
    other_user, shared, tmp_path, paper
):
    """The analysis draws a figure with the function its records name (``analysis.declarations``): root
    analysing a campaign in a shared folder, whose records (planted, or a neighbour's) name a drawing
    function of ``iocampaign_workloads`` that the neighbour put beside it, as a folder or as a module of
    the namespace's name, runs none of it: the figure is left out with one line, the rest is written."""
    import json
    import shutil

    from support.commands import analysis

    name, uid, gid = other_user
    marker = tmp_path / "imported-by-root"
    grid = shared / "fig4_fig5"
    shutil.copytree(paper / "fig4_fig5", grid, symlinks=True)
    for path in grid.rglob("record.json"):
        r = json.loads(path.read_text())
        r["declared"]["figures"].append({"key": "planted", "draw": "iocampaign_workloads.planted:draw"})
        path.write_text(json.dumps(r))
    module = shared / "iocampaign_workloads" / "planted.py"
    module.parent.mkdir()
    module.write_text(MARK.format(marker=str(marker)) + "def draw(rows, folder, figure):\n    return []\n")
    _own(uid, gid, module, module.parent)
    p = analysis(str(grid), cwd=shared)
    assert p.returncode == 0, p.stderr[-2000:]
    assert not marker.exists() and (grid / "fig4.png").exists() and (grid / "results.csv").exists()
    assert f"iocampaign: {module.parent} is not imported: {module.parent} is {name}'s" in p.stderr
    assert "planted ('microbench') is not drawn: iocampaign_workloads.planted:draw" in p.stderr
    shutil.rmtree(module.parent)
    planted = shared / "iocampaign_workloads.py"  # a module of the namespace's name: never imported either
    planted.write_text(MARK.format(marker=str(marker)))
    _own(uid, gid, planted)
    p = analysis(str(grid), cwd=shared)
    assert p.returncode == 0 and not marker.exists(), p.stderr[-2000:]
    assert "planted ('microbench') is not drawn" in p.stderr
