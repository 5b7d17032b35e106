"""Issue 44, items 4 and 6: a key the campaign does not have is refused in every mode with the nearest one
(``thread=4``: did you mean threads?), ``+key=`` only for keys it knows; a preset's file system is checked
against its root (``storage=lustre`` on ext4), and rows measured off it are never judged against the paper.
Most cases run in this process; two real commands prove the exit status, the one line and the empty folder."""

import argparse
import os

import pandas as pd

from analysis.claims import judge as compare
from analysis.tables import bounds
from analysis.tables import tidy as tables
from campaign import keys, status
from campaign.capacity import checks as capacity_checks
from campaign.capacity import command as capacity
from support.commands import campaign
from support.configs import compose_cell
from support.paths import TOY

TYPOS = {  # override -> the line it gets
    "thread=1,2": "unknown setting 'thread' (did you mean threads?)",
    "+thread=4": "unknown setting 'thread' (did you mean threads?)",
    "++thread=4": "unknown setting 'thread' (did you mean threads?)",
    "~thread": "unknown setting 'thread' (did you mean threads?)",
    "storage.roots=/x": "unknown setting 'storage.roots' (did you mean storage.root?)",
    "storge.root=/x": "unknown setting 'storge.root' (did you mean storage.root?)",
    "dataset.num_image=3": "unknown setting 'dataset.num_image' (did you mean dataset.num_images?)",
    "workload.widht=0.5": "unknown setting 'workload.widht' (did you mean workload.width?)",
    "platform.acount=x": "unknown setting 'platform.acount' (did you mean platform.account?)",
    "worklaod=alexnet": "unknown setting 'worklaod' (did you mean workload?)",
    "storag@stage=tmpfs": "unknown setting 'storag' (in 'storag@stage=tmpfs') (did you mean storage?)",
    "storage.fs_chek=false": "unknown setting 'storage.fs_chek' (did you mean storage.fs_check?)",
}
KNOWN = [
    "threads=1,2",
    "++threads=4",
    "workload=alexnet_small",
    "workload.width=0.5",
    "storage@stage=tmpfs",
    "stage.root=/x",
    "storage.emulate.read_iops=3",
    "checkpoint.model.layers=2",
    "accelerator.step_time_s=1",
    "platform.setup=[module load x]",
    "input.service=true",
    "trace.posix=true",
    "storage.fs_check=false",
    "+experiment=fig6",
    "experiment=fig7",
    "~storage.label",
    "hydra.sweep.dir=x",
    "hydra/launcher=basic",
    "-m",
    "--cfg",
    "job",
    "--scale",
    "ci",
]


def test_an_unknown_key_is_named_with_the_nearest_known_one():
    for arg, line in TYPOS.items():
        assert keys.unknown_key(["-m", "storage=local", arg]) == line, arg


def test_the_keys_of_the_schema_the_groups_and_hydras_own_pass():
    assert keys.unknown_key(KNOWN) is None
    # no near key: the section's settings, or where to see every setting
    assert "storage's settings: name, label, root" in keys.unknown_key(["storage.zzz=1"])
    assert (
        keys.unknown_key(["zzzq=1"])
        == "unknown setting 'zzzq' (python -m campaign --cfg job shows every setting)"
    )
    # a + on a setting the config has: what to write instead (Hydra would refuse it with a traceback)
    assert keys.unknown_key(["+threads=4"]) == (
        "+threads=4: threads is a setting already: write threads=4 (+ adds a setting the config lacks)"
    )


def test_a_workload_of_a_config_folder_brings_its_own_keys(monkeypatch):
    monkeypatch.syspath_prepend(str(TOY))
    from jobs import workloads

    workloads.discover()
    assert keys.unknown_key(["workload=toy_sleep", "workload.sleep_s=0.01,0.1"]) is None
    assert (
        keys.unknown_key(["workload.sleep_x=1"])
        == "unknown setting 'workload.sleep_x' (did you mean workload.sleep_s?)"
    )


