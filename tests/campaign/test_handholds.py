"""A new user's handholds: a quiet terminal (TensorFlow's start-up lines kept in the cell's log, from every
process), a help that lists the presets and the study's options, a command that shows and frees the tool's
disk use, and the small refusals and labels a first hour trips over."""

import os
import subprocess

import pytest

from support.commands import as_typed, noise, run_module
from support.files import tmpfs
from support.paths import ROOT
from support.skips import needs_fio


def _run(module: str, *args: str, cwd, timeout: int = 600) -> subprocess.CompletedProcess:
    return as_typed(module, *args, cwd=cwd, timeout=timeout)


def _quiet_campaign(tmp_path, *overrides: str):
    """``python -m campaign -m <overrides>`` on local disk, as a user types it; asserts it ends well and
    prints no line of TensorFlow's, CUDA's or absl's. Returns its sweep folder."""
    root = tmp_path / "root"
    root.mkdir()
    out = tmp_path / "c"
    p = _run(
        "campaign",
        "-m",
        *overrides,
        "storage=local",
        f"storage.root={root}",
        f"hydra.sweep.dir={out}",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert noise(p) == [], noise(p)
    return out


@pytest.mark.cells
def test_a_multi_task_cell_prints_no_tensorflow_start_up_lines(tmp_path):
    """The campaign's process and each task process import TensorFlow: their start-up lines (absl's, oneDNN's,
    the CUDA stubs', cuInit's) go to the cell's tensorflow_startup.log, none to the terminal."""
    out = _quiet_campaign(
        tmp_path,
        "workload=microbench",
        "platform.tasks_per_node=2",
        "dataset.num_images=32",
        "batch_size=8",
        "repeats=1",
        "warmup=0",
    )
    log = (out / "0" / "tensorflow_startup.log").read_text()
    assert log.count("absl::InitializeLog") >= 3  # the campaign's own import and both tasks'


@pytest.mark.cells
def test_the_quick_starts_campaign_prints_no_line_of_tensorflows_or_cudas_with_either_framework(tmp_path):
    """The README's micro-benchmark with both frameworks (``framework=pytorch,tensorflow``, the PyTorch cell
    first), at 64 images and 3 threads (3 workers on 2 cores, which PyTorch warns of): nothing of
    TensorFlow's, CUDA's or absl's on the terminal, and no Python warning of PyTorch's. The PyTorch cell does
    not import TensorFlow at all (it did, to describe the accelerator, and printed its start-up lines and
    cuInit's error: PyTorch describes it now); what TensorFlow logs during a cell's runs goes to the cell's
    native.log."""
    import json

    quick_start = ("framework=pytorch,tensorflow", "threads=3", "dataset.num_images=64", "repeats=1")
    out = _quiet_campaign(tmp_path, *quick_start, "warmup=0")
    torch_cell, tf_cell = (json.loads((out / n / "record.json").read_text()) for n in ("0", "1"))
    assert torch_cell["config"]["framework"]["name"] == "pytorch"
    # each cell's accelerator as its own framework sees it (PyTorch's without importing TensorFlow)
    seen = [c["provenance"]["accelerator"] for c in (torch_cell, tf_cell)]
    assert [a["framework"] for a in seen] == ["PyTorch", "TensorFlow"] and all(a["gpus"] == [] for a in seen)
    assert not (out / "0" / "tensorflow_startup.log").exists()  # TensorFlow first imported by cell 1
    assert "absl::InitializeLog" in (out / "1" / "tensorflow_startup.log").read_text()
    assert not (out / "0" / "native.log").exists() or "absl" not in (out / "0" / "native.log").read_text()


@needs_fio
@pytest.mark.cells
def test_a_benchmark_prints_no_line_of_tensorflows_during_its_runs(tmp_path):
    """benchmarks.readonly_vs_fio on TFRecord shards: TensorFlow logs a line per TFRecordDataset it makes
    (``tf_record_dataset_op.cc:390] … buffer_size is unspecified``) during the runs, after its import; it
    goes to the benchmark's native.log under the storage root, and the terminal has only the benchmark's
    table. (The PyTorch side prints nothing of TensorFlow's, as the campaign above shows.)"""
    root = tmp_path / "root"
    root.mkdir()
    args = ["--storage-root", str(root), "--dataset", "caltech101", "--num-images", "32", "--threads", "1"]
    args += ["--repeats", "1", "--formats", "tfrecord", "--shard-mb", "1", "--frameworks", "tensorflow"]
    p = _run("benchmarks.readonly_vs_fio", *args, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert noise(p) == [], noise(p)
    # the table's one row, between its header and the legend of its shared columns (benchmarks.rounds)
    assert [x.split()[:3] for x in p.stdout.splitlines()[2:-1]] == [["tfrecord", "1", "tensorflow"]]
    assert "tf_record_dataset_op.cc" in (root / "iocampaign" / "native.log").read_text()


def test_help_lists_the_presets_the_settings_the_study_and_the_other_commands(tmp_path):
    """--help is Hydra's own (conf/hydra/help/campaign.yaml): every preset of conf/<group>/, none of the
    ConfigStore's schemas or the workloads' default sets, the paper study's options, the commands, the
    docs."""
    p = _run("campaign", "--help", cwd=tmp_path)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    text = p.stdout
    assert "_schema" not in text and "default_for_" not in text
    for group in (
        "workload",
        "storage",
        "dataset",
        "platform",
        "accelerator",
        "checkpoint_model",
        "experiment",
    ):
        line = " ".join(
            x for x in text.splitlines() if x.strip().startswith(f"{group}:") or x.startswith(" " * 20)
        )
        for preset in (ROOT / "conf" / group).glob("*.yaml"):
            assert preset.stem.startswith("default_for_") or preset.stem in line, (group, preset.stem)
    for want in (
        "+experiment=paper",
        "--scale",
        "--tiers",
        "--lustre",
        "--out",
        "--only",
        "threads=1",
        "repeats=5",
        "campaign.capacity",
        "campaign.status",
        "campaign.cache",
        "python -m analysis",
        "analysis compare",
        "analysis profile",
        "docs/",
        "platform.dry_run=true",
    ):
        assert want in text, want
    assert len(text.splitlines()) < 70 and list(tmp_path.iterdir()) == []


def test_the_cache_command_shows_and_frees_only_the_tools_own_folders(tmp_path):
    """python -m campaign.cache list|purge on a root with a dataset, a converted set, a staged copy and a
    modelled tier's backing folder that is mounted: purge removes the first three, keeps the mounted one,
    never follows a link, and leaves the user's own files (beside the tool's folder and inside it) as they
    were."""
    from jobs import owned

    root = tmp_path / "root"
    base = owned.tool_folder(root)
    made = [
        base / "datasets" / "imagenet_subset-0123456789",
        base / "datasets" / "converted" / "x-tfrecord-32",
        base / "staged" / "x-files-abcd1234-k",
    ]
    for d in made:
        d.mkdir(parents=True)
        (d / "0001.jpg").write_bytes(os.urandom(50_000))
    outside = tmp_path / "mine"
    outside.mkdir()
    (outside / "precious.txt").write_bytes(b"my own data\n" * 1000)
    (made[0] / "link-to-mine").symlink_to(outside / "precious.txt")
    (base / "datasets" / "linked-set").symlink_to(outside)
    (base / "datasets" / "notes.txt").write_text("mine\n")
    (root / "beside.txt").write_text("mine too\n")
    (base / "tiers").mkdir()
    # an emulated tier's image, beside the marker that says the tool made it
    image = base / "tiers" / "emulated_x.img"
    image.write_bytes(os.urandom(20_000))
    (base / "tiers" / "emulated_x.img.iocampaign").write_text("")
    (base / "tiers" / "yours.img").write_bytes(b"an image the tool did not make")  # no marker: not the tool's
    before = {
        p: p.read_bytes()
        for p in (
            outside / "precious.txt",
            base / "datasets" / "notes.txt",
            root / "beside.txt",
            base / "tiers" / "yours.img",
        )
    }
    with tmpfs(base / "tiers" / "modeled_x", "1m") as mounted:
        (mounted / "blob").write_bytes(b"x" * 1000)
        p = _run("campaign.cache", "list", "--root", str(root), cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        for d in made:
            assert str(d.relative_to(base)) in p.stdout, p.stdout
        assert "linked-set" not in p.stdout and "notes.txt" not in p.stdout and "mounted: kept" in p.stdout
        assert "tiers/emulated_x.img" in p.stdout and "yours.img" not in p.stdout and "in all" in p.stdout
        assert p.stdout.splitlines()[-1].endswith(f"|<path>}} --root {root}")  # the hint, with its root
        # a path it listed, purged as the hint says: its root is the path's own, no --root needed
        (tmp_path / "via").symlink_to(made[2])  # the same entry named through a link: refused, kept
        p = run_module("campaign.cache", "purge", str(tmp_path / "via"), cwd=tmp_path)
        assert p.returncode == 2 and "passes through a symbolic link" in p.stderr and made[2].is_dir(), (
            p.stderr
        )
        p = run_module("campaign.cache", "purge", str(made[2]), cwd=tmp_path)
        assert p.returncode == 0 and f"removed {made[2]}" in p.stdout and not made[2].exists(), (
            p.stdout + p.stderr
        )
        made.pop()
        p = run_module("campaign.cache", "list", "--root", str(tmp_path / "nowhere"), cwd=tmp_path)
        assert (p.returncode, p.stderr) == (
            2,
            f"campaign.cache: --root {tmp_path / 'nowhere'} is not a folder\n",
        )
        p = _run("campaign.cache", "purge", "--root", str(root), "nothing", cwd=tmp_path)
        assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and all(d.exists() for d in made), (
            p.stderr
        )
        p = _run("campaign.cache", "purge", "all", "--root", str(root), cwd=tmp_path)
        assert p.returncode == 0 and "freed" in p.stdout, p.stderr
        assert not any(d.exists() for d in made) and (mounted / "blob").read_bytes() == b"x" * 1000
        assert not image.exists() and not (base / "tiers" / "emulated_x.img.iocampaign").exists()
    assert (base / "datasets" / "linked-set").is_symlink() and {p: p.read_bytes() for p in before} == before
    assert sorted(x.name for x in outside.iterdir()) == ["precious.txt"]


def test_a_dry_run_names_the_preset_and_a_gpu_that_is_not_there_is_refused_at_planning(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    p = _run(
        "campaign",
        "-m",
        "workload=alexnet_small",
        "dataset.num_images=64",
        "storage=local",
        f"storage.root={root}",
        "platform.dry_run=true",
        f"hydra.sweep.dir={tmp_path / 'dry'}",
        cwd=tmp_path,
    )
    assert p.returncode == 0 and "#0: workload=alexnet_small " in p.stdout + p.stderr, p.stdout + p.stderr
    if os.path.isdir("/proc/driver/nvidia/gpus") or os.path.exists("/dev/kfd"):
        return  # a machine with a GPU runs it
    p = _run(
        "campaign",
        "workload=alexnet_small",
        "workload.device=gpu",
        "dataset.num_images=64",
        "storage=local",
        f"storage.root={root}",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert (
        p.returncode == 2 and len(lines) == 1 and "workload.device=gpu: this machine has no GPU" in lines[0]
    ), p.stderr
    # refused before any data was generated
    assert not (tmp_path / "run").exists() and not any(root.iterdir())
    # a Slurm dry run plans for the nodes, whose GPUs this machine cannot see
    p = _run(
        "campaign",
        "-m",
        "workload=alexnet_small",
        "workload.device=gpu",
        "platform=slurm",
        "platform.account=x",
        "platform.dry_run=true",
        "dataset.num_images=64",
        f"hydra.sweep.dir={tmp_path / 'slurm'}",
        cwd=tmp_path,
    )
    assert p.returncode == 0 and "no GPU" not in p.stderr, p.stderr[-2000:]


def test_analysis_refuses_a_baseline_campaign_without_baseline_cells(tmp_path):
    from jobs import plan

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        plan.write(tmp_path / name, [plan.PlannedCell(0, "0", ["threads=1"], "0123456789ab")])
    (tmp_path / "a" / "0").mkdir()
    before = sorted(tmp_path.rglob("*"))
    p = _run("analysis", str(tmp_path / "a"), "--baseline", str(tmp_path / "b"), cwd=tmp_path)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "has no completed workload=baseline cell" in lines[0], (
        p.stderr
    )
    assert sorted(tmp_path.rglob("*")) == before


def test_the_project_and_the_paper_can_be_cited():
    """CITATION.cff (CFF 1.2.0) cites the tool and, under references, the paper; the README gives its
    BibTeX."""
    import yaml

    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["title"] and cff["authors"] and cff["message"]
    paper = next(
        r
        for r in cff["references"]
        if r["title"] == "Characterizing Deep-Learning I/O Workloads in TensorFlow"
    )
    assert [a["family-names"] for a in paper["authors"]][:2] == ["Chien", "Markidis"] and paper[
        "year"
    ] == 2018
    assert "PDSW-DISCS" in paper["conference"]["name"] and "doi" not in paper  # the paper's text gives no DOI
    readme = (ROOT / "README.md").read_text()
    assert "@inproceedings{chien2018characterizing" in readme and "CITATION.cff" in readme
