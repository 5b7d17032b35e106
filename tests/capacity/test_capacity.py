"""How many accelerators a tier can feed: the rate model, the search, and the whole search run for real
(emulated accelerators reading real files through the real pipeline, as local multi-task cells)."""

import os
import re
import shlex
import shutil

import pandas as pd
import pytest

from campaign.capacity import search as capacity
from jobs import records
from support.commands import campaign, run_module
from support.configs import TOY_SEARCHPATH
from support.paths import ROOT


def _inputs(**kw):
    base = dict(
        tier="local",
        accelerator="x",
        batch_size=64,
        step_time_s=0.151,
        profile_batch_size=64,
        au_threshold=0.9,
        tier_images_per_s=2000.0,
        tier_mb_per_s=220.0,
        core_images_per_s=300.0,
        cores=2,
        threads=1,
    )
    return capacity.Inputs(**{**base, **kw})


def test_one_accelerator_needs_its_batch_at_the_threshold_per_step():
    assert capacity.demand(_inputs()) == pytest.approx(64 * 0.9 / 0.151)  # ResNet-50 on an A100: 381 images/s


def test_the_prediction_names_the_side_that_stops_the_next_accelerator():
    # 100 images/s each: the tier (2,000/s) feeds 20, two cores of 300/s feed 6 (one map thread each: 1 core
    # per accelerator up to 2, then the 2 cores share)
    p = capacity.predict(_inputs(step_time_s=0.576))
    assert (p["predicted_storage_n"], p["predicted_cpu_n"], p["predicted_n"], p["predicted_limit"]) == (
        20,
        6,
        6,
        "cpu",
    )
    p = capacity.predict(_inputs(step_time_s=0.576, tier_images_per_s=350.0))
    assert (p["predicted_n"], p["predicted_limit"]) == (3, "storage")
    assert capacity.predict(_inputs())["predicted_n"] == 0  # 381/s each: more than one core decodes


def test_on_several_nodes_the_count_is_per_node_the_tier_shared_and_a_shared_kernels_cores_divided():
    # 100 images/s each. Two nodes of 2 cores: each feeds 6 on its own; the tier's 2,000/s feeds 20 in all,
    # 10 a node
    p = capacity.predict(_inputs(step_time_s=0.576, nodes=2, kernels=2))
    assert (p["predicted_storage_n"], p["predicted_cpu_n"], p["predicted_n"], p["predicted_limit"]) == (
        10,
        6,
        6,
        "cpu",
    )
    p = capacity.predict(_inputs(step_time_s=0.576, nodes=4, kernels=4, tier_images_per_s=2000.0))
    assert (p["predicted_n"], p["predicted_limit"]) == (5, "storage")  # 20 in all over 4 nodes
    # two nodes on one kernel (the namespaced test cluster): its 2 cores are 1 a node
    p = capacity.predict(_inputs(step_time_s=0.576, nodes=2, kernels=1))
    assert (p["predicted_cpu_n"], p["predicted_n"]) == (3, 3)
    row = capacity.row(p, _seen({2: True, 3: True, 4: False}), 8)
    assert (row["measured_n"], row["measured_total"]) == (3, 6)
    # the search's counts are per node: a cell of 2 nodes x 3 tasks is 3
    df = pd.DataFrame(
        {
            "kind": "emulated",
            "storage": "shared",
            "tasks_per_cell": [6, 6, 2],
            "nodes": [2, 2, 1],
            "train_au_percentage": [95.0, 91.0, 99.0],
            "mb_per_s": 1.0,
            "images_per_s": 10.0,
            "bound": "cpu",
        }
    )
    assert sorted(capacity.tried(df, "shared", 0.9)) == [2, 3]


def _seen(held: dict[int, bool]) -> dict:
    return {
        n: {"passed": ok, "au_min": 95.0 if ok else 60.0, "mb_per_s": 10.0 * n, "bound": "cpu", "runs": 2}
        for n, ok in held.items()
    }


