"""A micro-benchmark campaign on a modelled tier, as the modelled tiers' tests run it."""

from __future__ import annotations

import json
import os

from support.commands import campaign


def cells_on(tier: str, cwd, tmp_path, images: int, *settings: str) -> tuple[dict, list[dict]]:
    """Cells at 1 and 4 threads on ``tier`` mounted in ``tmp_path`` (cold, one run each; ``settings``: more
    overrides): the last run of each by its thread count, and the records. The tier is unmounted after."""
    out = tmp_path / "c"
    # a user's files beside the mount point and beside the tier's backing folder
    planted = {
        tmp_path / "beside.bin": os.urandom(4096),
        tmp_path / "backing" / "notes.txt": b"a user's notes",
    }
    for f, data in planted.items():
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
    p = campaign(
        "-m",
        "workload=microbench",
        f"storage={tier}",
        f"storage.root={tmp_path / 'mnt'}",
        f"storage.model.backing_dir={tmp_path / 'backing'}",
        "threads=1,4",
        f"dataset.num_images={images}",
        "dataset.num_classes=2",
        "batch_size=16",
        "repeats=1",
        "warmup=0",
        f"hydra.sweep.dir={out}",
        *settings,
        cwd=cwd,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    recs = [json.loads(rec.read_text()) for rec in sorted(out.glob("*/record.json"))]
    runs = {r["config"]["threads"]: r["runs"][-1] for r in recs}
    assert set(runs) == {1, 4}
    for run in runs.values():
        assert run["cache_state"] == "cold" and run["bytes_read_device"] >= 0.99 * run["bytes_consumed"]
    assert not os.path.ismount(tmp_path / "mnt")
    assert all(f.read_bytes() == data for f, data in planted.items())
    assert set(os.listdir(tmp_path / "backing")) == {"notes.txt", tier}  # the tier's own folder beside them
    return runs, recs
