"""Multi-task cells on the local platform (platform.tasks_per_node): each task a real process reading
its shard with real TensorFlow, the merged record, the scaling figure, a failing task, bad settings."""

import contextlib
import os
import re
import subprocess

import pandas as pd
import pytest

from jobs import records
from jobs.cell import Cell
from jobs.observe.usage import cores
from support.commands import campaign
from support.configs import two_runs
from support.files import make_jpegs

N = 96


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    base = tmp_path_factory.mktemp("tasks")
    root = base / "tier"
    root.mkdir()
    out = base / "c"
    p = campaign(
        "-m",
        "workload=readonly",
        "platform.tasks_per_node=1,2",
        "threads=1",
        *two_runs(N, root, out),
        cwd=base,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return out


@pytest.mark.cells
def test_a_two_task_run_is_the_sum_of_its_tasks(grid):
    recs = {
        records.read(p).config["platform"]["tasks_per_node"]: (p.parent, records.read(p))
        for p in grid.glob("*/record.json")
    }
    assert recs[1][1].cell_id != recs[2][1].cell_id  # the task count is part of what a cell measures
    folder, rec = recs[2]
    for run in rec.runs:
        tasks = run["task_results"]
        assert [t["rank"] for t in tasks] == [0, 1] and [t["images"] for t in tasks] == [N // 2, N // 2]
        assert run["images"] == sum(t["images"] for t in tasks) == N and run["images_dropped"] == 0
        assert run["images_per_s"] == pytest.approx(N / run["seconds"])
        assert run["seconds"] >= max(t["end_s"] for t in tasks) - 1e-6  # first start to last end
        assert run["task_images_per_s_min"] <= run["task_images_per_s_median"] <= run["task_images_per_s_max"]
        assert 0 <= run["task_start_spread_s"] < 0.5  # the barrier releases them together
        assert run["cache_state"] == "cold"
        # usage over the tasks' timed part: their own CPU time, against 1 thread x 2 tasks of the cores
        assert run["usage_over"] == "timed interval" and run["cpu_cores_usable"] == min(cores(), 2)
        assert 0 < run["cpu_s"] <= run["run_wall_s"] * cores() and run["cpu_share"] > 0
        left = sorted(p.name for p in (folder / "tasks" / f"run{run['run']}").iterdir())
        assert [re.sub(r"-[0-9a-f]{12}-", "-", n) for n in left] == ["result-0.json", "result-1.json"], left


def test_the_scaling_figure_draws_a_line_per_node_count_never_one_point_of_both(tmp_path, monkeypatch):
    """2 tasks on one node and 1 task on each of 2 nodes are two configurations of 2 tasks per cell (one
    server or two, one node's cores or two nodes'): two lines, not one point whose whiskers span both."""
    from types import SimpleNamespace

    from analysis.figures import plotting, scaling

    rows = pd.DataFrame(
        {
            "storage": "s3",
            "pipeline": "decode_resize",
            "threads": 2,
            "framework": "tensorflow",
            "nodes": [1, 1, 2, 2],
            "tasks_per_cell": [1, 2, 2, 4],
            "images_per_s": [335.0, 382.0, 316.0, 300.0],
            "mb_per_s": [42.0, 48.0, 40.0, 38.0],
        }
    )
    drawn = []
    monkeypatch.setattr(plotting, "save", lambda fig, path: drawn.append(fig) or [path])
    scaling.scaling_figure(rows, tmp_path, SimpleNamespace(title="scaling", key="scaling"))
    left = drawn[0].axes[0]
    assert [t.get_text() for t in left.get_legend().get_texts()] == [
        "s3 · decode_resize · threads 2 · 1 node",
        "s3 · decode_resize · threads 2 · 2 nodes",
    ]
    points = sorted(
        tuple(xy) for line in left.get_lines() if line.get_marker() == "o" for xy in line.get_xydata()
    )
    assert points == [(1, 335.0), (2, 316.0), (2, 382.0), (4, 300.0)]


@pytest.mark.cells
def test_results_and_the_scaling_figure(grid):
    r = pd.read_csv(grid / "results.csv")
    assert sorted(r["tasks_per_cell"].unique()) == [1, 2]
    assert (grid / "scaling.png").stat().st_size > 10_000
    # every point (two panels) carries its cell's bound, as the cells table states it
    cells = pd.read_csv(grid / "summary.csv")
    svg = (grid / "scaling.svg").read_text()
    for bound in cells["bound"].dropna().unique():
        assert svg.count(f"<!-- {bound} -->") == 2 * int((cells["bound"] == bound).sum()), bound
    from analysis.figures.declared import rows_of
    from jobs import workloads

    fig5 = next(f for _, f in workloads.figures() if f.key == "fig5")
    assert set(rows_of(r, "microbench", fig5)["tasks_per_cell"]) == {1}  # Fig. 5: one process, as the paper


@pytest.mark.cells
def test_a_failing_task_fails_the_cell_with_its_rank(tmp_path):
    data = tmp_path / "data" / "c0"
    make_jpegs(tmp_path / "good", 4, classes=1)
    # even files decode, odd ones do not
    for i, good in enumerate(sorted((tmp_path / "good").rglob("*.jpg"))):
        data.mkdir(parents=True, exist_ok=True)
        (data / f"{2 * i:04d}.jpg").write_bytes(good.read_bytes())
        (data / f"{2 * i + 1:04d}.jpg").write_bytes(b"not a jpeg" * 100)
    root = tmp_path / "tier"
    root.mkdir()
    out = tmp_path / "c"
    p = campaign(
        "-m",
        "workload=microbench",
        "platform.tasks_per_node=2",
        "dataset.source=folder",
        f"dataset.path={tmp_path / 'data'}",
        "batch_size=2",
        "repeats=1",
        "warmup=0",
        f"storage.root={root}",
        f"hydra.sweep.dir={out}",
        cwd=tmp_path,
    )
    assert p.returncode == 1
    rec = records.read(out / "0" / "record.json")
    assert rec.status == records.FAILED and rec.error["type"] == "TaskError"
    assert re.match(
        r"task 1 on \S+ failed: RuntimeError: the pipeline delivered no image", rec.error["message"]
    )
    left = subprocess.run(
        ["pgrep", "-f", f"jobs.execution.tasks {out}"], capture_output=True, text=True
    ).stdout
    assert left == ""  # no task outlives its cell


@pytest.mark.cells
def test_a_hung_task_is_ended_at_the_runs_limit_and_named(grid, tmp_path):
    """Tasks stuck in their reads (a 60 s read delay) past the run's limit (30 s: enough for two task
    processes to import TensorFlow on a busy machine, the limit bounding their start too): TaskError
    naming them, and no task process left."""
    import copy
    import dataclasses
    import time

    from omegaconf import OmegaConf

    from jobs import workloads
    from jobs.data import datasets
    from jobs.execution import tasks
    from jobs.execution.placement import Placement

    config = copy.deepcopy(
        next(
            records.read(p).config
            for p in grid.glob("*/record.json")
            if records.read(p).config["platform"]["tasks_per_node"] == 2
        )
    )
    config["workload"]["read_delay_ms"] = 60_000.0
    make_jpegs(tmp_path / "data", 8, classes=1)
    ds = datasets.resolve(
        OmegaConf.create(
            {"name": "tiny", "source": "folder", "path": str(tmp_path / "data"), "num_images": 8}
        ),
        str(tmp_path / "data"),
        seed=0,
    )
    cell = Cell.from_data(config)
    ctx = workloads.RunContext(ds, cell, seed=0, job_dir=tmp_path, run=1, disk=None)
    where = dataclasses.replace(Placement.of(cell.config), timeout_s=30)
    folder = tmp_path / tasks.SUBDIR / ctx.tag
    t0 = time.monotonic()
    with pytest.raises(tasks.TaskError, match=r"tasks \[0, 1\] \(on \S+\) had not ended after 30 s"):
        tasks.run(ctx, where)
    assert time.monotonic() - t0 < 90
    assert (
        subprocess.run(["pgrep", "-f", f"jobs.execution.tasks {folder}"], capture_output=True).returncode == 1
    )
    # a task that stops (its heartbeat silent for platform.task_silence_s) is named with its node at once:
    # tests/slurm/test_two_nodes.py::test_a_hung_task_and_a_dead_node_fail_their_cells_naming_the_node


@pytest.mark.parametrize(
    "args, expected",
    [
        (("platform.tasks_per_node=0",), "platform.tasks_per_node=0 must be at least 1"),
        (
            ("platform.tasks_per_node=2", "workload=alexnet_small"),
            "workload=alexnet cannot split a run into tasks",
        ),
        (
            ("platform.tasks_per_node=2", "platform.nodes=2"),
            "a cell across several nodes is a Slurm job step",
        ),
        (("-m", "platform=slurm", "platform.nodes=2"), "a multi-node cell needs a shared file system"),
        (("platform.task_silence_s=0.5",), "platform.task_silence_s=0.5 must be at least 2"),
    ],
)
def test_multi_task_settings_it_cannot_run_are_refused(cwd, args, expected):
    p = campaign(*args, "dataset.num_images=32", "batch_size=8", cwd=cwd)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2 and len(lines) == 1 and expected in lines[0], p.stderr
    assert not [f for f in cwd.rglob("*") if f.is_file()]


def test_a_shard_reads_its_own_images_in_its_own_order():
    """Each task's order (global or local shuffle) holds exactly its shard's images, each once: the set's
    groups (consecutive files for shuffle=local) are cut to the shard and renumbered, so no index of
    another task's image reaches the reader (before, they did, and ignore_errors hid the failed reads)."""
    from jobs.data.datasets import Dataset
    from jobs.execution import tasks
    from jobs.frameworks.tensorflow import sources

    n = 23
    ds = Dataset(
        "x",
        "synthetic",
        "/r",
        tuple(f"/r/{i}.jpg" for i in range(n)),
        (0,) * n,
        (1000,) * n,
        1,
        members=tuple(tuple(range(k, min(n, k + 5))) for k in range(0, n, 5)),
    )
    for rank in range(3):
        part = tasks.shard(ds, rank, 3)
        assert part.files == ds.files[rank::3]
        for shuffle in ("global", "local", "none"):
            order = sources.order(part, shuffle=shuffle, shuffle_buffer=None, seed=1, threads=1)
            assert sorted(order) == list(range(len(part.files))), (rank, shuffle, order)


@pytest.mark.cells
def test_a_read_that_fails_in_a_task_fails_the_run_in_the_single_task_line(planned_cell, tmp_path):
    """An image of task 0's shard removed once the run's tasks are asked for (as a purge would, or a
    storage that went away): the run fails with the one line a single-task run fails with, naming the tier
    and the run, and the task. Before: ``task 0 on <host> failed: ReadFailed: ... (at read_errors.py:N)``,
    without the tier."""
    import json
    import threading
    import time
    from pathlib import Path

    from jobs.data.read_errors import ReadFailed
    from jobs.runner import measure

    cell = planned_cell(
        "workload=readonly",
        "platform.tasks_per_node=2",
        f"storage.root={tmp_path}",
        "dataset.num_images=16",
        "threads=1",
        "repeats=1",
        "warmup=0",
    )
    job, gone = tmp_path / "job", []

    def remove_when_asked() -> None:  # the tasks read only after their TensorFlow has started
        deadline = time.monotonic() + 300
        while not gone and time.monotonic() < deadline:
            for request in job.glob("tasks/*/request.json"):
                with contextlib.suppress(OSError, ValueError):
                    first = json.loads(request.read_text())["dataset"]["files"][0]  # task 0's
                    os.unlink(first)
                    gone.append(first)
            time.sleep(0.01)

    remover = threading.Thread(target=remove_when_asked, daemon=True)
    remover.start()
    try:
        with pytest.raises(ReadFailed) as e:
            measure(cell, job)
    finally:
        gone.append("")  # the remover stops
        remover.join()
    assert gone[0] and not Path(gone[0]).exists()
    assert re.fullmatch(
        r"storage=local: task 0 on \S+: 1 of 8 images were not delivered and reads failed \(ENOENT: No such "
        rf"file or directory: {re.escape(gone[0])}\) during run 1; its numbers are dropped",
        str(e.value),
    ), str(e.value)