def test_the_search_brackets_the_largest_count_that_holds():
    assert capacity.next_counts({}, 3, 8) == [2, 3, 4]
    assert capacity.next_counts({}, 0, 8) == [1, 2]
    assert capacity.next_counts(_seen({2: True, 3: True, 4: False}), 3, 8) == []  # 3 holds, 4 does not
    assert capacity.next_counts(_seen({2: True, 3: True, 4: True}), 3, 8) == [5]  # the prediction was low
    assert capacity.next_counts(_seen({2: False, 3: False, 4: False}), 3, 8) == [1]  # it was high
    assert capacity.next_counts(_seen({1: False, 2: False}), 1, 8) == []  # not even one
    assert capacity.next_counts(_seen({7: True, 8: True}), 8, 8) == []  # --most reached
    assert capacity.measured(_seen({2: True, 3: True, 4: False}), 8) == (3, "")
    # a count that held above one that failed (a busy machine's noise): no capacity past the failure
    n, note = capacity.measured(_seen({1: False, 2: True, 3: False}), 8)
    assert n == 0 and note.startswith("2 accelerators held but 1 accelerator did not: runs this noisy"), note
    n, note = capacity.measured(_seen({1: True, 2: False, 3: True, 4: False}), 8)
    assert n == 1 and note.startswith("3 accelerators held but 2 accelerators did not"), note
    assert capacity.measured(_seen({1: False}), 8) == (0, "even one accelerator fell below the threshold")
    assert capacity.measured(_seen({7: True, 8: True}), 8) == (
        8,
        "at least 8: the search stopped at --most 8",
    )
    row = capacity.row(capacity.predict(_inputs(step_time_s=0.576)), _seen({5: True, 6: True, 7: False}), 8)
    assert (row["measured_n"], row["error_n"], row["mb_per_s_at_n"], row["bound_at_n_plus_1"]) == (
        6,
        0,
        60.0,
        "cpu",
    )


def _profile(name: str) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "accelerator" / f"{name}.yaml"))


@pytest.mark.parametrize(
    "name, overrides, samples, workload",
    [
        ("unet3d_b200", ["+experiment=mlperf"], "arrays", "readonly"),
        ("retinanet_b200", [], "images", "microbench"),
        ("retinanet_b200", ["dataset=caltech101"], "images", "microbench"),
    ],
)
def test_the_probes_read_the_samples_the_emulated_cells_read(refusal, name, overrides, samples, workload):
    """Before: the two rate probes read the default dataset's JPEGs (112 KB; 322 KB under
    ``+experiment=mlperf``, whose default profile is retinanet) whatever the profile's cells read: for
    unet3d, JPEGs against 28 volumes of 146 MB, so the prediction was made from another workload's rates.
    Now each probe plans on the cells' own set (sizes, kind, count, format), and one core's rate of arrays
    is read, not decoded (the micro-benchmark refuses arrays; the cells never decode them)."""
    from support.configs import compose_cell

    profile = _profile(name)
    given = [*overrides, f"accelerator={name}", "storage=local"]
    cells = compose_cell([*capacity.prove_cell("local", profile, given), "platform.tasks_per_node=1"]).dataset
    for folder, probe, _what in capacity.probes("local", profile, given):
        read = compose_cell(probe).dataset
        assert (read.name, read.num_images, read.median_kb, read.samples, read.format) == (
            cells.name,
            cells.num_images,
            cells.median_kb,
            cells.samples,
            cells.format,
        ), folder
        assert str(read.samples) == samples and refusal(*probe) is None, (folder, refusal(*probe))
    assert capacity.probes("local", profile, given)[1][1][0] == f"workload={workload}"


def test_a_count_of_accelerators_a_cell_cannot_run_bounds_the_search():
    """Before: unet3d's search proved 1 and 2 accelerators in one round, and planning refused its 2-task
    cell (tasks do not shard npz volumes yet), so the whole round failed, 1 accelerator with it."""
    from campaign.capacity import checks

    unet3d = ["+experiment=mlperf", "accelerator=unet3d_b200", "storage=local,tmpfs"]
    most, why = checks.most_tasks(unet3d, _profile("unet3d_b200"), 2)
    assert most == 1 and why.startswith("1 a node, as a cell of 2 is refused: "), why
    assert why.endswith("tasks shard one-file-per-image sets so far, not dataset.format=npz"), why
    assert checks.most_tasks(
        ["accelerator=resnet50_a100", "storage=local"], _profile("resnet50_a100"), 8
    ) == (
        8,
        "",
    )


def test_bad_input_names_the_setting(tmp_path):
    for args, expected in (
        (["storage=tmpfs"], "accelerator is not set: choose the profile"),
        (["accelerator=tpu9"], "accelerator=tpu9: unknown profile"),
        (["--most", "2", "accelerator=tpu8"], "accelerator=tpu8: unknown profile"),  # after an option
        (
            ["accelerator=resnet50_h100", "dataset.num_images=512"],
            "512 images give no accelerator two batches of 400",
        ),
        (
            [
                "accelerator=ci_small",
                TOY_SEARCHPATH,
                "dataset.num_images=32",
                "platform.nodes=2",
            ],
            "32 images give no accelerator of 2 nodes two batches of 16",
        ),
        (
            ["accelerator=ci_small", TOY_SEARCHPATH, "platform.nodes=two"],
            "platform.nodes=two: must be a whole number >= 1",
        ),
        (
            ["accelerator=ci_small", TOY_SEARCHPATH, "platform.tasks_per_node=3"],
            "platform.tasks_per_node is what the search sets",
        ),
    ):
        p = _capacity(*args, cwd=tmp_path)
        lines = [x for x in p.stderr.splitlines() if x.strip()]
        assert p.returncode == 2 and len(lines) == 1 and expected in lines[0], p.stderr
    assert list(tmp_path.iterdir()) == []


