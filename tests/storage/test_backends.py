"""A tier's kind of storage names a back-end (a module of jobs/storage/backends/) that says what the tier can
do: every preset's kind has one, planning asks it (multi-node reach, settings of another kind), and one
outside the tool is a module of its own."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from jobs import records
from jobs.errors import ConfigError
from jobs.storage import backends
from support.commands import python_env, run_module
from support.docs import code_blocks
from support.paths import ROOT


def test_every_kind_and_every_preset_has_a_back_end():
    assert list(backends.BACKENDS)[:4] == ["block", "network", "memory", "object"]  # the built-in ones first
    presets = sorted((ROOT / "conf" / "storage").glob("*.yaml"))
    assert len(presets) >= 10
    for preset in presets:
        kind = (yaml.safe_load(preset.read_text()) or {}).get("kind", "block")
        assert backends.get(kind).kind == kind, preset.name
    with pytest.raises(ConfigError, match=r"^storage.kind=tape is not a kind of storage; choose one of blo"):
        backends.get("tape")


def test_only_a_request_store_serves_itself_and_only_without_an_endpoint():
    class Tier:
        endpoint = None

    st = Tier()
    assert backends.get("object").embedded(st)
    st.endpoint = "http://127.0.0.1:9000"
    assert not backends.get("object").embedded(st)
    assert not any(backends.get(k).embedded(Tier()) for k in ("block", "network", "memory"))


def test_planning_asks_the_back_end_where_a_setting_and_a_node_count_belong(refusal, tmp_path: Path):
    line = refusal("storage=tmpfs", "storage.prefix=runs/")
    assert line == (
        "storage.prefix=runs/: storage=tmpfs is of kind memory; prefix belongs to a tier of kind object "
        "(storage=s3)"
    )
    line = refusal("platform=slurm", "platform.nodes=2", "storage=local", f"storage.root={tmp_path}")
    assert line is not None and "is one machine's; a multi-node cell needs a shared file system" in line, line
    assert "storage=shared" in line
    shared = refusal("platform=slurm", "platform.nodes=2", "storage=shared", f"storage.root={tmp_path}")
    assert shared is None or "one machine's" not in shared, shared


@pytest.mark.cells
def test_the_kind_of_docs_extending_runs_as_written(disk_root: Path):
    """docs/extending.md's kind of storage, copied as a user copies it: its module and its preset into
    ~/my_backends, its command run as written (HOME is the test's folder, the root a folder on this disk,
    which is ext4). Its cells run, recorded of its kind and proven cold by the counted bytes; the analysis
    reads them without the module; a setting it does not have, a root on another file system and a kind no
    module declares are refused at planning in one line, and a cell on two nodes is not."""
    (module, _shortened), (preset,), (commands,) = (
        code_blocks("extending.md", "Adding a kind of storage", lang) for lang in ("python", "yaml", "sh")
    )
    home = disk_root / "home"
    (home / "my_backends" / "iocampaign_backends").mkdir(parents=True)
    (home / "my_backends" / "iocampaign_backends" / "san.py").write_text(module)
    (home / "my_backends" / "conf" / "storage").mkdir(parents=True)
    (home / "my_backends" / "conf" / "storage" / "san.yaml").write_text(preset)
    command = next(line for line in commands.splitlines() if line.startswith("PYTHONPATH=~"))
    env = {**python_env(HOME=str(home)), "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    env.pop("PYTHONPATH")  # the user's: the checkout is installed in the venv (make install)
    root = disk_root / "san"
    root.mkdir()

    def run(line: str, where: Path = root):
        return subprocess.run(
            ["bash", "-c", f"{line} storage.root={where} storage.fs_types=[ext4]"],
            cwd=disk_root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    sweep = disk_root / "sweep"
    p = run(f"{command} repeats=1 hydra.sweep.dir={sweep}")
    assert p.returncode == 0, p.stderr[-3000:]
    df = pd.read_csv(sweep / "results.csv")
    assert sorted(df["threads"]) == [1, 4] and set(df["storage"]) == {"san"}
    assert (df["images"] == 64).all() and (df["images_dropped"] == 0).all()
    assert set(df["cache_state"]) == {"cold"}
    cell = next(d for d in sweep.iterdir() if d.is_dir() and d.name.isdigit())
    assert records.read(cell / "record.json").config["storage"]["kind"] == "san"
    (sweep / "results.csv").unlink()
    p = run(f"python -m analysis {sweep} #")  # without the module on PYTHONPATH
    assert p.returncode == 0 and set(pd.read_csv(sweep / "results.csv")["storage"]) == {"san"}, p.stderr
    start = command.split(" storage=san ", 1)[0] + " storage=san "
    searchpath = command.split(" ")[-1]
    refused = f"{searchpath} hydra.run.dir={disk_root / 'refused'}"
    for args, said in (
        ("storage.bucket=mine", "storage.bucket=mine: storage=san is of kind san; bucket belongs to a tier"),
        ("storage.kind=tape", "storage.kind=tape is not a kind of storage; choose one of block, network, "),
    ):
        p = run(f"{start}{args} {refused}")
        assert p.returncode == 2 and said in p.stderr.strip().splitlines()[-1], p.stderr[-2000:]
    p = run(f"{start}{refused}", Path("/dev/shm"))
    said = "storage=san needs its root on ext4, but storage.root=/dev/shm is on tmpfs"
    assert p.returncode == 2 and said in p.stderr.strip().splitlines()[-1], p.stderr[-2000:]
    assert not (disk_root / "refused").exists()
    p = run(f"{start}platform=slurm platform.nodes=2 platform.dry_run=true {refused}")
    assert p.returncode == 0 and "(nothing was submitted)" in p.stdout, p.stderr[-2000:]


def test_a_module_of_iocampaign_backends_that_declares_no_kind_is_one_line(tmp_path: Path):
    """A user's module in ``iocampaign_backends`` without a ``BACKEND``: every command of the campaign
    ends in one line naming it, exit 2, before anything is planned, with nothing written."""
    own = tmp_path / "mine"
    (own / "iocampaign_backends").mkdir(parents=True)
    (own / "iocampaign_backends" / "notes.py").write_text("SIZE = 1\n")
    env = python_env(PYTHONPATH=f"{own}{os.pathsep}{ROOT}")
    cwd, root = tmp_path / "cwd", tmp_path / "root"
    cwd.mkdir()
    root.mkdir()
    # a root and a set of the test's own: were the module not seen, a run would write there, not under the
    # machine's default root (one did, 2 GB, while the tests' fork server had imported the back-ends early)
    small = [f"storage.root={root}", "dataset.num_images=16"]
    p = run_module("campaign", "-m", "threads=1,2", *small, cwd=cwd, env=env)
    said = "campaign: iocampaign_backends.notes declares no BACKEND (a jobs.storage.backends.backend.Backend)"
    assert p.returncode == 2 and p.stderr.strip() == said, p.stderr[-2000:]
    assert list(cwd.iterdir()) == [] and list(root.iterdir()) == []


# A kind of the user's that makes its runs cold its own way (its own log of what it evicted) and judges
# their cache itself, and has less space than the disk it sits on: the runner, the record and planning ask
# it, not the page cache's rules or the file system's free space.
OWN_KIND = """
import json
import os
from dataclasses import dataclass

