"""Golden files for generated text: the dry run (cells and sbatch script), the results.csv header, the
keys of record.json and plan.json. A change shows as a diff; after checking it, rewrite the files with
UPDATE_GOLDEN=1 pytest tests/campaign/test_golden.py and say why in the commit.
"""

import json
import sys
from pathlib import Path

import pytest

from support import golden
from support.commands import campaign
from support.files import make_jpegs
from support.paths import ROOT

GOLDEN = Path(__file__).resolve().parent / "golden"


def same_as_golden(name: str, text: str) -> None:
    golden.same_as_golden(GOLDEN / name, text)


def test_dry_run_text_and_sbatch_script(tmp_path):
    p = campaign(
        "-m",
        "threads=1,2",
        "platform=slurm",
        "platform.dry_run=true",
        "platform.partition=debug",
        "platform.setup=[module load cuda/9.1]",
        "platform.python=/cfs/home/me/iocampaign/.venv/bin/python",  # the nodes': the same script anywhere
        "storage=tmpfs",
        "dataset.num_images=32",
        "batch_size=8",
        "hydra.sweep.dir=sweep",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    text = p.stdout.replace(str(tmp_path), "<cwd>").replace(sys.executable, "<python>")
    same_as_golden("dry_run.txt", text)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    base = tmp_path_factory.mktemp("golden")
    make_jpegs(base / "data", 8)
    out = base / "sweep"
    p = campaign(
        "-m",
        "workload=readonly",
        "threads=1,2",
        "dataset.source=folder",
        f"dataset.path={base / 'data'}",
        f"storage.root={base}",
        "repeats=1",
        "warmup=0",
        "batch_size=4",
        f"hydra.sweep.dir={out}",
        cwd=base,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return out


@pytest.mark.cells
def test_results_csv_header(sweep):
    same_as_golden("results_header.csv", (sweep / "results.csv").read_text().splitlines()[0] + "\n")


@pytest.mark.cells
def test_record_keys(sweep):
    rec = json.loads((sweep / "0" / "record.json").read_text())
    keys = {
        "record": sorted(rec),
        "run": sorted(rec["runs"][0]),
        "dataset": sorted(rec["dataset"]),
        "provenance": sorted(rec["provenance"]),
        "config": sorted(rec["config"]),
        "config.workload": sorted(rec["config"]["workload"]),
    }
    same_as_golden("record_keys.json", json.dumps(keys, indent=1) + "\n")


@pytest.mark.cells
def test_plan_json(sweep):
    plan = json.loads((sweep / "plan.json").read_text())
    plan["argv"] = ["<argv>"]
    for c in plan["cells"]:
        c["overrides"] = [o if "=/" not in o else o.split("=")[0] + "=<path>" for o in c["overrides"]]
        assert len(c["cell_id"]) == 12 and int(c["cell_id"], 16) >= 0
        c["cell_id"] = "<cell id: 12 hex digits of the config's hash>"  # the paths are in the hash
        # the resolved config the cell ran: the one its record keeps (paths of this machine in it)
        assert c["config"] == json.loads((sweep / c["dir"] / "record.json").read_text())["config"]
        c["config"] = "<the cell's resolved config, as its record.json keeps it>"
    same_as_golden("plan.json", json.dumps(plan, indent=2) + "\n")


def test_golden_files_are_tracked():
    assert sorted(p.name for p in GOLDEN.iterdir()) == [
        "dry_run.txt",
        "plan.json",
        "record_keys.json",
        "results_header.csv",
    ]
    assert ROOT in GOLDEN.parents
