"""What the benchmarks share: a dataset preset of ``conf/dataset`` resolved on a storage root, the way a
campaign cell resolves it (generated once, reused)."""

from __future__ import annotations

from pathlib import Path

CONF = Path(__file__).resolve().parent.parent / "conf"


def dataset(storage_root: str, name: str, num_images: int, seed: int):
    """The files of dataset preset ``name`` (``num_images`` of them) under ``storage_root``."""
    from hydra import compose, initialize_config_dir

    from campaign import schema
    from campaign.plan import resolved
    from jobs import datasets
    from jobs.configview import View

    schema.register()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"dataset={name}", f"dataset.num_images={num_images}"])
    return datasets.resolve(View(resolved(cfg)["dataset"]), storage_root, seed)
