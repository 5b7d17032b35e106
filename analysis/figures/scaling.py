"""Multi-task cells (``platform.tasks_per_node``): the aggregate rate of a cell's tasks against their
number, one line per storage and pipeline (and per node count, where the campaign has several), beside
the ideal line (the one-task rate × tasks)."""

from __future__ import annotations

from pathlib import Path

from analysis.figures import plotting
from analysis.tables import bounds, tidy
from jobs import frameworks
from jobs.metrics import label

BOUND_NOTE = "text at a point: what limited most of the cell's runs (the report's cells table says why)"


def _mark_bounds(ax, one, key: str, medians) -> None:
    """Write each point's cell bound (as the cells table states it: ``bounds.cell``) beside its marker."""
    if "bound" not in one:
        return
    for x, y in medians.items():
        bound = bounds.cell(one.loc[one[key] == x])[0]
        if bound and y == y:
            ax.annotate(bound, (x, y), textcoords="offset points", xytext=(4, -9), fontsize=6)


def _lines(df):
    """Each row's line: storage · pipeline · threads N; with more than one framework the framework too,
    and a PyTorch cell's DataLoader workers instead of its threads (never merged with TensorFlow's)."""
    line = df["storage"].astype(str) + " · " + tidy.text(df["pipeline"])
    if len(tidy.frameworks(df)) < 2:
        return line + " · threads " + df["threads"].astype(str)
    fw = tidy.text(df["framework"]).replace("", tidy.TENSORFLOW)
    word = fw.map(lambda f: f" · {frameworks.unit(f)}s ")
    return line + " · " + fw + word + tidy.readers(df)


def scaling_figure(rows, folder: Path, figure) -> list[Path]:
    """images/s (left) and MB/s (right) against tasks per cell, median with min–max whiskers; drawn
    when a campaign has cells with different task counts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = rows.copy()
    if "tasks_per_cell" not in df or df["tasks_per_cell"].nunique() < 2:
        return []
    df["line"] = _lines(df)
    if "nodes" in df and df["nodes"].nunique() > 1:  # 2 tasks on one node and 1 on each of 2: two lines
        df["line"] += " · " + df["nodes"].astype(int).map(lambda n: f"{n} node{'s' if n > 1 else ''}")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric in zip(axes, ("images_per_s", "mb_per_s")):
        for name, one in df.groupby("line", sort=False):
            st = one.groupby("tasks_per_cell")[metric].agg(["median", "min", "max"]).sort_index()
            x = st.index.to_numpy()
            line = ax.errorbar(
                x,
                st["median"],
                yerr=[st["median"] - st["min"], st["max"] - st["median"]],
                marker="o",
                capsize=3,
                label=name,
            )
            if 1 in st.index:
                ax.plot(x, st.loc[1, "median"] * x, linestyle="--", linewidth=0.8, color=line[0].get_color())
            _mark_bounds(ax, one, "tasks_per_cell", st["median"])
        ax.set_xlabel("tasks per cell")
        ax.set_ylabel(label(metric))
        ax.set_xticks(sorted(df["tasks_per_cell"].unique()))
        ax.margins(x=0.12)
        ax.grid(linewidth=0.3)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.12)  # headroom for the labels
    axes[0].legend(fontsize=7)
    fig.suptitle(figure.title, fontsize=10)
    fig.text(
        0.01,
        0.01,
        "aggregate = every task's images (bytes) ÷ (last task's end − first task's start); dashed: "
        f"ideal, the one-task median × tasks; {BOUND_NOTE}",
        fontsize=6,
    )
    fig.tight_layout(rect=(0, 0.04, 1, 0.94))
    return plotting.save(fig, folder / figure.key)


def service_figure(rows, folder: Path, figure) -> list[Path]:
    """The consumer's images/s (left) and MB/s (right) against the tf.data service's workers, median
    with min–max whiskers; the same cell without the service dashed. Drawn when a campaign has
    service cells."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = rows.copy()
    if "service" not in df or not (df["service"].astype(int) > 0).any():
        return []
    df["service"] = df["service"].astype(int)
    df = df[df["tasks_per_cell"].astype(int) == 1] if "tasks_per_cell" in df else df
    df["line"] = _lines(df)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric in zip(axes, ("images_per_s", "mb_per_s")):
        for name, one in df.groupby("line", sort=False):
            on = one[one["service"] > 0].groupby("service")[metric].agg(["median", "min", "max"]).sort_index()
            if on.empty:
                continue
            line = ax.errorbar(
                on.index,
                on["median"],
                yerr=[on["median"] - on["min"], on["max"] - on["median"]],
                marker="o",
                capsize=3,
                label=f"{name}: service",
            )
            _mark_bounds(ax, one[one["service"] > 0], "service", on["median"])
            off = one[one["service"] == 0]
            if len(off):
                y = off[metric].median()
                ax.axhline(
                    y, linestyle="--", linewidth=0.9, color=line[0].get_color(), label=f"{name}: no service"
                )
                bound = bounds.cell(off)[0]
                if bound:
                    ax.annotate(
                        f"no service: {bound}",
                        (0, y),
                        xycoords=("axes fraction", "data"),
                        textcoords="offset points",
                        xytext=(4, 3),
                        fontsize=6,
                    )
        ax.set_xlabel("tf.data service workers")
        ax.set_ylabel(label(metric))
        ax.set_xticks(sorted(df.loc[df["service"] > 0, "service"].unique()))
        ax.margins(x=0.12)
        ax.grid(linewidth=0.3)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.12)  # headroom for the labels
    axes[0].legend(fontsize=7)
    fig.suptitle(figure.title, fontsize=10)
    fig.text(
        0.01, 0.01, f"points: the consumer's rate, median with min–max whiskers; {BOUND_NOTE}", fontsize=6
    )
    fig.tight_layout(rect=(0, 0.04, 1, 0.94))
    return plotting.save(fig, folder / figure.key)
