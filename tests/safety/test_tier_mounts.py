"""The tiers the tool builds (an emulated tier: an image on a loop device, mounted and throttled) and the
small file systems it writes on: what it did not mount is never unmounted or hidden, an image it did not
make is never truncated or attached, two campaigns on one tier take it in turn, and a tier that fills up
or a root too small for the data leaves nothing behind. Real mounts, loop devices and tmpfs (root).

Each test reproduces a failure found by trying the tool as a new user (issue #10) and fails on the code
before the fix.
"""

from __future__ import annotations

import subprocess
from datetime import datetime

import pytest
from omegaconf import OmegaConf

from jobs import records
from jobs.data import datasets
from jobs.storage import tiers
from support.commands import campaign, one_line, start_module
from support.configs import TINY
from support.files import intact, make_jpegs, plant, tmpfs
from support.skips import needs_root


@pytest.mark.tiers
@needs_root
def test_emulated_tier_never_unmounts_or_hides_what_it_did_not_mount(tmp_path, cwd):
    """Tier set-up used to unmount whatever was mounted at storage.root. A mount, a folder with files or
    an image file the tool did not make is refused and left as it was."""
    mnt = tmp_path / "mnt"
    with tmpfs(mnt, "8m"):
        planted = plant(mnt)
        with pytest.raises(tiers.TierError, match="iocampaign did not mount"):
            tiers.setup("safety_tier", str(tmp_path / "images"), str(mnt), 0.3, 100, 100)
        p = campaign(
            "storage=emulated_hdd",
            f"storage.root={mnt}",
            f"storage.emulate.image_dir={tmp_path / 'images'}",
            *TINY,
            cwd=cwd,
        )
        assert p.returncode == 2 and "iocampaign did not mount" in one_line(p) and "storage.root=" in p.stderr
        assert tiers._mount_at(str(mnt)) == ("tmpfs", "tmpfs")  # still mounted
        intact(planted)
    # a folder with files: a tier mounted over it would hide them
    planted = plant(mnt)
    with pytest.raises(tiers.TierError, match="files in it"):
        tiers.setup("safety_tier", str(tmp_path / "images"), str(mnt), 0.3, 100, 100)
    intact(planted)
    # a file at the image's path that the tool did not make is never truncated or attached
    images = tmp_path / "images"
    images.mkdir()
    mine = images / "safety_tier.img"
    mine.write_bytes(b"a user's disk image")
    with pytest.raises(tiers.TierError, match="did not create"):
        tiers.setup("safety_tier", str(images), str(tmp_path / "fresh"), 0.3, 100, 100)
    assert mine.read_bytes() == b"a user's disk image" and not (tmp_path / "fresh").exists()
    assert list(cwd.iterdir()) == []


@pytest.mark.cells
@pytest.mark.tiers
@needs_root
def test_two_campaigns_on_one_emulated_tier_take_it_in_turn_and_both_complete(tmp_path):
    """Tier set-up and dataset generation ran outside the device lock: a second campaign tore the tier
    down under the first."""
    args = [
        "-m",
        "workload=readonly",
        "storage=emulated_ssd",
        f"storage.root={tmp_path / 'tier'}",
        f"storage.emulate.image_dir={tmp_path / 'images'}",
        "storage.emulate.size_gb=0.3",
        f"platform.lock_dir={tmp_path / 'locks'}",
        "repeats=2",
        "warmup=0",
        "batch_size=8",
        "dataset.num_images=48",
        "dataset=caltech101",
    ]
    procs = [
        start_module(
            "campaign",
            *args,
            f"hydra.sweep.dir={tmp_path / f'c{k}'}",
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for k in range(2)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    recs = [records.read(tmp_path / f"c{k}" / "0" / "record.json") for k in range(2)]
    assert all(r.status == "completed" and len(r.runs) == 2 for r in recs)

    # the two cells' measured runs never overlapped on the tier: one waited for the other's whole cell (how
    # long depends on when each got past TensorFlow's import, so the order of the windows is what is checked)
    def window(rec):
        starts = [datetime.fromisoformat(r["started_at"]).timestamp() for r in rec.runs]
        return min(starts), max(t + r["run_wall_s"] for t, r in zip(starts, rec.runs))

    (a0, a1), (b0, b1) = sorted(window(r) for r in recs)
    assert a1 <= b0 + 0.01, ((a0, a1), (b0, b1))
    image = str(tmp_path / "images" / "emulated_ssd.img")
    assert tiers.leftovers("emulated_ssd", image, str(tmp_path / "tier")) == []


@pytest.mark.cells
@pytest.mark.tiers
@needs_root
def test_a_checkpoint_run_that_fills_its_tier_leaves_nothing(tmp_path):
    """A checkpoint tier that fills up left files behind, and the fast tier was checked for room for one
    checkpoint only: the run fails leaving nothing, and a fast tier too small falls back to the slow one."""
    from jobs.frameworks.tensorflow import checkpoints as tf_checkpoints
    from jobs.frameworks.tensorflow import training as alexnet
    from jobs.workloads.checkpoint import saving as checkpoint

    make_jpegs(tmp_path / "imgs", 32, classes=4)
    ds = datasets.resolve(
        OmegaConf.create({"name": "t", "source": "folder", "path": str(tmp_path / "imgs"), "num_images": 32}),
        str(tmp_path),
        0,
    )
    small = tmp_path / "small"
    with tmpfs(small, "3m"):
        planted = plant(small)
        train = alexnet.TrainSettings(
            threads=2, batch_size=4, prefetch=1, image_side=64, width=0.5, steps=4, seed=0, device="cpu"
        )
        s = checkpoint.CheckpointSettings(train, 2, "slow", None, small, "fsync", "sync", 2, "full")
        with pytest.raises(Exception) as e:  # ResourceExhaustedError or OSError: the tier is full
            checkpoint.run_once(ds, s, tf_checkpoints.ENGINE)
        assert "space" in str(e.value).lower() or "exhausted" in type(e.value).__name__.lower()
        assert not (small / "iocampaign" / "checkpoints" / "full").exists()
        intact(planted)
        # the fast tier holds max_to_keep + 1 checkpoints at once: too small for them, it falls back
        (tmp_path / "slow").mkdir()
        s = checkpoint.CheckpointSettings(
            train, 1, "fast", small, tmp_path / "slow", "fsync", "sync", 3, "fb"
        )
        r = checkpoint.run_once(ds, s, tf_checkpoints.ENGINE)
        assert r["effective_target"] == "slow" and "max_to_keep" in r["fallback"]
        intact(planted)


@pytest.mark.tiers
@needs_root
def test_a_storage_root_too_small_for_the_synthetic_set_is_one_line(tmp_path, cwd):
    """A synthetic set larger than the root's free space is refused at planning, before any image."""
    small = tmp_path / "small"
    with tmpfs(small, "2m"):
        p = campaign(
            "storage=tmpfs",
            f"storage.root={small}",
            "dataset.num_images=200",
            "batch_size=4",
            "repeats=1",
            f"hydra.run.dir={tmp_path / 'r'}",
            cwd=cwd,
        )
        # at planning, before a cell
        assert p.returncode == 2 and "storage.root" in one_line(p) and "free" in p.stderr
        assert not list((small / "iocampaign" / "datasets").rglob("*.jpg"))
