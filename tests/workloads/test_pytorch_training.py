"""The PyTorch engines of the emulated accelerator, the AlexNet mini-app and checkpoints
(``framework=pytorch``), with real PyTorch DataLoaders on tiny real JPEGs; a checkpoint campaign and a
two-task campaign on a node with PyTorch alone (TensorFlow not importable, as on a GPU node's image).
PyTorch is imported in the tests that use it: every worker of the suite collects this module."""

import time

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from campaign import validate
from campaign.errors import ConfigError
from jobs import records
from jobs.cell import Cell
from jobs.data import datasets
from support.commands import campaign, without_tensorflow
from support.configs import compose_cell, one_run_of_folder, run_in_process
from support.files import make_jpegs

pytestmark = pytest.mark.cells

TINY = ["framework=pytorch", "batch_size=16", "repeats=1", "warmup=0"]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("imgs")
    make_jpegs(d, 64, classes=4)
    return d


@pytest.fixture(scope="module")
def ds(images):
    cfg = OmegaConf.create({"name": "tiny", "source": "folder", "path": str(images), "num_images": 64})
    return datasets.resolve(cfg, str(images), seed=0)


def _run(overrides, ds, job_dir, rank_run=1):
    return run_in_process([*TINY, *overrides], ds, job_dir, rank_run)


def _workers_cpu_is_in_the_window(ctx, images) -> None:
    """The DataLoader's workers decoded ``images`` inside the run's usage window: their CPU time (counted
    once they are joined) is between its start and end marks, and none of it came after the end."""
    from jobs.frameworks.pytorch.loader.samples import decode

    blobs = [p.read_bytes() for p in sorted(images.rglob("*.jpg"))]
    t0 = time.process_time()
    for b in blobs:
        decode(b, 64)
    work = time.process_time() - t0
    k = ctx.kids_cpu
    assert k["end"] - k["start"] >= 0.5 * work > 0, (k, work)
    assert k["after"] == pytest.approx(k["end"]), k


def test_the_torch_model_is_the_keras_alexnet():
    import torch

    from jobs.frameworks.pytorch import torch_training

    m = torch_training.build_model(102, 224, 1.0, 0)
    assert torch_training.parameters(m) == 58_699_238  # the Keras model's count (test_alexnet)
    assert m(torch.zeros(1, 3, 224, 224)).shape == (1, 102)
    small = torch_training.build_model(4, 64, 0.25, 0)
    assert small(torch.zeros(2, 3, 64, 64)).shape == (2, 4)


def test_emulated_accelerator_through_a_dataloader(ds, images, tmp_path):
    w, ctx, r = _run(
        ["workload=emulated", "accelerator=resnet50_a100", "threads=1", "accelerator.step_time_s=0.08"],
        ds,
        tmp_path,
    )
    assert r["steps"] == 4 and r["images"] == 64 and r["images_dropped"] == 0
    assert r["step_time_s"] == pytest.approx(0.08 * 16 / 64)
    assert r["compute_s"] >= 4 * r["step_time_s"] and 0 < r["train_au_percentage"] <= 100
    assert r["steady_runtime_s"] == pytest.approx(r["runtime_s"] - r["first_step_s"])
    # the worker was joined before the counters were read: its reads of the files are the run's
    assert r["bytes_read_syscall"] >= r["bytes_consumed"] > 0
    _workers_cpu_is_in_the_window(ctx, images)
    assert (
        w.parallelism(Cell.from_composed(compose_cell([*TINY, "workload=emulated", "threads=3"])).config) == 3
    )


def test_alexnet_breakdown_overlap_and_prefetch_as_workers(ds, images, tmp_path):
    from jobs.frameworks.pytorch import torch_training

    base = ["workload=alexnet_small", "workload.image_side=64", "workload.width=0.25"]
    w, ctx, r = _run([*base, "loader.num_workers=1"], ds, tmp_path)
    _workers_cpu_is_in_the_window(ctx, images)
    assert r["steps"] == 4 and r["images"] == 64 and r["device"] == "cpu"
    assert r["parameters"] == torch_training.parameters(torch_training.build_model(4, 64, 0.25, 0))
    assert r["final_loss"] == r["final_loss"] and r["compute_only_s"] > 0
    assert abs(r["runtime_s"] - (r["data_wait_s"] + r["compute_s"])) <= 0.05 * r["runtime_s"] + 0.05
    steps = pd.read_csv(tmp_path / r["steps_file"])
    assert len(steps) == 4 and steps["compute_s"].sum() == pytest.approx(r["compute_s"], abs=1e-3)
    assert r["train_au_percentage"] == pytest.approx(
        100 * steps["compute_s"][1:].sum() / r["steady_runtime_s"], rel=1e-3
    )
    assert (tmp_path / r["trace_file"]).stat().st_size > 0
    assert w.probe(ctx)["input_only_s"] > 0
    # without prefetch (no workers: the training process reads between its steps) it still trains
    _, _, r0 = _run([*base, "loader.num_workers=0"], ds, tmp_path)
    assert r0["steps"] == 4 and r0["images"] == 64 and r0["bytes_read_syscall"] >= r0["bytes_consumed"]


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["workload=alexnet_small", "prefetch=1"], "prefetch=1"),
        (["workload=emulated", "accelerator=resnet50_a100", "loader.num_workers=0"], "num_workers"),
        (["workload=checkpoint", "checkpoint.mode=async"], "checkpoint.mode=async"),
    ],
)
def test_what_pytorch_refuses(overrides, says):
    with pytest.raises(ConfigError, match=says.replace(".", r"\.")):
        validate.check(Cell.from_composed(compose_cell([*TINY, *overrides])))


