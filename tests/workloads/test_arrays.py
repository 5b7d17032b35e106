"""A set of arrays (``dataset.samples=arrays``, MLPerf Storage's unet3d): raw volumes of random bytes at
the profile's sizes, stored one .npz a sample, read whole and never decoded by every framework, and
refused at planning by a workload that decodes images."""

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from campaign import validate
from campaign.errors import ConfigError
from jobs import records
from jobs.cell import Cell
from jobs.data import formats, synthetic
from support.commands import campaign
from support.configs import compose_cell

# unet3d's profile at a size a test reads in seconds: its median and spread scaled down 2,500-fold
SMALL = ["workload=emulated", "accelerator=unet3d_b200", "dataset.median_kb=53", "batch_size=7"]
RUN = ["accelerator.step_time_s=0.01", "dataset.num_images=21", "dataset.format=npz", "repeats=1", "warmup=0"]


def test_arrays_are_random_bytes_of_their_target_size_and_no_image(tmp_path):
    arrays = synthetic.SyntheticSpec("vol", 2, 40, 0.44, 0.6, 0.0, 3, samples="arrays")
    folder = synthetic.ensure(arrays, tmp_path, 12)
    rows = synthetic.read_manifest(folder)
    assert all(p.endswith(".bin") for p, _, _ in rows)
    for i, (rel, _, size) in enumerate(rows):
        data = (folder / rel).read_bytes()
        assert len(data) == size == synthetic.target_bytes(arrays, i)
        assert data == synthetic.encode(arrays, i)  # the same bytes from (seed, i), every time
    with pytest.raises(OSError):  # PIL's UnidentifiedImageError: no image to decode
        Image.open(folder / rows[0][0])
    # every byte value about equally often: noise that no codec shrinks, as a volume's voxels in DLIO
    counts = np.bincount(np.frombuffer((folder / rows[0][0]).read_bytes(), np.uint8), minlength=256)
    assert counts.min() > 0.8 * counts.mean()
    # a set of images keeps the cache key it had before sets of arrays: it is not generated again
    images = synthetic.SyntheticSpec("vol", 2, 40, 0.44, 0.6, 0.0, 3)
    import hashlib
    import json
    from dataclasses import asdict

    before = {k: v for k, v in asdict(images).items() if k != "samples"}
    blob = json.dumps({**before, "generator": synthetic.GENERATOR_VERSION}, sort_keys=True)
    assert images.key() == f"vol-{hashlib.sha256(blob.encode()).hexdigest()[:10]}" != arrays.key()


@pytest.fixture(scope="module")
def read(tmp_path_factory):
    """unet3d's emulated accelerator over the same 21 arrays in npz files, through TensorFlow, PyTorch and
    Grain (JAX)."""
    root = tmp_path_factory.mktemp("arrays")
    out = {}
    frameworks = {"tensorflow": ["prefetch=1"], "pytorch": ["threads=2"], "jax": ["threads=2"]}
    for framework, extra in frameworks.items():
        p = campaign(
            "-m",
            *SMALL,
            *RUN,
            f"framework={framework}",
            *extra,
            f"storage.root={root}",
            f"hydra.sweep.dir={root / framework}",
            cwd=root,
        )
        assert p.returncode == 0, p.stderr[-3000:]
        out[framework] = root / framework
    return root, out


@pytest.mark.cells
def test_every_framework_reads_the_same_arrays_whole_and_decodes_none(read):
    root, out = read
    rows = {fw: pd.read_csv(folder / "results.csv").iloc[0] for fw, folder in out.items()}
    rec = records.read(out["tensorflow"] / "0" / "record.json")
    assert rec.config["dataset"]["samples"] == "arrays" and rec.config["dataset"]["format"] == "npz"
    total = rec.dataset["total_bytes"]
    for fw, row in rows.items():
        # every full step's samples: Grain's two workers' short batches (4 and 3) make the third step
        assert (row["images"], row["images_dropped"], row["steps"]) == (21, 0, 3), fw
        assert row["bytes_consumed"] == total, fw  # every sample read whole, none dropped as "no image"
        assert row["cache_state"] == "cold", fw
        assert row["pipeline"] == "read_only", fw  # what was done to each sample: read, not decoded
    # each .npz holds the sample's raw bytes as ``x``: what DLIO's npz reader loads
    converted = next(root.glob("iocampaign/datasets/converted/*"))
    sample = sorted(converted.rglob("*.npz"))[0]
    generated = next(root.glob("iocampaign/datasets/imagenet_subset-*"))
    firsts = sorted(generated.rglob("vol_*.bin"))
    assert formats.load_npz(str(sample)) in {p.read_bytes() for p in firsts}


@pytest.mark.parametrize(
    "overrides",
    [
        ["workload=microbench"],
        ["workload=alexnet_small"],
        ["workload=checkpoint"],
    ],
)
def test_a_workload_that_decodes_images_refuses_arrays_in_one_line(overrides):
    cell = Cell.from_composed(compose_cell([*overrides, "dataset=imagenet_subset", "dataset.samples=arrays"]))
    with pytest.raises(ConfigError) as e:
        validate.check(cell)
    assert str(e.value).startswith("dataset.samples=arrays: workload=")
    assert "\n" not in str(e.value)


def test_arrays_of_a_users_own_files_are_refused_in_one_line(tmp_path):
    overrides = [*SMALL, "prefetch=2", "dataset.source=folder", f"dataset.path={tmp_path}"]
    with pytest.raises(ConfigError) as e:
        validate.check(Cell.from_composed(compose_cell(overrides)))
    assert str(e.value).startswith("dataset.samples=arrays: dataset.source=folder holds your own files")


def test_the_read_only_micro_benchmark_reads_arrays():
    validate.check(Cell.from_composed(compose_cell(["workload=readonly", "dataset.samples=arrays"])))


def test_a_dry_run_counts_arrays(tmp_path):
    p = campaign(
        "-m", *SMALL, *RUN, "prefetch=1", f"storage.root={tmp_path}", "platform.dry_run=true", cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(x for x in p.stdout.splitlines() if x.startswith("dataset "))
    assert ": 21 synthetic arrays, " in line and "21 to generate" in line