def _capacity(*args, cwd):
    return run_module("campaign.capacity", *args, cwd=cwd, timeout=900)


def test_the_readmes_search_as_a_dry_run_plans_and_writes_nothing(cwd):
    """The README's capacity command with platform.dry_run=true: each probe's own dry run, then the search's
    shape, exit 0, and no folder left behind. Before, the search read the probes' results.csv that a dry
    run never writes (a pandas traceback) and left multirun/capacity-* after saying nothing was written."""
    line = re.search(r"^python -m campaign\.capacity .*?(?=\s+#|$)", (ROOT / "README.md").read_text(), re.M)
    p = _capacity(*shlex.split(line[0])[3:], "platform.dry_run=true", cwd=cwd)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stdout[-2000:] + p.stderr[-2000:]
    out = p.stdout
    assert re.search(r"local: the tier's read rate \(storage_rate\):\ndry run: 1 cell would run here", out), (
        out
    )
    assert re.search(r"local: one core's decode rate \(cpu_rate\):\ndry run: 1 cell would run here", out), out
    assert "proven by rounds of emulated cells into multirun/capacity-" in out
    assert "each round's cells: workload=emulated accelerator=resnet50_a100 storage=local" in out
    assert out.rstrip().endswith(": nothing was run or written")
    assert list(cwd.iterdir()) == []


