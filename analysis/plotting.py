"""What every figure shares: saving as PNG and SVG, and reading a run's I/O trace."""

from __future__ import annotations

import functools
from pathlib import Path

STORAGE_PRESETS = Path(__file__).resolve().parent.parent / "conf" / "storage"


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


def save(fig, stem: Path) -> list[Path]:
    """Write ``fig`` as ``<stem>.png`` and ``<stem>.svg`` and close it."""
    import matplotlib.pyplot as plt

    from analysis import outputs

    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        p = stem.with_suffix(f".{ext}")
        with outputs.create(p, binary=True) as f:
            fig.savefig(f, format=ext, dpi=150)
        paths.append(p)
    plt.close(fig)
    return paths


def read_trace(folder: Path, rel: str):
    """(samples, marks) of a trace CSV written by jobs.observe.trace: one row per interval, and event -> time."""
    import pandas as pd

    t = pd.read_csv(folder / rel)
    is_event = t["event"].notna() & (t["event"] != "")
    samples = t[~is_event].astype({"t_s": float, "dt_s": float, "read_mb_s": float, "write_mb_s": float})
    marks = dict(zip(t.loc[is_event, "event"], t.loc[is_event, "t_s"].astype(float)))
    return samples, marks


def step_series(samples, column: str, t0: float) -> tuple[list[float], list[float]]:
    """x, y for a step="pre" plot: value i covers (x[i-1], x[i]]; the first interval starts where it began."""
    x = [float(samples["t_s"].iloc[0] - samples["dt_s"].iloc[0]) - t0, *(samples["t_s"] - t0)]
    y = [float(samples[column].iloc[0]), *samples[column]]
    return x, y


def runtime_column(df, steady: str = "steady_runtime_s", total: str = "runtime_s") -> str:
    """The runtime the figures compare: without the first step (graph tracing) when every row has it,
    else the whole runtime (records from before it was recorded); the axis label says which."""
    return steady if steady in df and df[steady].notna().all() else total