def test_the_capacity_search_refuses_a_typo_before_anything(capsys, tmp_path):
    assert capacity.main(["accelerator=resnet50_a100", "thread=2", "--out", str(tmp_path / "cap")]) == 2
    assert capsys.readouterr().err == (
        "campaign.capacity: unknown setting 'thread' (did you mean threads?); nothing was run\n"
    )
    assert not (tmp_path / "cap").exists()
    # hydra.sweep.dir names the search's folder, as it names a campaign's; with --out, one of them
    assert (
        capacity.main(
            [
                "accelerator=resnet50_a100",
                f"hydra.sweep.dir={tmp_path / 'a'}",
                "--out",
                str(tmp_path / "b"),
                "--most",
                "0",
            ]
        )
        == 2
    )
    assert "name two folders" in capsys.readouterr().err


def test_hydra_sweep_dir_is_the_capacity_searchs_folder(tmp_path):
    args = argparse.Namespace(
        out=None, overrides=["storage=local", f"hydra.sweep.dir={tmp_path}/s", "threads=2"]
    )
    assert capacity_checks.sweep_dir(args) is None
    # not given to each round
    assert args.out == tmp_path / "s" and args.overrides == ["storage=local", "threads=2"]
    args = argparse.Namespace(out=None, overrides=["hydra.sweep.dir=multirun/${now:%H}"])
    assert "plain path" in capacity_checks.sweep_dir(args)


