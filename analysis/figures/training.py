"""The AlexNet mini-app's figures: Fig. 6 (threads), Fig. 7 (batch size), Fig. 8 (device reads over time)."""

from __future__ import annotations

from pathlib import Path

from analysis.figures import plotting
from analysis.tables import tidy
from analysis.tables.order import thread_key, tier_order
from analysis.tables.training import alexnet_rows
from jobs.metrics import label


def _sorted_threads(values) -> list[str]:
    return sorted({str(v) for v in values}, key=thread_key)


def _stacked(ax, x, on, off, width, color):
    """Gray bar: runtime with prefetch; white bar on top: the excess without it (as the paper draws)."""
    import numpy as np

    on = np.asarray(on, dtype=float)
    off = np.asarray(off, dtype=float)
    base = np.where(np.isnan(on), 0.0, on)
    excess = np.where(np.isnan(off), 0.0, np.clip(off - base, 0, None))
    ax.bar(x, base, width, color=color, edgecolor="black", linewidth=0.6)
    ax.bar(x, excess, width, bottom=base, color="white", edgecolor="black", linewidth=0.6)
    # where prefetch was slower than none, mark the no-prefetch runtime instead of hiding it
    below = ~np.isnan(off) & (off < base)
    if below.any():
        ax.plot(np.asarray(x)[below], off[below], "k_", markersize=10)
    return bool(below.any())


AU = "train_au_percentage"


def _au_labels(ax, x, on, au) -> bool:
    """AU (%) of the prefetch runs written half-way up their gray bars (clear of the ticks at the top);
    False when none is known."""
    import numpy as np

    shown = False
    for xi, top, a in zip(x, on, au):
        if np.isnan(top) or a is None or np.isnan(a):
            continue
        ax.annotate(f"{a:.0f}%", (xi, top / 2), ha="center", va="center", fontsize=6, rotation=90)
        shown = True
    return shown


def _au(df):
    """Median AU per (storage, threads, batch_size, prefetching), or an empty Series."""
    import pandas as pd

    if AU not in df or df[AU].isna().all():
        return pd.Series(dtype=float)
    return df.groupby(["storage", "threads", "batch_size", "prefetching"])[AU].median()


def fig6(results, folder: Path, figure) -> list[Path]:
    """Runtime against map threads, prefetch on (gray) and the excess without prefetch (white)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    df = alexnet_rows(results)
    if df.empty:
        return []
    batch = int(df["batch_size"].mode().iloc[0])
    df = df[df["batch_size"] == batch]
    storages = tier_order(df["storage"])
    threads = _sorted_threads(df["threads"])
    rt = tidy.runtime_column(df)
    med = df.groupby(["storage", "threads", "prefetching"])[rt].median()
    au = _au(df)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(storages) * len(threads) / 2), 4.2))
    width = 0.8 / len(threads)
    ticked = labelled = False
    for j, t in enumerate(threads):
        x = np.arange(len(storages)) - 0.4 + width * (j + 0.5)
        on = [med.get((s, t, True), np.nan) for s in storages]
        off = [med.get((s, t, False), np.nan) for s in storages]
        ticked = _stacked(ax, x, on, off, width * 0.9, "0.6") or ticked
        labelled = _au_labels(ax, x, on, [au.get((s, t, batch, True), np.nan) for s in storages]) or labelled
        for xi in x:
            ax.annotate(t, (xi, 0), xytext=(0, -10), textcoords="offset points", ha="center", fontsize=7)
    ax.set_xticks(np.arange(len(storages)), storages)
    ax.tick_params(axis="x", pad=14)
    ax.set_xlabel("Storage (numbers under the bars: map threads)")
    ax.set_ylabel(label(rt))
    scale = df[["image_side", "width"]].drop_duplicates().iloc[0]
    top = max(float(med.max()), 1e-9)
    ax.set_ylim(0, top * 1.3)  # headroom for the legend
    ax.set_title(
        f"Fig. 6: AlexNet runtime, batch {batch}, {int(scale['image_side'])} px, width {scale['width']:g} "
        f"(median of runs)",
        fontsize=9,
    )
    handles = [
        Patch(facecolor="0.6", edgecolor="black", label="prefetch 1 batch"),
        Patch(facecolor="white", edgecolor="black", label="excess without prefetch (I/O cost)"),
    ]
    if ticked:
        handles.append(
            Line2D(
                [],
                [],
                color="black",
                marker="_",
                linestyle="",
                markersize=10,
                label="without prefetch, where it was faster",
            )
        )
    if labelled:
        handles.append(Line2D([], [], linestyle="", label="n%: AU with prefetch (compute ÷ runtime)"))
    ax.legend(handles=handles, fontsize=8, loc="upper right")
    ax.grid(axis="y", linewidth=0.3)
    ax.set_axisbelow(True)
    fig.tight_layout()
    return plotting.save(fig, folder / figure.key)


def fig7(results, folder: Path, figure) -> list[Path]:
    """Runtime against batch size at eight map threads (or the most there are), prefetch on and off."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Patch

    df = alexnet_rows(results)
    if df.empty or df["batch_size"].nunique() < 2:
        return []
    threads = "8" if "8" in set(df["threads"]) else _sorted_threads(df["threads"])[-1]
    df = df[df["threads"] == threads]
    # only the storages swept over batch size (a Fig. 6 cell at batch 64 elsewhere is no batch curve)
    swept = df.groupby("storage")["batch_size"].nunique()
    df = df[df["storage"].isin(swept[swept >= 2].index)]
    if df.empty:
        return []
    storages = tier_order(df["storage"])
    batches = sorted(df["batch_size"].unique())
    rt = tidy.runtime_column(df)
    med = df.groupby(["storage", "batch_size", "prefetching"])[rt].median()
    au = _au(df)
    fig, axes = plt.subplots(
        1, len(storages), figsize=(max(6.5, 4.2 * len(storages)), 3.8), squeeze=False, sharey=True
    )
    labelled = False
    for ax, s in zip(axes[0], storages):
        x = np.arange(len(batches))
        on = [med.get((s, b, True), np.nan) for b in batches]
        off = [med.get((s, b, False), np.nan) for b in batches]
        _stacked(ax, x, on, off, 0.6, "0.6")
        labelled = _au_labels(ax, x, on, [au.get((s, threads, b, True), np.nan) for b in batches]) or labelled
        ax.set_xticks(x, [str(b) for b in batches])
        ax.set_xlabel("Batch size")
        ax.set_title(s, fontsize=9)
        ax.grid(axis="y", linewidth=0.3)
        ax.set_axisbelow(True)
    axes[0][0].set_ylabel(label(rt))
    from matplotlib.lines import Line2D

    handles = [
        Patch(facecolor="0.6", edgecolor="black", label="prefetch 1 batch"),
        Patch(facecolor="white", edgecolor="black", label="excess without prefetch"),
    ]
    if labelled:
        handles.append(Line2D([], [], linestyle="", label="n%: AU with prefetch"))
    axes[0][-1].legend(handles=handles, fontsize=7, loc="upper right")
    fig.suptitle(
        f"Fig. 7: AlexNet runtime against batch size, {threads} map threads (median of runs)", fontsize=9
    )
    fig.tight_layout()
    return plotting.save(fig, folder / figure.key)