from jobs.storage import cache
from jobs.storage.backends.backend import Backend


@dataclass(frozen=True)
class Quota(Backend):
    def space(self, st):
        folder, _ = super().space(st)
        return folder, float(os.environ["QUOTA_BYTES"])

    def evict(self, files, drop_caches=False):
        files = list(files)
        with open(os.environ["EVICTED_LOG"], "a") as f:
            f.write(json.dumps({"files": len(files), "drop_caches": drop_caches}) + "\\n")
        return super().evict(files, drop_caches)

    def cache_state(self, requested, fs_type, device_bytes, consumed):
        said = super().cache_state(requested, fs_type, device_bytes, consumed)
        return os.environ.get("QUOTA_SAYS") or (cache.UNKNOWN if said == cache.COLD else said)


BACKEND = Quota("quota", requests=False, every_node=False, evicts=True, sighted_only=False)
"""


@pytest.mark.cells
def test_a_kinds_own_eviction_cache_judgement_and_space_are_what_the_runs_and_planning_use(disk_root: Path):
    own = disk_root / "mine"
    (own / "iocampaign_backends").mkdir(parents=True)
    (own / "iocampaign_backends" / "quota.py").write_text(OWN_KIND)
    log = disk_root / "evicted.jsonl"
    root = disk_root / "tier"
    root.mkdir()
    env = python_env(PYTHONPATH=f"{own}{os.pathsep}{ROOT}", EVICTED_LOG=str(log), QUOTA_BYTES="1e12")
    tail = ("storage=local", "storage.kind=quota", f"storage.root={root}", "dataset.num_images=16")
    runs = ("batch_size=8", "warmup=0")

    def campaign(*args: str):
        return run_module("campaign", *args, cwd=disk_root, env=env)

    out = disk_root / "sweep"
    p = campaign("-m", *tail, *runs, "repeats=2", f"hydra.sweep.dir={out}")
    assert p.returncode == 0, p.stderr[-3000:]
    evicted = [json.loads(line) for line in log.read_text().splitlines()]
    assert evicted == [{"files": 16, "drop_caches": False}] * 2  # once before each run, the 16 images
    df = pd.read_csv(out / "results.csv")
    assert list(df["run"]) == [1, 2] and set(df["cache_state"]) == {"unknown"}
    assert (df["bytes_read_device"] >= df["bytes_consumed"]).all()  # cold by the counters: the kind said no
    # not a cache state: the run fails, naming the kind where the tier sits (here the stage the runs read)
    env["QUOTA_SAYS"] = "quota-judged"
    stage = disk_root / "stage"
    stage.mkdir()
    staged = ("storage=tmpfs", "storage@stage=local", f"stage.root={stage}", "stage.kind=quota")
    p = campaign(
        *staged, "dataset.num_images=16", *runs, "repeats=1", f"hydra.run.dir={disk_root / 'judged'}"
    )
    assert p.returncode == 1, p.stderr[-3000:]
    rec = records.read(disk_root / "judged" / "record.json")
    assert (
        rec.status == records.FAILED
        and "stage.kind=quota: its cache_state answered 'quota-judged'" in rec.error["message"]
    )
    assert not [f for f in stage.rglob("*") if f.is_file()]  # the staged copy removed all the same
    del env["QUOTA_SAYS"]
    env["QUOTA_BYTES"] = "1000"
    p = campaign(*tail, "dataset.num_images=4096", "platform.dry_run=true")
    said = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    assert p.returncode == 2, p.stderr
    assert (
        "synthetic images need ~" in said
        and "which has 1 kB free (its kind's space: storage.kind=quota)" in said
    )


def test_a_checkpoints_restore_is_made_cold_and_judged_by_its_tiers_kind(disk_root: Path, monkeypatch):
    """``checkpoint.restore=true`` asks the kind of the tier it reads back from, as the runs do: the user's
    kind above evicts the checkpoint's files and judges the restore, on real files and the page cache."""
    import numpy as np

    from jobs.workloads.checkpoint import restore
    from jobs.workloads.checkpoint import store as ckpt_store

    log = disk_root / "restore-evicted.jsonl"
    monkeypatch.setenv("EVICTED_LOG", str(log))
    kind: dict = {}
    exec(OWN_KIND, kind)  # the user's module, as the registry imports it
    folder = disk_root / "restore"
    folder.mkdir()
    weights = np.arange(1 << 20, dtype=np.float32)  # 4 MB, written as a framework's save writes it
    np.save(folder / "ckpt_t-2.data.npy", weights)
    ckpt_store.write_manifest(folder / "ckpt_t-2", step=2)
    saved = restore.Snapshot(2)
    saved[2] = [weights]

    def fresh(shape):
        return lambda prefix: [np.load(prefix.parent / (prefix.name + ".data.npy"))]

    (entry,) = restore.after_run([("fast", folder, kind["BACKEND"])], "ckpt_t", {}, saved, fresh)
    assert entry["tier"] == "fast" and entry["weights_equal"] is True
    assert entry["cache_state"] == "unknown"  # the kind's answer, where the page cache's rules say cold
    assert entry["bytes_read_device"] >= 0.9 * entry["bytes"]
    assert [json.loads(line) for line in log.read_text().splitlines()] == [{"files": 1, "drop_caches": False}]
