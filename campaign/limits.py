"""What a cell may ask of the machine, checked at planning: every number within the bounds its field
declares (``jobs.schema.bounded``), map threads and service workers it can use, and a synthetic dataset
that fits on its tier. The dataset's size is computed from the generator's size model, never by visiting
its images, so a set of 10^8 images is judged in microseconds."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os

from campaign.errors import ConfigError
from jobs import schema
from jobs.storage import backends


def bounds(section, key: str = "", checked: dict | None = None) -> None:
    """Every setting of ``section`` (a cell's typed config, and each section in it) within the bounds its
    field declares: one walk over the schema instead of a check per setting, so a bound declared beside a
    field is held everywhere the field appears (``storage``, ``stage``, ``checkpoint.slow``, ...). Every
    setting out of its bounds is named, in one line: a value the user gave and one that took it
    (``dataset.num_images: ${accelerator.what_if_samples}``) are named together.
    ``checked``: the sections already walked in this planning pass (by identity; a planned cell shares
    its composition's sections but for those its values changed, and they are read-only), skipped."""
    refused = _refusals(section, key, checked)
    if refused:
        raise ConfigError("; ".join(refused))


def _refusals(section, key: str, checked: dict | None) -> list[str]:
    if checked is not None and id(section) in checked:
        return []
    refused = []
    for name, declared in _declared(type(section)):
        value = getattr(section, name, None)
        if value is None or type(value) in _CHOSEN:
            continue  # null, or a choice: the type said it
        if hasattr(type(value), "__dataclass_fields__"):  # a section (dataclasses.is_dataclass, for types)
            refused += _refusals(value, f"{key}{name}.", checked)
        elif declared is not None and isinstance(value, (int, float)):
            why = declared.refusal(value)
            if why:
                refused.append(f"{key}{name}={value} {why}")
    if checked is not None and not refused:
        checked[id(section)] = section  # within bounds; held, so its id is not reused while the pass lasts
    return refused


_CHOSEN = (bool, str)  # values whose type is the whole check


@functools.cache
def _declared(cls: type) -> tuple[tuple[str, schema.Bounds | None], ...]:
    """(field name, its Bounds or None) of a schema dataclass, read once per class."""
    return tuple((f.name, f.metadata.get(schema.BOUNDS)) for f in dataclasses.fields(cls))


def threads(cfg) -> None:
    """``threads``: a positive int (or autotune) no larger than ``schema.THREADS_MAX``."""
    value = schema.threads_value(cfg.threads)
    if value != "autotune" and value > schema.THREADS_MAX:
        raise ConfigError(
            f"threads={value} is more than {schema.THREADS_MAX}, the most map calls a cell keeps in flight: "
            "each holds an open file and a decoded image in memory, and no device serves more requests "
            "at once (8-64 suit a 16-core node); or give threads=autotune"
        )


def workers(cfg) -> None:
    """``input.workers`` on this machine: each a process of its own running TensorFlow."""
    n = cfg.input.workers
    if not cfg.input.service or cfg.platform.kind == "slurm":
        return  # on Slurm the workers are tasks of the cell's job, each with the CPUs its job asks for
    from jobs.observe import usage

    most = max(2, usage.cores())
    if n > most:
        raise ConfigError(
            f"input.workers={n}: the service's workers run here, each a TensorFlow process of its own, "
            f"and this machine has {usage.cores()} cores: use at most {most}"
        )


def mean_image_bytes(median_kb: float, spread: float) -> float:
    """The mean size the synthetic generator gives an image (``jobs.data.synthetic.target_bytes``: the
    median times exp(spread z), z a standard normal clipped to [-3, 3]), in closed form; its 600-byte floor
    is left out, so this never overstates what a set needs."""

    def cdf(x: float) -> float:
        return 0.5 * (1 + math.erf(x / math.sqrt(2)))

    s = spread
    body = math.exp(s * s / 2) * (cdf(3 - s) - cdf(-3 - s))
    tails = math.exp(3 * s) * (1 - cdf(3)) + math.exp(-3 * s) * cdf(-3)
    return median_kb * 1000 * (body + tails)


def synthetic_bytes(dataset, count: int) -> int:
    """Disk space ``count`` new images of a synthetic set take (as ``synthetic.estimate_bytes`` counts
    them)."""
    from jobs.data import synthetic

    per_image = mean_image_bytes(dataset.median_kb, dataset.size_spread) + 4096
    return int(count * per_image * synthetic.OVERHEAD)


def _generated(cfg, folder: str) -> int:
    """Images of the cell's synthetic set already generated in the tier's ``folder`` (0: none, or unknown)."""
    from jobs import owned
    from jobs.data import datasets, synthetic

    spec = synthetic.spec_of(cfg.dataset, cfg.seed)
    meta = owned.tool_folder(folder) / datasets.SUBDIR / spec.key() / synthetic.META
    try:
        return int(json.loads(meta.read_text())["count"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def space_key(cell) -> tuple:
    """What ``dataset_fits`` depends on, cheap to build for every cell of a grid (a memo's key)."""
    st, ds = cell.data["storage"], cell.data["dataset"]
    dataset = tuple(ds.items()) if isinstance(ds, dict) else None
    return (
        "space",
        st["name"],
        st["root"],
        repr(st["model"]),
        repr(st["emulate"]),
        dataset,
        cell.data["seed"],
    )


_BOTH = " (its files, and the embedded server's objects of them)"


def dataset_fits(cfg) -> None:
    """A synthetic set's images still to generate fit in the space its tier has free (estimated from the
    size model; the run checks again, exactly, before it writes)."""
    if cfg.dataset is None or cfg.dataset.source != "synthetic":
        return
    backend = backends.of(cfg.storage)
    folder, free = backend.space(cfg.storage)
    if free is None:
        return
    count = cfg.dataset.num_images
    todo = count - (_generated(cfg, folder) if folder and os.path.isdir(folder) else 0)
    need = synthetic_bytes(cfg.dataset, todo)
    if cfg.dataset.format != "files":  # and the converted copy beside it (jobs.data.formats)
        need += int(synthetic_bytes(cfg.dataset, count) * 1.1)
    # more copies than the files: the embedded server's objects of what it stores, on the same root
    served = backend.copies(cfg.storage) - 1
    stored = int(synthetic_bytes(cfg.dataset, count) * (1.0 if cfg.dataset.format == "files" else 1.1))
    need += served * stored
    if need > free:
        where = f"storage={cfg.storage.name}{_BOTH if served else ''}"
        raise ConfigError(
            f"dataset.num_images={count}: {'the' if todo == count else f'the {todo} missing'} synthetic "
            f"{cfg.dataset.samples} need ~{sized(need)} on {where}, which has {sized(free)} free (its "
            f"kind's space: storage.kind={cfg.storage.kind}): lower dataset.num_images or choose another "
            "storage.root"
        )


def sized(n: float) -> str:
    """A number of bytes as a line says it: GB with one decimal, else MB, else kB."""
    if n >= 1e9:
        return f"{n / 1e9:.1f} GB"
    return f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"
