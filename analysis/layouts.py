"""Data layout and shuffling (``dataset.format`` × ``shuffle``): the micro-benchmark's images/s side
by side per storage tier, and a table of how much of the device each layout reached."""

from __future__ import annotations

from pathlib import Path

from analysis import bounds, plotting, tables
from analysis.figures import MARKED
from jobs.metrics import label

PAPER = ("files", "global")  # the paper's layout: one JPEG per file, a full shuffle


def _thread_key(t) -> tuple[int, float]:
    s = str(t)
    return (1, 0.0) if s == "autotune" else (0, float(s))


def _layouts(df) -> list[tuple[str, str]]:
    order = {"files": 0, "tfrecord": 1, "hdf5": 2}
    pairs = set(
        zip(tables.text(df["format"]).replace("", "files"), tables.text(df["shuffle"]).replace("", "global"))
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
    df["format"] = tables.text(df["format"]).replace("", "files")
    df["shuffle"] = tables.text(df["shuffle"]).replace("", "global")
    df["threads"] = df["threads"].astype(str)
    layouts = _layouts(df)
    if len(layouts) < 2:
        return []
    storages = plotting.tier_order(df["storage"])
    pipelines = list(dict.fromkeys(tables.text(df["pipeline"])))
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
            sub = df[(df["storage"] == storage) & (tables.text(df["pipeline"]) == pipe)]
            threads = sorted(sub["threads"].unique(), key=_thread_key)
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
            ax.set_xlabel("map threads")
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
        "dotted: local, hatched: none; text in a bar: what limited most of its runs (none: the storage, or latency)",
        fontsize=6,
    )
    fig.tight_layout(rect=(0, 0.06 + 0.05 * ((len(layouts) + 3) // 4), 1, 0.95))
    return plotting.save(fig, folder / figure.key)


def reach(summary):
    """Per micro-benchmark cell: layout, shuffle, images/s and MB/s (medians), the share of fio's
    rate over the same stored files (``efficiency``, when the campaign has baselines) and what limited
    it; the paper's layout first. None when the campaign has one layout only."""
    if summary is None or summary.empty or "format" not in summary:
        return None
    s = summary[summary["kind"] == "microbench"].copy()
    if s.empty:
        return None
    s["format"] = tables.text(s["format"]).replace("", "files")
    s["shuffle"] = tables.text(s["shuffle"]).replace("", "global")
    if len(set(zip(s["format"], s["shuffle"]))) < 2:
        return None
    s["_paper"] = [(f, sh) != PAPER for f, sh in zip(s["format"], s["shuffle"])]
    s["_t"] = [_thread_key(t) for t in s["threads"]]
    s = s.sort_values(["storage", "pipeline", "_t", "_paper", "format", "shuffle"])
    cols = [
        c
        for c in (
            "storage",
            "pipeline",
            "threads",
            "format",
            "shuffle",
            "images_per_s_median",
            "mb_per_s_median",
            "small_file_mb_s",
            "efficiency",
            "bound",
        )
        if c in s
    ]
    out = s[cols].round(3)
    out["images_per_s_median"] = out["images_per_s_median"].round().astype("Int64")  # 1176, not 1.18e+03
    return out
