"""The AlexNet mini-app's figures: Fig. 6 (threads), Fig. 7 (batch size), Fig. 8 (device reads over time)."""

from __future__ import annotations

from pathlib import Path

from analysis.figures import plotting
from analysis.tables import tidy
from analysis.tables.order import thread_key, tier_order
from analysis.tables.training import alexnet_rows
from jobs import frameworks
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


def _tick_handle():
    """The legend's entry for _stacked's tick: the runtime without prefetch, where it was the shorter."""
    from matplotlib.lines import Line2D

    return Line2D(
        [],
        [],
        color="black",
        marker="_",
        linestyle="",
        markersize=10,
        label="without prefetch, where it was faster",
    )


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


def _au(df, keys=("storage", "threads", "batch_size", "prefetching")):
    """Median AU per ``keys``, or an empty Series."""
    import pandas as pd

    if AU not in df or df[AU].isna().all():
        return pd.Series(dtype=float)
    return df.groupby(list(keys))[AU].median()


FIG6_KEYS = ("framework", "storage", "readers", "prefetching")  # one bar (part) of Fig. 6
ZERO = "...."  # the hatch of PyTorch's 0-worker bar: its whole runtime, no excess over another bar


def _fig6_groups(df, fws: list[str]) -> list[tuple[str, str]]:
    """Fig. 6's bar groups in order: (storage, framework), slowest tier first, TensorFlow first."""
    present = set(zip(df["storage"].astype(str), df["framework"]))
    return [(s, f) for s in tier_order(df["storage"]) for f in fws if (s, f) in present]


def _slots(groups, fw: str, readers: list[str], most: int):
    """Per reader count of framework ``fw``: its bars' x (one per group of ``fw``, centred in its
    group's 0.8) and the storages they stand for; and the bar width."""
    import numpy as np

    width = 0.8 / most
    half = 0.4 * (len(readers) / most)  # 0.4 exactly with the most bars, as before PyTorch was drawn
    at = np.array([i for i, (_, f) in enumerate(groups) if f == fw])
    storages = [s for s, f in groups if f == fw]
    return [(r, at - half + width * (j + 0.5), storages) for j, r in enumerate(readers)], width


def _under(ax, x, text: str) -> None:
    """``text`` (the bar's map threads or workers) under each bar at ``x``."""
    for xi in x:
        ax.annotate(text, (xi, 0), xytext=(0, -10), textcoords="offset points", ha="center", fontsize=7)


def _prefetch_bars(ax, fw: str, slots, width, med, au) -> tuple[bool, bool]:
    """The bars of a framework that prefetches in its pipeline (TensorFlow's tf.data): gray with prefetch,
    white on top the excess without it, per map thread count; (whether a no-prefetch run was faster
    anywhere, whether AU was written)."""
    import numpy as np

    ticked = labelled = False
    for t, x, storages in slots:
        on = [med.get((fw, s, t, True), np.nan) for s in storages]
        off = [med.get((fw, s, t, False), np.nan) for s in storages]
        ticked = _stacked(ax, x, on, off, width * 0.9, "0.6") or ticked
        labelled = _au_labels(ax, x, on, [au.get((fw, s, t, True), np.nan) for s in storages]) or labelled
        _under(ax, x, t)
    return ticked, labelled


def _worker_bars(ax, fw: str, slots, width, med, au) -> bool:
    """The bars of a framework whose workers load ahead (PyTorch's DataLoader), per worker count: gray with
    N >= 1 workers loading ahead, hatched white with 0 (the training process loads each batch between its
    steps: PyTorch's run without prefetch, drawn as a bar of its own, since N workers read with N
    processes where it reads with one); whether AU was written."""
    import numpy as np

    labelled = False
    for n, x, storages in slots:
        ahead = n != "0"
        runtime = np.array([med.get((fw, s, n, ahead), np.nan) for s in storages], dtype=float)
        ax.bar(
            x,
            np.where(np.isnan(runtime), 0.0, runtime),
            width * 0.9,
            color="0.6" if ahead else "white",
            hatch=None if ahead else ZERO,
            edgecolor="black",
            linewidth=0.6,
        )
        if ahead:
            au_n = [au.get((fw, s, n, True), np.nan) for s in storages]
            labelled = _au_labels(ax, x, runtime, au_n) or labelled
        _under(ax, x, n)
    return labelled


