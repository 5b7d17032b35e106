"""Bad input: one clear line naming the setting, a non-zero exit, nothing left that looks like a result."""

import os
import re
from pathlib import Path

import pytest

from support.commands import campaign
from support.files import make_jpegs

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


def test_a_folder_on_another_file_system_than_its_tier(cwd, tmp_path):
    """Images on tmpfs with storage.root on the disk would be read from memory and labelled storage=local."""
    import shutil
    import tempfile

    shm = Path(tempfile.mkdtemp(prefix="iocampaign-test-", dir="/dev/shm"))
    try:
        make_jpegs(shm / "data", 8)
        line = _fails_with(
            cwd,
            f"dataset.path={shm / 'data'} is on tmpfs",
            "dataset.source=folder",
            f"dataset.path={shm / 'data'}",
            f"storage.root={tmp_path}",
            "batch_size=4",
            "repeats=1",
        )
        assert "would read tmpfs and be labelled storage=local" in line
    finally:
        shutil.rmtree(shm)
    make_jpegs(tmp_path / "img", 8)
    line = _fails_with(
        cwd,
        "storage=emulated_ssd is a tier the tool builds",
        "storage=emulated_ssd",
        "dataset.source=folder",
        f"dataset.path={tmp_path / 'img'}",
        "batch_size=4",
        "repeats=1",
    )
    assert "storage@stage=emulated_ssd" in line


def test_dataset_path_missing(cwd, tmp_path):
    _fails_with(cwd, "dataset.path", "dataset.source=folder", f"dataset.path={tmp_path / 'nope'}", *TINY)


@pytest.mark.parametrize(
    "value,expected",
    [
        ("0", "threads=0 must be a positive"),
        ("-2", "threads=-2 must be a positive"),
        ("abc", "threads=abc is not a number"),
    ],
)
def test_bad_threads(cwd, value, expected):
    _fails_with(cwd, expected, f"threads={value}", *TINY)


def test_batch_larger_than_dataset(cwd):
    _fails_with(
        cwd, "batch_size=64 is larger than the dataset (32 images", "dataset.num_images=32", "batch_size=64"
    )


@pytest.mark.parametrize(
    "arg,expected",
    [
        ("storage=nvme", "unknown storage 'nvme' (in 'storage=nvme'); valid: "),
        ("storage=SSD", "unknown storage 'SSD' (in 'storage=SSD'; did you mean storage=ssd?); valid: "),
        (
            "workload=alexnetz",
            "unknown workload 'alexnetz' (in 'workload=alexnetz'; did you mean workload=alexnet?)",
        ),
    ],
)
def test_unknown_names_list_the_valid_ones(cwd, arg, expected):
    line = _fails_with(cwd, expected, arg)
    assert "valid:" in line


def test_bad_cell_in_a_sweep_stops_it_before_anything_runs(cwd):
    line = _fails_with(cwd, "threads=0 must be a positive", "-m", "threads=1,0", *TINY)
    assert "nothing was run" in line