def fig8(results, folder: Path, figure) -> list[Path]:
    """Device MB read per second from the first to the last iterator call, prefetch off (white) and on
    (gray), one panel per storage; the first measured run of the cell with the fewest threads."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    df = alexnet_rows(results)
    df = df[tidy.text(df["trace_file"]) != ""]
    if df.empty:
        return []
    storages = tier_order(df["storage"])
    fig, axes = plt.subplots(len(storages), 1, figsize=(8.2, 2.6 * len(storages)), squeeze=False)
    for ax, s in zip(axes[:, 0], storages):
        sub = df[df["storage"] == s]
        t = _sorted_threads(sub["threads"])[0]
        sub = sub[sub["threads"] == t]
        for prefetching, face, z in ((False, "white", 1), (True, "0.6", 2)):
            runs = sub[sub["prefetching"] == prefetching].sort_values("run")
            if runs.empty:
                continue
            samples, marks = plotting.read_trace(folder, runs.iloc[0]["trace_file"])
            t0 = marks.get("first_iterator_call", 0.0)
            t1 = marks.get("last_iterator_call", samples["t_s"].max())
            # each sample covers (t - dt, t]; keep those that overlap the timed interval
            win = samples[(samples["t_s"] >= t0) & (samples["t_s"] - samples["dt_s"] <= t1)]
            if win.empty:
                continue
            x, y = plotting.step_series(win, "read_mb_s", t0)
            ax.fill_between(
                x,
                y,
                step="pre",
                facecolor=face,
                alpha=0.55 if prefetching else 1.0,
                zorder=z,
                label=f"prefetch {'1 batch' if prefetching else 'off'} (run {runs.iloc[0]['run']})",
            )
            ax.step(
                x,
                y,
                where="pre",
                color="black",
                linewidth=0.8 if prefetching else 1.1,
                linestyle="-" if prefetching else "--",
                zorder=4,
            )
            ax.axvline(
                t1 - t0, color="black", linestyle=":" if prefetching else "--", linewidth=0.8, zorder=3
            )
        device = sub["fs_type"].iloc[0]
        ax.set_title(
            f"{s} ({device}), {t} map thread{'s' if t != '1' else ''}; vertical lines: last iterator call "
            f"(dashed: prefetch off)",
            fontsize=8,
        )
        ax.set_ylabel("Read (MB/s)")
        ax.legend(
            handles=[
                Patch(facecolor="0.6", alpha=0.55, edgecolor="black", label="prefetch 1 batch"),
                Line2D([], [], color="black", linestyle="--", label="prefetch off"),
                Line2D([], [], color="black", linestyle=":", linewidth=0.8, label="last iterator call"),
            ],
            fontsize=7,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            borderaxespad=0,
        )
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
    axes[-1, 0].set_xlabel("Time since the first iterator call (s)")
    fig.suptitle("Fig. 8: device reads during AlexNet training, prefetch off and on", fontsize=9)
    fig.tight_layout()
    return plotting.save(fig, folder / figure.key)
