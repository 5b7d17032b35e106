"""The order tables and figures list things in: tiers from the slowest device to the fastest, map
threads by number with ``autotune`` last."""

from __future__ import annotations

import functools
from pathlib import Path

STORAGE_PRESETS = Path(__file__).resolve().parent.parent.parent / "conf" / "storage"


def tier_order(names) -> list[str]:
    """The tiers ``names`` (each once) from the slowest device to the fastest, by the Table I read rate
    of their preset (HDD, SSD, Optane, Lustre, as the paper draws them); tiers whose preset gives none
    keep their order, after the others."""
    unique = list(dict.fromkeys(str(n) for n in names))
    return sorted(unique, key=_preset_read_rate)  # stable: equal rates keep their order


@functools.cache
def _preset_read_rate(name: str) -> float:
    """Table I's read rate in tier ``name``'s preset (infinite when it gives none); read once per process."""
    from omegaconf import OmegaConf

    preset = STORAGE_PRESETS / f"{name}.yaml"
    value = OmegaConf.load(preset).get("ior_read_mb_s") if preset.is_file() else None
    return float(value) if value is not None else float("inf")


def thread_key(t) -> tuple[int, float]:
    """The sort key of a map-thread count: numbers in order, ``autotune`` after them."""
    s = str(t)
    return (1, 0.0) if s == "autotune" else (0, float(s))
