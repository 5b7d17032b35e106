"""What every figure shares: saving as PNG and SVG, reading a run's I/O trace, and the text a bar gets
for what limited its cell."""

from __future__ import annotations

from pathlib import Path

# every bar says what limited its cell: a bar without text would leave the reader to guess which bound it is
MARKED = {
    "cpu": "CPU-bound",
    "cache": "from cache",
    "mixed": "mixed",
    "storage": "storage-bound",
    "latency": "latency-bound",
}


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
    """(samples, marks) of a trace CSV written by jobs.observe.trace: one row per interval, and
    event -> time."""
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