@pytest.fixture(scope="module")
def checkpoints(images, tmp_path_factory):
    """One campaign: the burst buffer, checkpoints every 4 of 12 steps, restored cold, on a node where
    TensorFlow cannot be imported (an H200's PyTorch checkpoints failed on `import tensorflow` before)."""
    root = tmp_path_factory.mktemp("ck")
    (root / "fast").mkdir()
    out = root / "sweep"
    p = campaign(
        "-m",
        "framework=pytorch",
        "workload=checkpoint",
        "workload.image_side=64",
        "workload.width=0.25",
        "workload.steps=12",
        "checkpoint.every=4",
        "checkpoint.target=burst_buffer",
        "checkpoint.restore=true",
        f"checkpoint.fast.root={root / 'fast'}",
        f"checkpoint.slow.root={root}",
        *one_run_of_folder(root, images),
        "loader.num_workers=1",
        f"hydra.sweep.dir={out}",
        cwd=root,
        env=without_tensorflow(root),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return root, out


def test_checkpoints_drain_restore_and_verify(checkpoints):
    root, out = checkpoints
    df = pd.read_csv(out / "results.csv")
    assert len(df) == 1 and (df["checkpoint_effective_target"] == "burst_buffer").all()
    rec = records.read(out / str(df["cell_dir"][0]) / "record.json")
    run = rec.runs[0]
    assert rec.config["framework"]["name"] == "pytorch"
    assert [c["step"] for c in run["checkpoints"]] == [4, 8, 12]
    # the model and Adam's two moments: about three times the parameters' 4 bytes each
    for c in run["checkpoints"]:
        assert c["tier"] == "fast" and c["stall_s"] > 0 and c["drained_after_s"] >= 0
        assert 3 * 4 * run["parameters"] <= c["bytes"] <= 3.1 * 4 * run["parameters"] + 100_000
    back = run["restores"]
    assert [r["tier"] for r in back] == ["fast", "slow"]  # the fast copy while fresh, then the drained one
    for r in back:
        assert r["step"] == 12 and r["weights_equal"] is True and r["restore_s"] > 0
    assert back[-1]["checksums"] == "match"
    assert run["baseline_runtime_s"] > 0 and run["restore_mb_s"] > 0
    assert run["checkpoint_bytes_left"] == 0  # recorded, then removed from both tiers
    assert not [p for p in (root / "iocampaign" / "checkpoints").rglob("*.pt")]
    assert np.isfinite(df["drain_after_end_s"]).all()


def test_a_two_task_pytorch_cell_runs_where_tensorflow_is_not_installed(images, tmp_path):
    """Each task of a multi-task cell (platform.tasks_per_node=2: two emulated accelerators) starts
    TensorFlow only for a TensorFlow cell: on an H200 with PyTorch alone, the capacity search's second
    round failed in its tasks on `import tensorflow`."""
    out = tmp_path / "sweep"
    p = campaign(
        "-m",
        "framework=pytorch",
        "workload=emulated",
        "accelerator=resnet50_a100",
        "accelerator.step_time_s=0.01",
        "platform.tasks_per_node=2",
        "loader.num_workers=1",
        *one_run_of_folder(tmp_path, images),
        f"hydra.sweep.dir={out}",
        cwd=tmp_path,
        env=without_tensorflow(tmp_path),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    df = pd.read_csv(out / "results.csv")
    assert len(df) == 1 and df["framework"][0] == "pytorch" and df["images"][0] > 0
    rec = records.read(out / str(df["cell_dir"][0]) / "record.json")
    assert len(rec.runs[0]["task_results"]) == 2


def test_the_capacity_search_plans_a_pytorch_cell_without_prefetch():
    from campaign.capacity import checks, command, search

    overrides = ["storage=local", "framework=pytorch", "threads=2"]
    assert search.loader_defaults(overrides) == {}
    assert checks.cells(overrides, command._profile("resnet50_a100", [])) is None
    # tf.data's prefetch=2, which an accelerator's loader needs there, is refused for a DataLoader
    assert "prefetch=2" in checks.cells([*overrides, "prefetch=2"], command._profile("resnet50_a100", []))