def test_a_sweep_beside_an_experiment_preset_that_is_a_multirun_needs_no_m(cwd):
    """The figure presets set ``hydra.mode: MULTIRUN``, and docs/campaigns.md widens them without ``-m``
    (``+experiment=fig8 storage=emulated_hdd,emulated_ssd``): before, that was refused as a sweep without
    ``-m``. A sweep without ``-m`` and without such a preset is still refused (above)."""
    p = campaign(
        "+experiment=fig8", "storage=local,tmpfs", "dataset.num_images=64", "platform.dry_run=true", cwd=cwd
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "storage=local" in p.stdout and "storage=tmpfs" in p.stdout, p.stdout[-2000:]
    assert _leftovers(cwd) == []


def test_wrong_type_names_the_setting(cwd):
    p = campaign("batch_size=many", cwd=cwd)
    assert p.returncode != 0 and "batch_size" in p.stderr
    assert _leftovers(cwd) == []


@pytest.mark.parametrize(
    "args, expected",
    [
        (("-m", "storage@stage=none,tmpfs", "stage.root=/tmp"), "stage is null where storage@stage=none"),
        (("storage.emulate.read_iops=fast",), "storage=local is not an emulated tier"),
        (("storage=emulated_hdd", "storage.emulate.read_iops=-5"), "read_iops=-5 must be a positive number"),
        (
            ("storage=emulated_hdd", "storage.emulate.read_iops=0"),
            "(storage.emulate.read_iops=null: no limit)",
        ),
        (("dataset.shard_mb=nan",), "dataset.shard_mb=nan must be positive"),
        (
            ("storage=modeled_lustre", "storage.model.device=tape"),
            "storage.model.device=tape is not modelled; modelled devices: hdd, lustre",
        ),
        (
            ("storage=modeled_lustre", "storage.model.stripe_count=300"),
            "storage.model.stripe_count=300 must be 1..osts (248)",
        ),
        (("shuffle=none", "shuffle_buffer=8"), "shuffle_buffer=8 has no effect with shuffle=none"),
        (
            ("workload=readonly", "platform.tasks_per_node=8", "dataset.num_images=4", "batch_size=1"),
            "each of the 8 tasks would read 0 of the 4 images",
        ),
        (
            ("prefetch_to=device", "prefetch=1"),
            "prefetch_to=device: workload=microbench has no training device",
        ),
        (("workload=alexnet_small", "prefetch_to=device"), "prefetch_to=device needs prefetch=1 or more"),
        (
            ("workload=alexnet_small", "workload.compute_only_steps=-1"),
            "workload.compute_only_steps=-1 must be 0",
        ),
        (
            ("trace.runs=extra",),
            "trace.runs=extra names the runs trace.posix=true traces; add trace.posix=true",
        ),
        (("trace.posix=true", "trace.runs=first"), "trace.runs=first is not one of all, extra"),
        (
            ("workload=emulated",),
            "workload=emulated emulates an accelerator: choose its profile with accelerator=<name>",
        ),
        (("workload=emulated", "accelerator=resnet50_a100"), "workload=emulated needs prefetch=1 or more"),
        (
            ("workload=emulated", "accelerator=resnet50_a100", "prefetch=2", "dataset.num_images=100"),
            "workload=emulated needs 2 batches a run (the first is left out): "
            "a run would get 1 of batch_size=64",
        ),
    ],
)
def test_settings_that_were_accepted_or_gave_a_traceback(cwd, args, expected):
    """Each was accepted, failed at run time or gave Hydra's traceback (reliability round 2)."""
    _fails_with(cwd, expected, *args)


def test_a_file_where_the_tool_keeps_its_folders_is_refused_before_anything_runs(cwd, tmp_path):
    for sub in ("iocampaign", "iocampaign/datasets/converted", "iocampaign/staged"):
        root = tmp_path / sub.replace("/", "_")
        (root / sub).parent.mkdir(parents=True, exist_ok=True)
        (root / sub).write_text("the user's")
        _fails_with(cwd, f"{root / sub} is not a folder", f"storage.root={root}", *TINY)
        assert (root / sub).read_text() == "the user's"


def test_a_stage_on_the_device_of_the_data_is_refused(cwd, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "copy").mkdir()
    _fails_with(
        cwd,
        "is the tier the data is on",
        f"storage.root={tmp_path / 'data'}",
        "storage@stage=ssd",
        f"stage.root={tmp_path / 'copy'}",
        *TINY,
    )


@pytest.mark.cells
def test_a_dry_run_on_this_machine_shows_the_plan_and_writes_nothing(cwd, tmp_path):
    """platform.dry_run=true was ignored off Slurm: the 'dry run' generated the data and ran the cells."""
    root = tmp_path / "root"
    root.mkdir()
    p = campaign("-m", "threads=1,2", "platform.dry_run=true", f"storage.root={root}", *TINY, cwd=cwd)
    assert p.returncode == 0 and "dry run: 2 cells would run here" in p.stdout, p.stderr
    p = campaign("platform.dry_run=true", f"storage.root={root}", *TINY, cwd=cwd)
    assert p.returncode == 0 and "dry run: 1 cell would run here" in p.stdout, p.stderr
    # without -m too: the data it needs and its time, as the README says of any command
    assert re.search(r"threads=1 ≈ \d+ s(ec)? \(generating ≈ \d+ s\)", p.stdout), p.stdout
    assert re.search(r"\d+ synthetic images", p.stdout) and "estimated time ≈" in p.stdout, p.stdout
    p = campaign(
        "+experiment=paper",
        "--scale",
        "ci",
        "--tiers",
        "ssd",
        f"storage.root={root}",
        "platform.dry_run=true",
        cwd=cwd,
    )
    assert p.returncode == 0, p.stderr
    assert [x.split(":")[0] for x in p.stdout.splitlines() if x.startswith("[paper] ")] == [
        "[paper] table1",
        "[paper] fig4_fig5",
        "[paper] fig6_fig8",
        "[paper] fig7",
        "[paper] fig9_fig10",
    ]
    # one storage.root serves one tier: the study's checkpoints on that tier go under it too
    assert f"checkpoint.slow.root={root}" in p.stdout
    assert _leftovers(cwd) == [] and list(root.iterdir()) == []


def test_an_unknown_tier_for_the_lustre_bars_is_named(cwd):
    _fails_with(
        cwd,
        "campaign: --lustre 'nvme': unknown tier 'nvme'; valid: ",
        "+experiment=paper",
        "--scale",
        "ci",
        "--lustre",
        "nvme",
    )


def test_a_misspelt_tier_of_the_paper_study_gets_the_list_it_meant(cwd):
    _fails_with(
        cwd,
        "campaign: --tiers 'lcoal,tmpfs': unknown tier 'lcoal' (did you mean --tiers local,tmpfs?); valid: ",
        "+experiment=paper",
        "--scale",
        "ci",
        "--tiers",
        "lcoal,tmpfs",
    )


@pytest.mark.cells
def test_the_paper_study_checks_every_grid_before_the_first_runs(cwd, tmp_path):
    """Two real tiers and one storage.root: the last grid (checkpoints) cannot run; it used to fail after
    all the others had run (hours at full scale)."""
    study = ("+experiment=paper", "--scale", "ci", "--tiers", "ssd,hdd", f"storage.root={tmp_path}")
    said = "(grid fig9_fig10 of the paper study; no grid was run; the grids that can run here: --only "
    line = _fails_with(cwd, said, *study)
    assert "checkpoint.slow.root is not set" in line and "platform.dry_run" not in line
    # the line names the grids that can run here, and the study of those plans as it says
    only = re.search(r"; the grids that can run here: --only ([\w,]+)\)$", line)
    assert only and "fig9_fig10" not in only[1] and only[1].startswith("table1,fig4_fig5,"), line
    p = campaign(*study, "--only", only[1], "platform.dry_run=true", cwd=cwd)
    assert p.returncode == 0 and "[paper] fig9_fig10" not in p.stdout, p.stderr[-2000:]
    assert _leftovers(cwd) == []


@pytest.mark.parametrize(
    "arg,expected",
    [
        ("cache=lukewarm", "expected one of [cold, warm]"),
        ("prefetch_to=gpu", "expected one of [host, device]"),
        ("seed=abc", "seed=abc"),
        ("checkpoint.target=nvme", "checkpoint.target=nvme"),
        ("batch_size=4,many", "batch_size=many"),
    ],
)
def test_wrong_types_give_one_line_and_exit_2(cwd, arg, expected):
    p = campaign(arg, cwd=cwd)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 2 and len(lines) == 1 and expected in lines[0], p.stderr
    assert _leftovers(cwd) == []


@pytest.mark.parametrize("given", ["pytorch", "tensorflow,jax", ""])
def test_the_paper_study_needs_tensorflow_among_its_frameworks(cwd, given):
    p = campaign("+experiment=paper", "--scale", "ci", "--frameworks", given, cwd=cwd)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 2 and len(lines) == 1 and f"--frameworks {given}: give tensorflow" in lines[0], (
        p.stderr
    )
    assert _leftovers(cwd) == []


@pytest.mark.parametrize("framework", ["tensorflow", "pytorch"])
def test_a_checkpoint_cell_that_would_write_no_checkpoint_is_refused(cwd, framework):
    """256 images at batch 64 are 4 steps: checkpoint.every=20 would measure nothing and restore nothing."""
    _fails_with(
        cwd,
        "checkpoint.every=20: the run trains 4 steps (256 images at batch_size=64",
        "workload=checkpoint",
        f"framework={framework}",
        "dataset.num_images=256",
        "checkpoint.restore=true",
    )
