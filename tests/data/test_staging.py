"""storage@stage=<preset>: the data is copied onto a real tmpfs before the runs and read there; the
copy's time is reported apart; the staged copy is removed when the cell ends, also when it fails;
nothing else on the stage tier is touched; the report compares staged with unstaged."""

import pandas as pd
import pytest

from jobs import records
from support.commands import analysis, campaign
from support.files import make_jpegs, tmpfs

TINY = ("workload=readonly", "dataset.num_images=64", "batch_size=16", "repeats=2", "warmup=0", "threads=2")


@pytest.mark.cells
def test_staged_cell_reads_the_copy_and_removes_it(tmp_path, disk_root):
    out = tmp_path / "c"
    with tmpfs(tmp_path / "fast", "64m") as fast:
        planted = fast / "users-file.txt"
        planted.write_text("mine")
        (fast / "iocampaign" / "staged").mkdir(parents=True)
        theirs = fast / "iocampaign" / "staged" / "someone-else"
        theirs.write_text("not the tool's copy")
        site = tmp_path / "site" / "storage"  # a site's own preset of its fast tier, as a user would add one
        site.mkdir(parents=True)
        (site / "fast_tmpfs.yaml").write_text(
            f"defaults:\n  - tmpfs\n  - _self_\nname: fast_tmpfs\nroot: {fast}\n"
        )
        p = campaign(
            "-m",
            *TINY,
            f"storage.root={disk_root}",
            "storage@stage=none,fast_tmpfs",
            f"hydra.searchpath=[file://{tmp_path / 'site'}]",
            f"hydra.sweep.dir={out}",
            cwd=tmp_path,
        )
        assert p.returncode == 0, p.stderr[-2000:]
        rec = records.read(out / "1" / "record.json")
        stage = rec.dataset["stage"]
        assert stage["storage"] == "fast_tmpfs" and stage["stage_files"] == 64
        assert stage["stage_bytes"] == rec.dataset["total_bytes"] and stage["stage_s"] > 0
        assert stage["staged_to"].startswith(str(fast / "iocampaign" / "staged"))
        assert rec.provenance["data_mount"]["fs_type"] == "tmpfs"  # the runs read the copy
        assert {r["cache_state"] for r in rec.runs} == {"memory"}
        assert all(r["images"] == 64 and r["images_dropped"] == 0 for r in rec.runs)
        # the copy is gone; what was there before is untouched
        assert sorted(p.name for p in (fast / "iocampaign" / "staged").iterdir()) == ["someone-else"]
        assert planted.read_text() == "mine" and theirs.read_text() == "not the tool's copy"
    p = analysis(str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    results = pd.read_csv(out / "results.csv", keep_default_na=False)
    assert sorted(set(results["stage"])) == ["", "fast_tmpfs"]
    from analysis.report import page as report

    report.write_report(out)
    html = (out / "report.html").read_text()
    assert "<h2>Staging</h2>" in html and "staged_speedup" in html


@pytest.mark.cells
def test_staging_without_room_fails_the_cell_and_leaves_nothing(tmp_path, disk_root):
    out = tmp_path / "c"
    with tmpfs(tmp_path / "small", "1m") as small:
        p = campaign(
            "-m",
            *TINY,
            "dataset=imagenet_subset",
            f"storage.root={disk_root}",
            "storage@stage=tmpfs",
            f"stage.root={small}",
            f"hydra.sweep.dir={out}",
            cwd=tmp_path,
        )
        assert p.returncode == 1
        rec = records.read(out / "0" / "record.json")
        assert (
            rec.status == records.FAILED
            and rec.error["type"] == "StagingError"
            and "MB free" in rec.error["message"]
        )
        assert not list((small / "iocampaign" / "staged").iterdir())


def test_stage_on_the_data_tier_is_refused(cwd, disk_root):
    p = campaign(
        *TINY, f"storage.root={disk_root}", "storage@stage=local", f"stage.root={disk_root}", cwd=cwd
    )
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "storage@stage=local is the tier the data is on" in lines[0]
    assert not [f for f in cwd.rglob("*") if f.is_file()]


def test_stage_none_is_no_stage(cwd):
    """``storage@stage=none`` (the default) sweeps beside presets: storage@stage=none,tmpfs."""
    p = campaign("--cfg", "job", "storage@stage=none", cwd=cwd)
    assert p.returncode == 0 and "\nstage: null\n" in p.stdout, p.stderr
    p = campaign("--cfg", "job", "storage@stage=nvme", cwd=cwd)
    assert p.returncode == 2 and "unknown storage 'nvme'" in p.stderr


def test_staged_cells_pair_only_with_the_cell_equal_in_everything_but_the_stage():
    """cache=cold,warm: staged-cold beside unstaged-cold, never beside unstaged-warm (a 3.6x that was
    the page cache); a staged cell with no counterpart has no ratio."""
    from analysis.tables import staging

    def cfg(cache, stage, tasks=1):
        c = {
            "workload": {"name": "readonly", "kind": "microbench"},
            "storage": {"name": "local", "root": "/x"},
            "cache": cache,
            "threads": 2,
            "platform": {"name": "local", "tasks_per_node": tasks, "lock_dir": "/l"},
        }
        return {**c, "stage": {"name": "tmpfs", "root": "/fast"}} if stage else c

    configs = {
        "0": cfg("cold", False),
        "1": cfg("warm", False),
        "2": cfg("cold", True),
        "3": cfg("warm", True),
        "4": cfg("cold", True, tasks=2),
    }
    summary = pd.DataFrame(
        {
            "cell_dir": [0, 1, 2, 3, 4],
            "stage": [None, None, "tmpfs", "tmpfs", "tmpfs"],
            "cache": ["cold", "warm", "cold", "warm", "cold"],
            "storage": "local",
            "images_per_s_median": [100.0, 400.0, 350.0, 410.0, 300.0],
            "bound": "storage",
        }
    )
    t = staging.comparison(summary, {}, configs).set_index(["cache", "from_stage"])
    assert t.loc[("cold", 350.0), "from_storage"] == 100.0 and t.loc[("cold", 350.0), "staged_speedup"] == 3.5
    assert t.loc[("warm", 410.0), "from_storage"] == 400.0
    assert pd.isna(t.loc[("cold", 300.0), "from_storage"])  # two tasks per cell: no unstaged counterpart


@pytest.mark.cells
def test_a_dangling_link_is_dropped_and_a_killed_cells_copy_is_cleared(tmp_path, disk_root):
    """A dangling link in the set failed the staged cell (the unstaged one counts it as dropped); a copy
    left by a cell killed with SIGKILL was never cleared. Copies this tool did not mark stay."""
    from jobs.data import staging

    data = disk_root / "data"
    make_jpegs(data, 16, classes=2)
    (data / "c0" / "gone.jpg").symlink_to(data / "c0" / "no-such-file.jpg")
    out = tmp_path / "c"
    with tmpfs(tmp_path / "fast", "64m") as fast:
        staged = fast / "iocampaign" / "staged"
        stale = staged / "x-files-deadbeef-0123456789"  # as a killed cell leaves its copy
        (stale / "c0").mkdir(parents=True)
        (stale / staging.MARK).write_text("")
        (stale / "c0" / "a.jpg").write_bytes(b"x" * 4096)
        foreign = staged / "not-the-tools"
        foreign.mkdir()
        (foreign / "file").write_text("the user's")
        p = campaign(
            "-m",
            "workload=readonly",
            "batch_size=4",
            "repeats=1",
            "warmup=0",
            "dataset.source=folder",
            f"dataset.path={data}",
            f"storage.root={disk_root}",
            "storage@stage=tmpfs",
            f"stage.root={fast}",
            f"hydra.sweep.dir={out}",
            cwd=tmp_path,
        )
        assert p.returncode == 0, p.stderr[-2000:]
        assert "a staged copy whose cell was killed" in p.stdout + p.stderr
        rec = records.read(out / "0" / "record.json")
        assert rec.dataset["stage"]["stage_files"] == 16
        assert [(r["images"], r["images_dropped"]) for r in rec.runs] == [(16, 1)]
        assert sorted(x.name for x in staged.iterdir()) == ["not-the-tools"]
        assert (foreign / "file").read_text() == "the user's"


def test_a_staged_cell_is_judged_by_the_stage_tiers_throttle():
    """Staged cells were labelled against the data tier's throttle ("4154 requests/s = 1662% of the tier's
    250/s"): the runs read the copy, so the stage tier's throttle is the one that applies."""
    from omegaconf import OmegaConf

    from analysis.tables.tidy import _emulated
    from jobs.cell import recorded
    from support.configs import compose_cell

    both = ["storage=emulated_hdd", "storage@stage=emulated_ssd"]
    config = OmegaConf.to_container(compose_cell(both), resolve=True)
    hdd, ssd = config["storage"]["emulate"], config["stage"]["emulate"]
    assert hdd["read_iops"] != ssd["read_iops"]

    def tier(config: dict, dataset: dict) -> dict | None:
        rec = records.CellRecord("c", records.COMPLETED, config, [], [], dataset, {}, "", "")
        return _emulated(recorded(rec), bool(records.dataset_of(rec).stage))

    assert tier(config, {"stage": {"storage": "emulated_ssd"}}) == ssd
    assert tier({**config, "stage": None}, {}) == hdd
    assert tier(config, {}) == hdd  # asked, but the record says nothing was staged
