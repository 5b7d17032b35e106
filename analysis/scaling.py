"""Multi-task cells (``platform.tasks_per_node``): the aggregate rate of a cell's tasks against their
number, one line per storage and pipeline, beside the ideal line (the one-task rate × tasks)."""

from __future__ import annotations

from pathlib import Path

from analysis import plotting, tables
from jobs.metrics import label


def scaling_figure(rows, folder: Path, figure) -> list[Path]:
    """images/s (left) and MB/s (right) against tasks per cell, median with min–max whiskers; drawn
    when a campaign has cells with different task counts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = rows.copy()
    if "tasks_per_cell" not in df or df["tasks_per_cell"].nunique() < 2:
        return []
    df["line"] = df["storage"].astype(str) + " · " + tables.text(df["pipeline"]) + " · threads " + df["threads"].astype(str)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric in zip(axes, ("images_per_s", "mb_per_s")):
        for name, one in df.groupby("line", sort=False):
            st = one.groupby("tasks_per_cell")[metric].agg(["median", "min", "max"]).sort_index()
            x = st.index.to_numpy()
            line = ax.errorbar(x, st["median"], yerr=[st["median"] - st["min"], st["max"] - st["median"]], marker="o",
                               capsize=3, label=name)
            if 1 in st.index:
                ax.plot(x, st.loc[1, "median"] * x, linestyle="--", linewidth=0.8, color=line[0].get_color())
        ax.set_xlabel("tasks per cell")
        ax.set_ylabel(label(metric))
        ax.set_xticks(sorted(df["tasks_per_cell"].unique()))
        ax.grid(linewidth=0.3)
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=7)
    fig.suptitle(figure.title, fontsize=10)
    fig.text(0.01, 0.01, "aggregate = every task's images (bytes) ÷ (last task's end − first task's start); dashed: "
             "ideal, the one-task median × tasks", fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 0.94))
    return plotting.save(fig, folder / figure.key)