def _fig6_handles(fws: list[str], ticked: bool, labelled: bool) -> list:
    """Fig. 6's legend: what gray, white (and hatched) mean for the frameworks drawn."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    tf, pt = _labels(fws, workers=False), _labels(fws, workers=True)
    gray = {
        (True, False): "prefetch 1 batch",
        (False, True): "DataLoader workers loading ahead",
        (True, True): f"{tf}: prefetch 1 batch; {pt}: workers loading ahead",
    }[(bool(tf), bool(pt))]
    handles = [Patch(facecolor="0.6", edgecolor="black", label=gray)]
    if tf:
        white = (f"{tf}: " if pt else "") + "excess without prefetch (I/O cost)"
        handles.append(Patch(facecolor="white", edgecolor="black", label=white))
    if pt:
        zero = (f"{pt}: " if tf else "") + "0 workers, the training process loads each batch"
        handles.append(Patch(facecolor="white", edgecolor="black", hatch=ZERO, label=zero))
    if ticked:
        handles.append(_tick_handle())
    if labelled:
        au = "with prefetch" if not pt else "of the gray bars" if tf else "with workers"
        handles.append(Line2D([], [], linestyle="", label=f"n%: AU {au} (compute ÷ runtime)"))
    return handles


def _labels(fws: list[str], workers: bool) -> str:
    """The names of the frameworks of ``fws`` whose workers load ahead (``workers``) or whose pipeline
    prefetches, joined ('' for none)."""
    return ", ".join(frameworks.label(f) for f in fws if frameworks.with_workers(f) == workers)


def _fig6_xlabel(fws: list[str]) -> str:
    """What the x axis and the numbers under the bars are."""
    tf, pt = _labels(fws, workers=False), _labels(fws, workers=True)
    if not pt:
        return "Storage (numbers under the bars: map threads)"
    if not tf:
        return "Storage (numbers under the bars: DataLoader workers)"
    return f"Storage, framework; numbers under the bars:\nmap threads ({tf}), DataLoader workers ({pt})"


def _commonest_batch(df):
    """The rows of ``df`` at its commonest batch size, and that batch size."""
    batch = int(df["batch_size"].mode().iloc[0])
    return df[df["batch_size"] == batch], batch


def _fig6_bars(ax, df, fws: list[str], groups, med) -> tuple[bool, bool]:
    """Every framework's bars, a group per (storage, framework) of ``groups`` with as many slots as the
    framework with the most reader counts; (whether a no-prefetch run was faster, whether AU was written)."""
    readers = {fw: _sorted_threads(df.loc[df["framework"] == fw, "readers"]) for fw in fws}
    most = max(len(r) for r in readers.values())
    au = _au(df, FIG6_KEYS)
    ticked = labelled = False
    for fw in fws:
        slots, width = _slots(groups, fw, readers[fw], most)
        if frameworks.with_workers(fw):
            labelled = _worker_bars(ax, fw, slots, width, med, au) or labelled
        else:
            t, a = _prefetch_bars(ax, fw, slots, width, med, au)
            ticked, labelled = ticked or t, labelled or a
    return ticked, labelled


def fig6(results, folder: Path, figure) -> list[Path]:
    """Runtime against map threads, prefetch on (gray) and the excess without prefetch (white); with
    PyTorch's cells a bar group per storage and framework, PyTorch's bars per DataLoader worker count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    df = alexnet_rows(results)
    if df.empty:
        return []
    df, batch = _commonest_batch(df)
    fws = tidy.frameworks(df)
    groups = _fig6_groups(df, fws)
    rt = tidy.runtime_column(df)
    med = df.groupby(list(FIG6_KEYS))[rt].median()
    bars = sum(df.loc[df["framework"] == f, "readers"].nunique() for _, f in groups)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * bars / 2), 4.2))
    ticked, labelled = _fig6_bars(ax, df, fws, groups, med)
    ax.set_xticks(np.arange(len(groups)), [s if len(fws) == 1 else f"{s}\n{f}" for s, f in groups])
    ax.tick_params(axis="x", pad=14)
    ax.set_xlabel(_fig6_xlabel(fws))
    ax.set_ylabel(label(rt))
    scale = df[["image_side", "width"]].drop_duplicates().iloc[0]
    top = max(float(med.max()), 1e-9)
    ax.set_ylim(0, top * 1.3)  # headroom for the legend
    ax.set_title(
        f"Fig. 6: AlexNet runtime, batch {batch}, {int(scale['image_side'])} px, width {scale['width']:g} "
        f"(median of runs)",
        fontsize=9,
    )
    legend = ax.legend(handles=_fig6_handles(fws, ticked, labelled), fontsize=8, loc="upper right")
    ax.grid(axis="y", linewidth=0.3)
    ax.set_axisbelow(True)
    fig.tight_layout()
    _above_the_bars(fig, ax, legend, top)  # 1.3 × the tallest bar, unless the legend would cover it
    return plotting.save(fig, folder / figure.key)


def _above_the_bars(fig, ax, legend, top: float) -> None:
    """Raise the y limit until ``legend`` (anchored at the top) sits above the tallest bar (``top``)."""
    fig.canvas.draw()
    bottom = legend.get_window_extent().transformed(ax.transAxes.inverted()).y0
    if top / ax.get_ylim()[1] > bottom - 0.03:
        ax.set_ylim(0, top / max(bottom - 0.03, 0.3))
        fig.tight_layout()


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
    labelled = ticked = False
    for ax, s in zip(axes[0], storages):
        x = np.arange(len(batches))
        on = [med.get((s, b, True), np.nan) for b in batches]
        off = [med.get((s, b, False), np.nan) for b in batches]
        ticked = _stacked(ax, x, on, off, 0.6, "0.6") or ticked
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
    if ticked:
        handles.append(_tick_handle())
    if labelled:
        handles.append(Line2D([], [], linestyle="", label="n%: AU with prefetch"))
    legend = axes[0][-1].legend(handles=handles, fontsize=7, loc="upper right")
    fig.suptitle(
        f"Fig. 7: AlexNet runtime against batch size, {threads} map threads (median of runs)", fontsize=9
    )
    fig.tight_layout()
    _above_the_bars(fig, axes[0][-1], legend, float(np.nanmax(med.values)))  # the panels share the y axis
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
