"""Data layout and shuffling (``dataset.format`` × ``shuffle``): the micro-benchmark's images/s side
by side per storage tier, one bar per layout."""

from __future__ import annotations

from pathlib import Path

from analysis.figures import plotting
from analysis.figures.plotting import MARKED
from analysis.tables import bounds, tidy
from analysis.tables.order import thread_key, tier_order
from jobs import frameworks
from jobs.metrics import label


def _layouts(df) -> list[tuple[str, str]]:
    order = {"files": 0, "tfrecord": 1, "hdf5": 2, "npz": 3}
    pairs = set(
        zip(tidy.text(df["format"]).replace("", "files"), tidy.text(df["shuffle"]).replace("", "global"))
    )
    return sorted(pairs, key=lambda p: (order.get(p[0], 9), p[1] != "global", p[1]))


def layouts_figure(rows, folder: Path, figure) -> list[Path]:
    """One panel per storage (and per pipeline when both were run): images/s per map-thread count,
    one bar per format × shuffle, median with min-max whiskers. Drawn only when the campaign varied
    the layout or the shuffle."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    df = rows.copy()
    df["format"] = tidy.text(df["format"]).replace("", "files")
    df["shuffle"] = tidy.text(df["shuffle"]).replace("", "global")
    df["threads"] = df["threads"].astype(str)
    several = len(tidy.frameworks(df)) > 1
    if several:  # a panel per pipeline and framework, a PyTorch bar per DataLoader worker count
        fw = tidy.text(df["framework"]).replace("", tidy.TENSORFLOW)
        df["pipeline"] = tidy.text(df["pipeline"]) + " · " + fw
        df["threads"] = tidy.readers(df)
    layouts = _layouts(df)
    if len(layouts) < 2:
        return []
    storages = tier_order(df["storage"])
    pipelines = list(dict.fromkeys(tidy.text(df["pipeline"])))
    fig, axes = plt.subplots(
        len(pipelines),
        len(storages),
        squeeze=False,
        sharey="row",
        figsize=(max(6.0, 4.2 * len(storages)), 3.6 * len(pipelines) + 0.6),
    )
    formats = list(dict.fromkeys(f for f, _ in layouts))
    colors = dict(zip(formats, plt.cm.tab10(np.arange(len(formats)) % 10)))  # colour: format; hatch: shuffle
    hatches = {"global": "", "local": "..", "none": "//"}
    for r, pipe in enumerate(pipelines):
        for c, storage in enumerate(storages):
            ax = axes[r][c]
            sub = df[(df["storage"] == storage) & (tidy.text(df["pipeline"]) == pipe)]
            threads = sorted(sub["threads"].unique(), key=thread_key)
            width = 0.8 / len(layouts)
            for j, (fmt, shuffle) in enumerate(layouts):
                one = sub[(sub["format"] == fmt) & (sub["shuffle"] == shuffle)]
                stats = one.groupby("threads")["images_per_s"].agg(["median", "min", "max"])
                med = np.array([stats["median"].get(t, np.nan) for t in threads])
                lo = np.nan_to_num(med - np.array([stats["min"].get(t, np.nan) for t in threads]))
                hi = np.nan_to_num(np.array([stats["max"].get(t, np.nan) for t in threads]) - med)
                pos = np.arange(len(threads)) - 0.4 + width * (j + 0.5)
                ax.bar(
                    pos,
                    med,
                    width,
                    color=colors[fmt],
                    edgecolor="black",
                    linewidth=0.5,
                    hatch=hatches.get(shuffle.split(":")[0], "xx"),
                    label=f"{fmt}, shuffle {shuffle}",
                )
                ax.errorbar(pos, med, yerr=[lo, hi], fmt="none", ecolor="black", capsize=2, linewidth=0.7)
                for x, t, m in zip(pos, threads, med):
                    b = bounds.cell(one[one["threads"] == t])[0]
                    if b in MARKED and np.isfinite(m):
                        ax.text(x, m * 0.04, MARKED[b], rotation=90, ha="center", va="bottom", fontsize=6)
            ax.set_xticks(np.arange(len(threads)), threads)
            ax.set_xlabel(frameworks.reader_words(tidy.frameworks(df))[0])
            ax.set_title(f"{storage} · {pipe}", fontsize=9)
            ax.grid(axis="y", linewidth=0.3)
            ax.set_axisbelow(True)
        axes[r][0].set_ylabel(label("images_per_s"))
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(
        handles, names, loc="lower center", bbox_to_anchor=(0.5, 0.035), ncol=min(4, len(layouts)), fontsize=8
    )
    fig.suptitle(figure.title, fontsize=10)
    n_runs = df.groupby(["storage", "pipeline", "format", "shuffle", "threads"])["run"].count()
    runs = f"{n_runs.min()}" if n_runs.min() == n_runs.max() else f"{n_runs.min()}–{n_runs.max()}"
    fig.text(
        0.01,
        0.005,
        f"bars: median; whiskers: min–max of {runs} runs; colour: format; plain: global shuffle, "
        "dotted: local, hatched: none; text in a bar: what limited most of its runs (none: the storage, or "
        "latency)",
        fontsize=6,
    )
    fig.tight_layout(rect=(0, 0.06 + 0.05 * ((len(layouts) + 3) // 4), 1, 0.95))
    return plotting.save(fig, folder / figure.key)