@pytest.mark.cells
def test_the_search_on_real_runs(tmp_path):
    """Predict, then prove on tmpfs: emulated accelerators as tasks of local cells, each reading its shard
    of real JPEGs cold; the answer is the largest count whose every run held AU >= 90% with a failing count
    above it (or the search's limit), and capacity.csv, the figure and the report say so."""
    out = tmp_path / "cap"
    p = _capacity(
        "accelerator=ci_small",
        "storage=tmpfs",
        TOY_SEARCHPATH,
        "dataset.num_images=256",
        "repeats=1",
        "--most",
        "3",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    row = pd.read_csv(out / "capacity.csv").iloc[0]
    assert (
        row["tier"] == "tmpfs"
        and row["accelerator"] == "ci_small"
        and row["cores"] == len(os.sched_getaffinity(0))
    )
    assert row["demand_images_per_s"] == pytest.approx(16 * 0.9 / 0.06)
    results = pd.read_csv(out / "results.csv")
    cells = results[results["kind"] == "emulated"]
    seen = capacity.tried(results, "tmpfs", 0.9)
    assert sorted(seen) == [int(c) for c in str(row["counts_tried"]).split()] and set(
        cells["accelerator"]
    ) == {"ci_small"}
    n = int(row["measured_n"])
    assert all(seen[c]["passed"] for c in seen if c <= n) or n == 0
    # bracketed, or the search's limit; on a busy machine a count may hold above one that failed (AU is
    # the slowest task's, and other processes slow tasks): the answer then says the runs bracket nothing
    stray = [c for c in seen if c > n and seen[c]["passed"]]
    if stray:
        assert "bracket no capacity (the machine busy?" in str(row["note"]), row["note"]
    else:
        assert n == 3 or (n + 1 in seen and not seen[n + 1]["passed"])
    assert row["error_n"] == n - row["predicted_n"]
    # a run's AU is its slowest accelerator's: the minimum over its tasks, each first step left out
    for _, r in cells[cells["tasks_per_cell"] > 1].iterrows():
        tasks = records.read(
            out / "tmpfs" / "prove" / str(r["cell_dir"]).split("/")[-1] / "record.json"
        ).runs[0]["task_results"]
        assert r["train_au_percentage"] == pytest.approx(min(t["train_au_percentage"] for t in tasks))
    assert (out / "capacity.png").stat().st_size > 10_000
    assert "Accelerators the storage can feed" in (out / "report.html").read_text()
    assert f"[capacity] tmpfs: {n} ci_small accelerator(s) held AU >= 90%" in p.stdout
    # and says what the tier's runs stood on exactly when their records cross the thresholds (issue 59)
    from analysis import standing

    answer = next(x for x in p.stdout.splitlines() if x.startswith(f"[capacity] tmpfs: {n} ci_small"))
    said = standing.suffix(out / "tmpfs")
    assert answer.endswith(said) if said else "other processes held" not in answer, answer
    # two searches side by side (a copy stands in for a second run of the command), grid by grid in tables
    # that fit 100 columns: the probes' and the rounds' cells apart (before: one table 900 characters wide)
    shutil.copytree(out, tmp_path / "again", symlinks=True)
    cmp = run_module("analysis", "compare", str(out), str(tmp_path / "again"), cwd=tmp_path)
    assert cmp.returncode == 0 and cmp.stderr == "", cmp.stderr
    assert cmp.stdout.startswith(f"{len(results['cell_dir'].unique())} cells paired within each of 3 grids\n")
    assert (
        "\n== tmpfs/prove: " in cmp.stdout and "paired; told apart by platform.tasks_per_node\n" in cmp.stdout
    )
    assert max(map(len, cmp.stdout.splitlines())) <= 100


@pytest.mark.cells
def test_a_training_campaign_writes_a_profile_the_emulation_runs(paper, tmp_path):
    """python -m analysis profile: the paper study's AlexNet grid (real compute-only steps) becomes an
    accelerator profile whose step time is the median of compute_only_s / (steps - 1) over its records; the
    campaign accepts it through hydra.searchpath; bad input is one line and writes nothing."""
    import json
    import statistics

    from omegaconf import OmegaConf

    def prof(*args):
        return run_module("analysis", "profile", *args, cwd=tmp_path)

    grid, conf = paper / "fig6_fig8", tmp_path / "myconf"
    p = prof(str(grid), "--name", "alexnet_here", "--out", str(conf))
    assert p.returncode == 0, p.stderr
    y = OmegaConf.load(conf / "accelerator" / "alexnet_here.yaml")
    per_step = []
    for f in grid.glob("*/record.json"):  # from the records themselves, not the tables
        rec = json.loads(f.read_text())
        per_step += [r["compute_only_s"] / (r["steps"] - 1) for r in rec["runs"]]
        batch, side = rec["config"]["batch_size"], rec["config"]["workload"]["image_side"]
    assert y.step_time_s == pytest.approx(statistics.median(per_step), rel=1e-5)
    assert (y.batch_size, y.image_side, y.name) == (batch, side, "alexnet_here")
    assert (
        y.device.startswith("CPU (")
        and f"median of {len(per_step)} runs" in y.source
        and str(grid) in y.source
    )
    dry = campaign(
        "-m",
        "workload=emulated",
        "accelerator=alexnet_here",
        f"hydra.searchpath=[file://{conf}]",
        "prefetch=1",
        "dataset.num_images=256",
        "platform.dry_run=true",
        cwd=tmp_path,
    )
    assert dry.returncode == 0 and "accelerator=alexnet_here" in dry.stdout, dry.stdout + dry.stderr
    before = sorted(tmp_path.rglob("*"))
    for args, says in (
        ([str(grid), "--name", "alexnet_here", "--out", str(conf)], "exists; give another --name"),
        ([str(paper / "fig4_fig5"), "--name", "y", "--out", str(conf)], "no run measured its compute alone"),
        ([str(paper), "--name", "y", "--out", str(conf)], "differ in"),
        ([str(grid), "--name", "../y", "--out", str(conf)], "a profile's name is letters"),
    ):
        p = prof(*args)
        lines = [x for x in p.stderr.splitlines() if x.strip()]
        assert p.returncode == 2 and len(lines) == 1 and says in lines[0], p.stderr
    assert sorted(tmp_path.rglob("*")) == before


def test_a_profile_names_the_gpu_pytorch_trained_on():
    """A PyTorch run's device is cuda:k, TensorFlow's /device:GPU:k: both name the GPU from the record, never
    the host's CPU (an H200's PyTorch campaign was profiled as "CPU (Intel Xeon, 16 cores)" before)."""
    from analysis.profile import device_name
    from jobs import records

    # the provenance an H200's PyTorch cell recorded (2026-11-27), trimmed to what the name is read from
    prov = {
        "cpu_model": "Intel(R) Xeon(R) Processor",
        "cpus_usable": 16,
        "accelerator": {
            "gpus": [{"index": 0, "name": "NVIDIA H200", "driver": "580.159.04"}],
            "framework": "PyTorch",
            "framework_gpus": ["cuda:0"],
            "used_index": 0,
        },
    }

    def read(provenance: dict):
        return records.provenance_of(
            records.CellRecord("c", records.COMPLETED, {}, [], [], {}, provenance, "", "")
        )

    for device in ("cuda:0", "/device:GPU:0", "/GPU:0"):
        assert device_name(read(prov), device) == "NVIDIA H200"
    assert device_name(read(prov), "cpu") == "CPU (Intel(R) Xeon(R) Processor, 16 cores)"
    # no GPU list: the framework's name
    assert device_name(read({**prov, "accelerator": {}}), "cuda:0") == "cuda:0"
