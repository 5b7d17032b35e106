"""Bad input: one clear line naming the setting, a non-zero exit, nothing left that looks like a result."""

import os

import pytest

from conftest import campaign

TINY = ("dataset.num_images=32", "batch_size=8", "repeats=1")


def _leftovers(cwd):
    """Files under cwd that a run would have produced (outputs/, multirun/)."""
    return [p for p in cwd.rglob("*") if p.is_file()]


def _fails_with(cwd, expected, *args):
    p = campaign(*args, cwd=cwd)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode != 0, p.stdout + p.stderr
    assert len(lines) == 1, p.stderr
    assert expected in lines[0], lines[0]
    assert _leftovers(cwd) == []
    return lines[0]


def test_storage_root_that_does_not_exist(cwd):
    _fails_with(cwd, "storage.root=/no/such/dir does not exist", "storage.root=/no/such/dir", *TINY)


def test_storage_root_not_writable(cwd, tmp_path):
    if os.geteuid() == 0:
        root = "/sys"  # not writable even for root
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        root = str(ro)
    _fails_with(cwd, f"storage.root={root} is not writable", f"storage.root={root}", *TINY)


def test_storage_root_not_a_directory(cwd, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    _fails_with(cwd, "is not a directory", f"storage.root={f}", *TINY)


def test_tier_preset_without_root(cwd):
    line = _fails_with(cwd, "storage.root is not set", "storage=hdd", *TINY)
    assert "storage=hdd" in line


def test_dataset_folder_without_images(cwd, tmp_path):
    d = tmp_path / "noimages" / "class_a"
    d.mkdir(parents=True)
    (d / "readme.txt").write_text("hello")
    _fails_with(cwd, "holds no images", "dataset.source=folder", f"dataset.path={d.parent}", *TINY)


def test_dataset_path_missing(cwd, tmp_path):
    _fails_with(cwd, "dataset.path", "dataset.source=folder", f"dataset.path={tmp_path / 'nope'}", *TINY)


@pytest.mark.parametrize("value,expected", [("0", "threads=0 must be a positive"), ("-2", "threads=-2 must be a positive"),
                                            ("abc", "threads=abc is not a number")])
def test_bad_threads(cwd, value, expected):
    _fails_with(cwd, expected, f"threads={value}", *TINY)


def test_batch_larger_than_dataset(cwd):
    _fails_with(cwd, "batch_size=64 is larger than the dataset (32 images", "dataset.num_images=32", "batch_size=64")


@pytest.mark.parametrize("arg,expected", [("storage=nvme", "unknown storage 'nvme'"),
                                          ("workload=alexnetz", "unknown workload 'alexnetz'")])
def test_unknown_names_list_the_valid_ones(cwd, arg, expected):
    line = _fails_with(cwd, expected, arg)
    assert "valid:" in line


def test_bad_cell_in_a_sweep_stops_it_before_anything_runs(cwd):
    line = _fails_with(cwd, "threads=0 must be a positive", "-m", "threads=1,0", *TINY)
    assert "nothing was run" in line


def test_wrong_type_names_the_setting(cwd):
    p = campaign("batch_size=many", cwd=cwd)
    assert p.returncode != 0 and "batch_size" in p.stderr
    assert _leftovers(cwd) == []
