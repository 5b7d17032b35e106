"""JAX's data loader, Grain (``framework=jax``), with real Grain worker processes: the micro-benchmark in one
campaign over both pipelines with 0 and 2 workers (run once for the module, asserted many ways), the
emulated accelerator fed by Grain, and the settings it refuses at planning in one line."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from jobs import records
from support.commands import campaign, one_line, python_env, start_module, without_tensorflow
from support.configs import run_in_process
from support.files import make_jpegs, on_disk

GOOD = 47  # real JPEGs, and one truncated one: 48 files


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One campaign: decode_resize and read_only × 0 and 2 Grain workers, cold, 47 JPEGs and a broken one."""
    root = on_disk(tmp_path_factory, "jax")
    good = make_jpegs(root / "data", GOOD, side=384)
    data = good[0].read_bytes()
    (root / "data" / "c1" / "truncated.jpg").write_bytes(data[: len(data) // 3])
    out = root / "sweep"
    p = campaign(
        "-m",
        "framework=jax",
        "workload=microbench,readonly",
        "loader.num_workers=0,2",
        "dataset.source=folder",
        f"dataset.path={root / 'data'}",
        f"storage.root={root}",
        "batch_size=8",
        "repeats=1",
        "warmup=0",
        f"hydra.sweep.dir={out}",
        cwd=root,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    cells = {}
    for rec in sorted(out.glob("*/record.json")):
        r = records.read(rec)
        (run,) = r.runs
        cells[(r.config["workload"]["pipeline"], run["workers"])] = r
    return out, cells


@pytest.mark.cells
def test_every_cell_ran_through_grain_with_its_workers_and_recorded_jax_and_grain(sweep):
    _, cells = sweep
    assert sorted(cells) == [("decode_resize", 0), ("decode_resize", 2), ("read_only", 0), ("read_only", 2)]
    for (_, workers), r in cells.items():
        assert r.status == "completed" and r.config["framework"]["name"] == "jax"
        (run,) = r.runs
        assert run["start_method"] == ("spawn" if workers else "none")
        assert 0 < run["first_batch_s"] <= run["seconds"]
        said = json.dumps(r.provenance)
        assert '"jax"' in said and '"grain"' in said, said[:500]  # both versions recorded


@pytest.mark.cells
def test_every_run_was_cold_and_the_workers_reads_and_cpu_are_the_runs(sweep):
    _, cells = sweep
    for key, r in cells.items():
        (run,) = r.runs
        assert run["cache_state"] == "cold" and run["resident_bytes_before"] == 0, key
        assert run["bytes_read_device"] / run["bytes_consumed"] >= 0.95, key
        assert run["bytes_read_syscall"] >= run["bytes_consumed"], key  # the joined workers' reads counted
    # two spawned workers decoded everything: their CPU time is the run's (joined before the run's end)
    assert cells[("decode_resize", 2)].runs[0]["cpu_s"] > cells[("read_only", 0)].runs[0]["cpu_s"]


@pytest.mark.cells
def test_images_delivered_are_the_set_and_the_corrupt_jpeg_is_dropped_by_the_decode(sweep):
    _, cells = sweep
    for (pipeline, workers), r in cells.items():
        (run,) = r.runs
        if pipeline == "read_only":  # read whole, never decoded: every file is delivered
            assert (run["images"], run["images_dropped"], run["dropped_files"]) == (GOOD + 1, 0, [])
            assert run["batches"] == 6, workers
            continue
        assert (run["images"], run["images_dropped"]) == (GOOD, 1), workers
        (where,) = run["dropped_files"]
        assert where.endswith("truncated.jpg"), where


@pytest.mark.cells
def test_results_name_the_framework_and_label_what_bound_every_run(sweep):
    from analysis.tables.bounds import LABELS

    out, _ = sweep
    rows = pd.read_csv(out / "results.csv")
    assert len(rows) == 4 and set(rows["framework"]) == {"jax"} and set(rows["cache_state"]) == {"cold"}
    assert set(rows["workers"]) == {0, 2}
    assert set(rows["bound"]) <= set(LABELS) - {"cache"} and rows["bound"].notna().all()


@pytest.mark.cells
def test_the_emulated_accelerator_is_fed_by_grains_workers_whose_cpu_and_reads_are_the_runs(tmp_path):
    from omegaconf import OmegaConf

    from jobs.data import datasets

    make_jpegs(tmp_path / "imgs", 64, classes=4)
    cfg = OmegaConf.create(
        {"name": "tiny", "source": "folder", "path": str(tmp_path / "imgs"), "num_images": 64}
    )
    ds = datasets.resolve(cfg, str(tmp_path / "imgs"), seed=0)
    overrides = ["framework=jax", "batch_size=16", "repeats=1", "warmup=0", "workload=emulated"]
    overrides += ["accelerator=resnet50_a100", "threads=2", "accelerator.step_time_s=0.08"]
    w, ctx, r = run_in_process(overrides, ds, tmp_path)
    assert r["steps"] == 4 and r["images"] == 64 and r["images_dropped"] == 0
    assert r["step_time_s"] == pytest.approx(0.08 * 16 / 64)
    assert r["compute_s"] >= 4 * r["step_time_s"] and 0 < r["train_au_percentage"] <= 100
    assert r["steady_runtime_s"] == pytest.approx(r["runtime_s"] - r["first_step_s"])
    assert r["bytes_read_syscall"] >= r["bytes_consumed"] > 0  # the joined workers' reads are the run's
    k = ctx.kids_cpu
    assert k["end"] - k["start"] > 0 and k["after"] == pytest.approx(k["end"]), k  # joined before "end"
    assert w.parallelism(ctx.cell.config) == 2


@pytest.mark.cells
def test_a_task_that_ends_right_after_its_run_leaves_no_shared_memory(tmp_path):
    """A multi-task cell's task ends (``os._exit``) as soon as its run is over. Grain frees the batches a
    process took in a thread of its own, after the run: the run waits for it, so the task's own resource
    tracker finds nothing left to clean (before: one batch a task and run stayed in /dev/shm until the
    campaign ended, the campaign's tracker then warning of "leaked shared_memory objects")."""
    make_jpegs(tmp_path / "imgs", 128, classes=1)
    script = tmp_path / "task.py"
    script.write_text(
        "import os, sys\n"
        "from omegaconf import OmegaConf\n"
        "from jobs.data import datasets\n"
        "from jobs.frameworks.jax import grain_loop\n"
        "from jobs.workloads.emulated.steps import EmulatedSettings\n"
        "if __name__ == '__main__':\n"
        "    folder = sys.argv[1]\n"
        "    cfg = OmegaConf.create({'name': 't', 'source': 'folder', 'path': folder, 'num_images': 128})\n"
        "    ds = datasets.resolve(cfg, folder, seed=0)\n"
        "    s = EmulatedSettings(threads=1, batch_size=64, prefetch=1, image_side=224, seed=0,\n"
        "                         step_time_s=0.01)\n"
        "    r = grain_loop.run_once(ds, s, 1)\n"
        "    print('steps', r['steps'], flush=True)\n"
        "    os._exit(0)\n"
    )
    p = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "imgs")],
        env=python_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0 and "steps 2" in p.stdout, p.stdout + p.stderr[-3000:]
    assert "leaked shared_memory" not in p.stderr, p.stderr[-3000:]


@pytest.mark.cells
def test_jax_cells_run_where_tensorflow_is_not_installed(tmp_path):
    """A node's image with JAX and Grain but no TensorFlow: the micro-benchmark and the emulated accelerator
    run there (nothing of theirs imports TensorFlow)."""
    make_jpegs(tmp_path / "data", 32)
    p = campaign(
        "-m",
        "framework=jax",
        "workload=microbench,emulated",
        "accelerator=resnet50_a100",
        "loader.num_workers=1",
        "batch_size=8",
        "repeats=1",
        "warmup=0",
        "dataset.source=folder",
        f"dataset.path={tmp_path / 'data'}",
        f"storage.root={tmp_path}",
        f"hydra.sweep.dir={tmp_path / 'out'}",
        cwd=tmp_path,
        env=without_tensorflow(tmp_path / "blocked"),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    ran = [records.read(r) for r in sorted((tmp_path / "out").glob("*/record.json"))]
    assert sorted(r.config["workload"]["kind"] for r in ran) == ["emulated", "microbench"]
    assert all(r.status == "completed" for r in ran)


def _group(pid: int) -> list[int]:
    """The live processes of process group ``pid`` (zombies aside)."""
    import subprocess

    out = []
    for x in subprocess.run(["pgrep", "-g", str(pid)], capture_output=True, text=True).stdout.split():
        try:
            with open(f"/proc/{x}/cmdline", "rb") as f:
                if f.read():
                    out.append(int(x))
        except OSError:
            continue
    return out


@pytest.mark.cells
def test_sigterm_mid_run_ends_the_cell_in_seconds_with_one_line_and_grains_workers_gone(tmp_path):
    """SIGTERM while two spawned Grain workers read: the campaign ends within seconds (not at the pass's
    end), says so in one line, keeps no record of the cut cell and leaves no process behind."""
    import signal
    import subprocess
    import time

    make_jpegs(tmp_path / "data", 96)
    p = start_module(
        "campaign",
        "-m",
        "framework=jax",
        "loader.num_workers=2",
        "workload.read_delay_ms=300",  # 48 images a worker: a pass of about 15 s
        "batch_size=2",
        "repeats=1",
        "warmup=0",
        "dataset.source=folder",
        f"dataset.path={tmp_path / 'data'}",
        f"storage.root={tmp_path}",
        f"hydra.sweep.dir={tmp_path / 'out'}",
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(_group(p.pid)) < 3:  # the campaign and its 2 workers
            time.sleep(0.2)
        assert len(_group(p.pid)) >= 3, "Grain's workers were not seen"
        time.sleep(1.0)  # mid-pass: batches delivered, more to come
        sent = time.monotonic()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 143 and took < 10, (p.returncode, took)
    (line,) = [x for x in err.splitlines() if x.strip()]
    assert line.startswith("campaign: interrupted by SIGTERM; the records of finished cells are kept in ")
    assert not (tmp_path / "out" / "0" / "record.json").exists()
    deadline = time.monotonic() + 10
    while _group(p.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _group(p.pid) == []


@pytest.mark.parametrize(
    "args, said",
    [
        (["dataset.format=tfrecord"], "dataset.format=tfrecord: framework=jax reads files, npz only"),
        (["prefetch=1"], "prefetch=1 is tf.data's transformation: framework=jax's workers"),
        (["loader.pin_memory=true"], "loader.pin_memory=True: framework=jax's loader has no such setting"),
        (["loader.persistent_workers=true"], "loader.persistent_workers=True: framework=jax's loader has no"),
        (["trace.posix=true"], "trace.posix=true: framework=jax cannot do it yet"),
        (["workload=alexnet"], "framework=jax: workload=alexnet runs on tensorflow, pytorch only"),
        (["storage=s3", "dataset.num_images=64"], "storage=s3: framework=jax does not read from an object"),
    ],
)
def test_what_grain_cannot_do_is_refused_in_one_line_naming_the_setting(refusal, args, said):
    line = refusal("framework=jax", *args)
    assert line is not None and said in line, line


def test_a_refused_jax_command_exits_2_with_one_line(tmp_path):
    p = campaign("framework=jax", "dataset.format=hdf5", f"storage.root={tmp_path}", cwd=tmp_path)
    assert p.returncode == 2
    assert one_line(p).startswith("campaign: dataset.format=hdf5: framework=jax reads files, npz only")
    assert list(tmp_path.iterdir()) == []
