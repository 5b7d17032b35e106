"""The capacity search's figure: AU against accelerators per tier, with the threshold, the prediction
and the answer (``capacity.csv``)."""

from __future__ import annotations

from pathlib import Path

from analysis.figures import plotting
from analysis.tables.capacity import CAPACITY, KIND, per_node
from analysis.tables.order import tier_order


def _nodes(df):
    return df["nodes"].fillna(1).astype(int) if "nodes" in df else [1] * len(df)


def _threshold(df, folder: Path) -> float | None:
    """The AU threshold of the cells' accelerator, from the first cell's record (a cell outside a capacity
    search: an MLPerf-shaped one), or None where it cannot be read."""
    from jobs import records

    try:
        rec = records.read(Path(folder) / str(df["cell_dir"].iloc[0]) / records.FILENAME)
        return float(rec.config["accelerator"]["au_threshold"])
    except (records.RecordError, OSError, KeyError, TypeError, ValueError):
        return None


def capacity_figure(results, folder: Path, figure) -> list[Path]:
    """AU (the slowest accelerator's, the lowest of the runs: what the search holds to the threshold and the
    report's table gives as "AU min") against accelerators, one line per tier; the threshold as a line and
    each tier's predicted count (capacity.csv) as a dashed mark."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    from matplotlib.ticker import MaxNLocator

    df = results[results["kind"] == KIND]
    if df.empty:
        return []
    pred = pd.read_csv(folder / CAPACITY) if (folder / CAPACITY).exists() else pd.DataFrame()
    fig, ax = plt.subplots(figsize=(6.8, 4.0))
    for tier in tier_order(df["storage"]):
        one = df[df["storage"] == tier]
        au_min = one.groupby(per_node(one))["train_au_percentage"].min()
        line = ax.plot(au_min.index, au_min.values, marker="o", label=tier)[0]
        mine = pred[pred["tier"] == tier] if not pred.empty else pred
        if not mine.empty and mine["predicted_n"].iloc[0] > 0:
            ax.axvline(
                mine["predicted_n"].iloc[0],
                color=line.get_color(),
                linestyle="--",
                linewidth=1,
                label=f"{tier}: predicted {int(mine['predicted_n'].iloc[0])}",
            )
        if not mine.empty and mine["measured_n"].iloc[0] > 0:
            n = int(mine["measured_n"].iloc[0])
            ax.plot(
                [n],
                [au_min.get(n)],
                marker="*",
                markersize=14,
                color=line.get_color(),
                linestyle="",
                label=f"{tier}: measured {n}",
            )
    threshold = float(pred["au_threshold"].iloc[0]) if not pred.empty else _threshold(df, folder)
    if threshold is not None:
        ax.axhline(
            100 * threshold,
            color="black",
            linestyle=":",
            linewidth=1,
            label=f"AU threshold {100 * threshold:.0f}%",
        )
    nodes = sorted(set(_nodes(df)))
    ax.set_xlabel(
        "Emulated accelerators (tasks of the cell)"
        if nodes == [1]
        else f"Emulated accelerators per node (on {', '.join(map(str, nodes))} nodes)"
    )
    ax.set_ylabel("AU min of runs, slowest accelerator (%)")
    ax.set_ylim(0, 105)
    ax.set_xlim(0.5, max(per_node(df).max(), pred["predicted_n"].max() if not pred.empty else 0) + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # whole accelerators only
    ax.set_title(
        f"Accelerators the storage can feed: {', '.join(sorted(set(pred['accelerator'])))}"
        if not pred.empty
        else "Emulated accelerators: AU (min of runs)",
        fontsize=9,
    )
    ax.grid(linewidth=0.3)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return plotting.save(fig, folder / figure.key)
