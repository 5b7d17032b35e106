"""A dry run of a cluster campaign where the user is: a machine without Slurm's commands, without the
nodes' tools (fio) and without the cluster's folders. It prints the cells and the sbatch scripts
(submitit's own builder, no live cluster), says in one line what the nodes check, refuses nothing about
the cluster, and creates nothing. Real runs and local dry runs keep every check."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from campaign import errors, validate
from campaign.slurm import preview, sbatch, submit
from jobs.schema import PlatformConf
from support.paths import ROOT

NOT_HERE = ("srun", "sbatch", "squeue", "sacct", "sinfo", "scancel", "scontrol", "salloc", "fio", "ior")
CLUSTER = "/cfs/klemming/scratch/u/me"  # the cluster's Lustre folder: not on this machine
TEGNER = ["platform=tegner", "platform.account=2024-1-23", f"storage.root={CLUSTER}", "platform.dry_run=true"]
USERS_FILE = b"my notes\n\x00\xff kept byte for byte\n"


def laptop_path(folder: Path) -> str:
    """A PATH as a laptop has it: every command of this one's, but no Slurm command, fio or ior (CI installs
    them; the test must still see the machine without them)."""
    folder.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep) + [str(Path(sys.executable).parent)]:
        for cmd in Path(d).iterdir() if os.path.isdir(d) else ():
            if cmd.name not in NOT_HERE and not (folder / cmd.name).exists():
                (folder / cmd.name).symlink_to(cmd)
    path = str(folder)
    assert not any(shutil.which(c, path=path) for c in NOT_HERE) and shutil.which("python3", path=path)
    return path


def run_on_laptop(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path, dict]:
    """``python -m campaign *args`` in a folder holding a user's file, with a laptop's PATH and its own HOME
    and TMPDIR (so that anything written there shows)."""
    cwd, home, tmp = tmp_path / "cwd", tmp_path / "home", tmp_path / "tmp"
    for d in (cwd, home, tmp):
        d.mkdir()
    (cwd / "notes.txt").write_bytes(USERS_FILE)
    env = {
        "PATH": laptop_path(tmp_path / "bin"),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "PYTHONPATH": str(ROOT),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "LANG": "C.UTF-8",
    }
    p = subprocess.run(
        [sys.executable, "-m", "campaign", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return p, cwd, {"home": home, "tmp": tmp}


def created_nothing(cwd: Path, private: dict) -> None:
    assert [p.name for p in cwd.iterdir()] == ["notes.txt"] and (cwd / "notes.txt").read_bytes() == USERS_FILE
    assert not any(private["home"].iterdir()) and not any(private["tmp"].iterdir())
    assert not Path("/cfs").exists()


def test_the_issues_cluster_dry_run_on_a_machine_without_slurm(tmp_path):
    p, cwd, private = run_on_laptop(tmp_path, "-m", "threads=1,2,4,8", "storage=lustre", *TEGNER)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr and "srun" not in p.stderr
    out = p.stdout.splitlines()
    assert out[0].startswith("dry run: 4 cells would be submitted as one Slurm array")
    for line in ("#SBATCH --account=2024-1-23", "#SBATCH --array=0-3%1", "#SBATCH --partition=main"):
        assert line in out, line
    told = [x for x in out if x.startswith("not checked on this machine")]
    assert len(told) == 1 and f"storage.root={CLUSTER} exists, is writable" in told[0]
    assert "checked when it runs" in told[0]
    # the script names no Python of this machine's: the login node's, as python, and says so
    assert sys.executable not in p.stdout and str(ROOT / ".venv") not in p.stdout
    assert any(x.startswith("srun ") and " python -u -m submitit.core._submit " in x for x in out)
    assert any("platform.python=null" in x and "name the nodes' one with platform.python" in x for x in out)
    created_nothing(cwd, private)


def test_the_paper_study_dry_run_needs_no_fio_here(tmp_path):
    out = tmp_path / "study"
    p, cwd, private = run_on_laptop(
        tmp_path, "+experiment=paper", "--scale", "ci", "--only", "table1", "--out", str(out), *TEGNER
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "#SBATCH --account=2024-1-23" in p.stdout.splitlines()
    told = [x for x in p.stdout.splitlines() if x.startswith("not checked on this machine")]
    assert len(told) == 1 and "fio or ior on PATH (workload=baseline)" in told[0]
    # Table I's sequential test file (0.02 GB at --scale ci) is in the data size, and the study says its total
    assert "with workload=baseline's 20 MB sequential test file" in p.stdout
    assert re.match(r"paper study: \d+ cells in 1 grid; estimated time", p.stdout.splitlines()[-1])
    assert not out.exists()
    created_nothing(cwd, private)


def test_an_object_store_over_two_nodes_dry_run_says_what_starts_on_them(tmp_path):
    """``storage=s3 platform.nodes=2`` where the user is (no Slurm, no cluster folder): the plan and its
    scripts, and the one line says that each node starts its part of the store, on its cluster address."""
    p, cwd, private = run_on_laptop(tmp_path, "-m", "storage=s3", "platform.nodes=2", "threads=1,2", *TEGNER)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.stdout.startswith("dry run: 2 cells would be submitted") and "#SBATCH --nodes=2" in p.stdout
    told = [x for x in p.stdout.splitlines() if x.startswith("not checked on this machine")]
    assert len(told) == 1 and "SeaweedFS server starts a part on each of the 2 nodes" in told[0], told
    assert "cluster address" in told[0]
    created_nothing(cwd, private)


def test_each_stores_dry_run_names_the_server_of_its_own_service(tmp_path):
    """``storage=s3,azure`` for a cluster: the one line names each store's own embedded server and what it
    needs on the node (before, an Azure cell's said SeaweedFS)."""
    p, cwd, private = run_on_laptop(tmp_path, "-m", "storage=s3,azure", *TEGNER)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    (told,) = [x for x in p.stdout.splitlines() if x.startswith("not checked on this machine")]
    assert "storage=s3: the embedded SeaweedFS server starts on the node (weed beside its Python" in told
    assert "storage=azure: the embedded Azurite server starts on the node (Azurite" in told
    created_nothing(cwd, private)


def test_only_a_dry_run_for_slurm_leaves_the_tier_to_the_nodes(planned_cell, tmp_path):
    gone = str(tmp_path / "not-here")
    validate.check(
        planned_cell("storage=lustre", f"storage.root={gone}", "platform=slurm", "platform.dry_run=true")
    )
    # a real run, a local dry run: checked
    for refused in (["platform=slurm"], ["platform.dry_run=true"], []):
        with pytest.raises(errors.ConfigError, match=f"storage.root={gone} does not exist"):
            validate.check(planned_cell("storage=lustre", f"storage.root={gone}", *refused))
    # what the settings say: still checked
    with pytest.raises(errors.ConfigError, match="storage.root is not set"):
        validate.check(planned_cell("storage=lustre", "platform=slurm", "platform.dry_run=true"))


def test_a_real_run_still_needs_fio(planned_cell, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", laptop_path(tmp_path / "bin"))
    base = ("workload=baseline", "storage=local", f"storage.root={tmp_path}", "platform=slurm")
    validate.check(planned_cell(*base, "platform.dry_run=true"))
    with pytest.raises(errors.ConfigError, match="needs ior or fio on PATH"):
        validate.check(planned_cell(*base))


def _platform(**kw):
    from omegaconf import OmegaConf

    return OmegaConf.merge(OmegaConf.structured(PlatformConf(name="slurm", kind="slurm")), kw)


NODES_PYTHON = "/cfs/klemming/home/u/me/iocampaign/.venv/bin/python"


@pytest.mark.parametrize(
    "count,nodes,per_node,after,python",
    [(1, 1, 1, None, None), (3, 1, 1, None, NODES_PYTHON), (2, 2, 2, "41", None)],
)
def test_the_preview_is_the_script_submitit_submits(
    tmp_path, monkeypatch, count, nodes, per_node, after, python
):
    """Pins submitit's private script builder: the preview, built without srun, equals what a real
    SlurmExecutor (srun on PATH) writes for the same parameters and array, as its array submission does;
    with ``platform.python`` both run the nodes' Python."""
    from submitit.slurm.slurm import SlurmExecutor

    platform = _platform(
        partition="debug", account="acc", setup=["module load cuda/9.1"], gpus_per_node=1, python=python
    )
    monkeypatch.setenv("PATH", str(tmp_path))
    assert shutil.which("srun") is None
    shown_python, which = preview.shown_python(platform)
    assert (shown_python, NODES_PYTHON in which) == (("python", False) if python is None else (python, True))
    shown = sbatch.sbatch_text(
        tmp_path / submit.SUBMITIT_DIR,
        submit.parameters(tmp_path, platform, nodes, per_node, after),
        count,
        submit.nodes_python(platform),
    )
    (tmp_path / "srun").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "srun").chmod(0o755)
    ex = submit.executor(tmp_path, platform, nodes, per_node, after)
    if count > 1:  # what SlurmExecutor._internal_process_submissions does for an array
        ex = SlurmExecutor(ex.folder, ex.max_num_timeout, python=ex.python)
        ex.update_parameters(**submit.parameters(tmp_path, platform, nodes, per_node, after))
        ex.parameters["map_count"] = count
    assert shown == ex._make_submission_file_text(ex._submitit_command_str, "uid")
    assert "#SBATCH --account=acc" in shown and ("#SBATCH --array=0-2%1" in shown) == (count == 3)
    assert ("#SBATCH --dependency=afterany:41" in shown) == bool(after)
    assert f" {python or sys.executable} -u -m submitit.core._submit " in shown
    assert not (tmp_path / submit.SUBMITIT_DIR).exists()
