"""What the benchmarks share: a campaign cell's resolved config composed from the presets of
``conf/`` (as ``python -m campaign`` composes it), one run of it through the campaign's own run loop
(``jobs.runner``: locks, eviction, cache classification), and a dataset preset resolved on a storage
root (generated once, reused)."""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
from pathlib import Path

CONF = Path(__file__).resolve().parent.parent / "conf"


def quiet(main):
    """A benchmark's ``main`` with what C++ code writes on standard error while it runs (TensorFlow's and
    CUDA's lines) in ``<--storage-root>/iocampaign/native.log``, beside its TensorFlow start-up lines, not
    on the terminal; its own lines print as before (``jobs.execution.nativelog``)."""

    @functools.wraps(main)
    def quietly(argv: list[str] | None = None) -> int:
        from jobs import owned
        from jobs.execution import nativelog

        args = sys.argv[1:] if argv is None else argv
        root = argparse.ArgumentParser(add_help=False)
        root.add_argument("--storage-root", default="/var/tmp")  # each benchmark's default
        known, _ = root.parse_known_args(args)
        if {"-h", "--help"} & set(args) or not os.path.isdir(known.storage_root):
            return main(argv)  # its help, or its own refusal of the root: nothing made
        folder = owned.under_tool_folder(known.storage_root, setting="--storage-root")
        with nativelog.into(folder / nativelog.NAME):
            return main(argv)

    return quietly


def cell(overrides: list[str]) -> dict:
    """The resolved config of the campaign cell ``overrides`` make (plain data)."""
    from hydra import compose, initialize_config_dir

    from campaign import schema
    from jobs.plan import resolved

    schema.register()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return resolved(compose(config_name="config", overrides=list(overrides)))


def run(config: dict, **values) -> dict:
    """One measured run of the cell ``config`` (with ``values`` set at its top level: threads, seed,
    prefetch...) through ``jobs.runner``, under the campaign's device locks, from the cache state the
    config asks for; returns the run (its metrics, ``cache_state``, ``resident_bytes_before``)."""
    from jobs import runner
    from jobs.cell import Cell

    cell = Cell.from_data({**config, **values, "repeats": 1, "warmup": 0})
    with tempfile.TemporaryDirectory(prefix="iocampaign-bench-") as job_dir:
        runs, _, _ = runner.measure(cell, Path(job_dir))
    return runs[-1]


def dataset(storage_root: str, name: str, num_images: int, seed: int):
    """The files of dataset preset ``name`` (``num_images`` of them) under ``storage_root``."""
    from jobs.cell import Cell
    from jobs.data import datasets

    typed = Cell.from_data(cell([f"dataset={name}", f"dataset.num_images={num_images}"])).config
    return datasets.resolve(typed.dataset, storage_root, seed)