def test_status_defaults_to_the_latest_campaign_and_knows_a_capacity_search(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert status.main([]) == 2
    assert "multirun/latest does not exist" in capsys.readouterr().err
    search = tmp_path / "multirun" / "capacity-1"
    (search / "local" / "storage_rate").mkdir(parents=True)
    (search / "capacity.txt").write_text("accelerator=resnet50_a100\ntiers=local\nmost=2\n")
    (tmp_path / "multirun" / "latest").symlink_to("capacity-1")
    assert status.main([]) == 1  # nothing ran yet
    out = capsys.readouterr().out
    assert "== local/storage_rate\nnot started" in out and "== local/prove" in out


def test_typos_are_refused_before_anything_is_written(cwd):
    """Today ``-m thread=1,2`` announced two cells, failed in Hydra and left multirun/latest at an empty
    campaign; ``+thread=4`` measured threads=1 and recorded thread: 4."""
    (cwd / "multirun").mkdir()
    (cwd / "multirun" / "latest").symlink_to("earlier")
    for args in (
        ["-m", "thread=1,2", "storage=local"],
        ["+thread=4", "storage=local", "platform.dry_run=true"],
    ):
        p = campaign(*args, cwd=cwd)
        assert (
            p.returncode == 2 and p.stderr == "campaign: unknown setting 'thread' (did you mean threads?)\n"
        ), p.stderr
        assert sorted(os.listdir(cwd)) == ["multirun"] and os.listdir(cwd / "multirun") == ["latest"]
        assert os.readlink(cwd / "multirun" / "latest") == "earlier"
    # a sweep without -m: one line naming the command that runs it (Hydra's would be three, status 1)
    p = campaign("threads=1,2", "storage=local", cwd=cwd)
    assert p.returncode == 2 and p.stderr == (
        "campaign: threads=1,2 is a sweep: add -m to run each of its values as a cell "
        "(python -m campaign -m threads=1,2 storage=local)\n"
    ), p.stderr
    assert sorted(os.listdir(cwd)) == ["multirun"]


# item 6: the preset's file system against the root


def _fs(path) -> str:
    from jobs.observe.provenance import mount_of

    return mount_of(path).fs_type


def test_a_root_off_its_presets_file_system_is_refused_in_one_line(refusal, disk_root):
    fs = _fs(disk_root)
    assert fs not in ("lustre", "tmpfs")
    assert refusal("storage=lustre", f"storage.root={disk_root}") == (
        f"storage=lustre needs its root on lustre, but storage.root={disk_root} is on {fs}: "
        f"give a folder on lustre, or storage=local for a folder on {fs}; "
        "to measure it anyway under lustre's name: storage.fs_check=false "
        "(recorded; the report judges no claim of the paper on it)"
    )
    assert f"storage.root={disk_root} is on {fs}" in refusal("storage=tmpfs", f"storage.root={disk_root}")
    line = refusal(
        "workload=checkpoint", "storage@checkpoint.slow=tmpfs", f"checkpoint.slow.root={disk_root}"
    )
    assert line.startswith(
        f"storage@checkpoint.slow=tmpfs needs its root on tmpfs, but checkpoint.slow.root={disk_root}"
    )
    # the opt-in, recorded in the cell's config
    assert refusal("storage=lustre", f"storage.root={disk_root}", "storage.fs_check=false") is None
    assert compose_cell(["storage=lustre", "storage.fs_check=false"]).storage.fs_check is False
    # presets that take any file system, and tmpfs on tmpfs
    assert refusal("storage=local", f"storage.root={disk_root}") is None
    assert refusal("storage=ssd", f"storage.root={disk_root}") is None
    if _fs("/dev/shm") == "tmpfs":
        assert refusal("storage=tmpfs") is None
    # a dry run for Slurm's nodes: the cluster's Lustre is not on the workstation that previews it (checked
    # when it runs)
    assert (
        refusal("storage=lustre", f"storage.root={disk_root}", "platform=slurm", "platform.dry_run=true")
        is None
    )


def test_the_opt_in_keeps_the_cell_id():
    from jobs import plan

    assert plan.id_of(compose_cell(["storage.fs_check=false"])) == plan.id_of(compose_cell([]))


def test_a_lustre_preset_on_ext4_is_refused_before_anything_is_written(cwd, disk_root):
    p = campaign(
        "storage=lustre", f"storage.root={disk_root}", "dataset.num_images=8", "batch_size=8", cwd=cwd
    )
    assert (
        p.returncode == 2
        and p.stderr.count("\n") == 1
        and "storage=lustre needs its root on lustre" in p.stderr
    )
    assert os.listdir(cwd) == [] and not (disk_root / "iocampaign").exists()


def _lustre_rows(fs_type: str):
    rows = []
    for threads, x in {1: 1.0, 2: 1.98, 4: 3.9, 8: 7.5}.items():
        for run in (1, 2, 3):
            row = {
                "workload": "microbench",
                "kind": "microbench",
                "pipeline": "decode_resize",
                "storage": "lustre",
                "threads": threads,
                "batch_size": 64,
                "prefetch": 0,
                "run": run,
                "cache_state": "cold",
                "images_per_s": 100.0 * x,
                "device_read_ratio": 1.0,
                "cpu_share": 0.30,
                "cpu_cores_busy": 0.6,
                "cpu_cores_usable": 2,
                "device_busy": 0.97,
                "fs_type": fs_type,
            }
            row["bound"], row["bound_reason"] = bounds.label(row)
            rows.append(row)
    return pd.DataFrame(rows).reindex(columns=tables.results_frame(tables.Collected(folder=".")).columns)


def test_rows_labelled_lustre_that_read_ext4_are_not_judged_against_the_paper():
    base = pd.DataFrame(columns=["storage", "measure", "mb_per_s"])
    on_lustre = compare.claims_frame(_lustre_rows("lustre"), base).set_index("id")
    assert on_lustre.loc["lustre_speedup_8", "status"] == compare.REPRODUCED
    off = compare.claims_frame(
        _lustre_rows("ext4"), base, {"lustre": {"fs_types": ["lustre"], "fs_check": False}}
    )
    off = off.set_index("id")
    assert off.loc["lustre_speedup_8", "status"] == compare.NOT_COMPARABLE
    assert "storage=lustre on ext4 (not lustre)" in off.loc["lustre_speedup_8", "measured_from"]
    # records written before tiers declared their file system: the preset says it
    assert (
        compare.claims_frame(_lustre_rows("ext4"), base).set_index("id").loc["lustre_speedup_8", "status"]
        == compare.NOT_COMPARABLE
    )
