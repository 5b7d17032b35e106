"""Figs. 4 and 5 of the paper (the micro-benchmark's bandwidth): medians with min-max whiskers, one bar
group per storage (per storage and framework when the campaign read with TensorFlow and PyTorch), each
bar labelled with what limited its cell."""

from __future__ import annotations

from pathlib import Path

from analysis.figures import plotting
from analysis.figures.plotting import MARKED
from analysis.tables import bounds, tidy
from analysis.tables.order import thread_key, tier_order
from jobs import frameworks
from jobs.metrics import label

NOT_COLD = {"not_cold", "not_warm"}


def _mb_per_image(df) -> float:
    """MB per image when it is one number for every run (so a right axis in MB/s is honest), else 0."""
    per_image = (df["mb_per_s"] / df["images_per_s"]).dropna()
    factor = float(per_image.median()) if len(per_image) else 0.0
    return factor if factor > 0 and float((per_image / factor - 1).abs().max()) < 0.02 else 0.0


def _bars(ax, df, stats, flagged, storages, threads, annotate_mb: bool, unit: tuple[str, str]) -> list:
    """One bar group per ``storages`` entry (``_group``), one bar per thread or worker count (``_readers``):
    median, min-max whiskers, hatched when a run's cache was not as requested; MB/s written on the bars
    when the right axis cannot say it. ``unit``: a bar's legend word, singular and plural. Returns each bar's
    text of what limited it (``plotting.BarText``), placed once the figure's layout is known."""
    import matplotlib.pyplot as plt
    import numpy as np

    width = 0.8 / max(1, len(threads))
    greys = plt.cm.Greys(np.linspace(0.15, 0.75, max(1, len(threads))))
    x = np.arange(len(storages))
    labels = []
    for j, t in enumerate(threads):
        cells = [(s, t) in stats.index for s in storages]
        med = [stats.loc[(s, t), "median"] if ok else np.nan for s, ok in zip(storages, cells)]
        lo = [
            stats.loc[(s, t), "median"] - stats.loc[(s, t), "min"] if ok else 0
            for s, ok in zip(storages, cells)
        ]
        hi = [
            stats.loc[(s, t), "max"] - stats.loc[(s, t), "median"] if ok else 0
            for s, ok in zip(storages, cells)
        ]
        pos = x - 0.4 + width * (j + 0.5)
        bars = ax.bar(
            pos,
            med,
            width,
            color=greys[j],
            edgecolor="black",
            linewidth=0.6,
            label=f"{t} {unit[0] if t == '1' else unit[1]}",
        )
        ax.errorbar(pos, med, yerr=[lo, hi], fmt="none", ecolor="black", capsize=2, linewidth=0.8)
        for b, s, ok, top in zip(bars, storages, cells, hi):
            if ok and flagged.loc[(s, t)]:
                b.set_hatch("//")
            sub = df[(df["_group"] == s) & (df["_readers"] == t)]
            bound = bounds.cell(sub)[0] if "bound" in sub else ""
            over = []
            above = [f"{sub['mb_per_s'].median():.0f} MB/s"] if annotate_mb and len(sub) else []
            get = _get_latency(sub)  # level, in two short lines: a short bar's bound text stands below
            if (above or get) and np.isfinite(b.get_height()):
                over = [
                    ax.annotate(
                        "\n".join([*above, *get]) if get else above[0],
                        (b.get_x() + b.get_width() / 2, b.get_height() + top),  # over the whisker
                        xytext=(0, 2),
                        textcoords="offset points",
                        ha="center",
                        va="bottom",
                        fontsize=6,
                        rotation=0 if get else 90,
                    )
                ]
            if ok and bound in MARKED and np.isfinite(b.get_height()):
                colour = "black" if j < len(threads) / 2 else "white"
                text = ax.text(0, 0, MARKED[bound], rotation=90, va="bottom", fontsize=6)
                labels.append(plotting.BarText(text, b, colour, b.get_height() + top, over))
    return labels


def _get_latency(sub) -> list[str]:
    """An object-store bar's median GET (the median over its runs of each run's p50), [] for others."""
    if "get_latency_p50_ms" not in sub or not sub["get_latency_p50_ms"].notna().any():
        return []
    return ["GET", f"{sub['get_latency_p50_ms'].median():.1f} ms"]


def _groups(df) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """Give ``df`` its bar groups (``_group``) and what each bar counts (``_readers``): per storage, the map
    threads; with more than one framework per storage and framework, a PyTorch cell's bar counting its
    DataLoader workers. Returns the groups in order (slowest tier first, TensorFlow first), each with its
    storage and framework ("" with one framework)."""
    fws = tidy.frameworks(df)
    df["_readers"] = tidy.readers(df)
    if "reader" in df and tidy.text(df["reader"]).nunique() > 1:  # an object store read two ways: a tier each
        how = tidy.text(df["reader"])
        df["storage"] = df["storage"].astype(str) + how.where(how == "", " · " + how)
    storages = tier_order(df["storage"])
    if len(fws) < 2:
        df["_group"] = df["storage"].astype(str)
        return storages, {s: (s, "") for s in storages}
    fw = tidy.text(df["framework"]).replace("", tidy.TENSORFLOW)
    df["_group"] = df["storage"].astype(str) + " · " + fw
    present = set(df["_group"])
    groups = {f"{s} · {f}": (s, f) for s in storages for f in fws if f"{s} · {f}" in present}
    return list(groups), groups


def _legend_words(fws: list[str]) -> tuple[str, tuple[str, str]]:
    """The legend's title and a bar's word (singular, plural) for what read in parallel."""
    return frameworks.reader_words(fws or [frameworks.PAPERS])


def bandwidth_figure(rows, folder: Path, figure) -> list[Path]:
    """Images/s per thread count, one bar group per storage, MB/s on the right; PNG and SVG. With more
    than one framework one bar group per storage and framework, a PyTorch bar per DataLoader worker count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    df = rows.copy()
    df["threads"] = df["threads"].astype(str)
    fws = tidy.frameworks(df)
    title, unit = _legend_words(fws)
    groups, where = _groups(df)
    threads = sorted(df["_readers"].unique(), key=thread_key)
    stats = df.groupby(["_group", "_readers"])["images_per_s"].agg(["median", "min", "max"])
    flagged = df.groupby(["_group", "_readers"])["cache_state"].agg(lambda s: bool(set(s) & NOT_COLD))
    factor = _mb_per_image(df)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(groups) * max(1, len(threads)) / 3), 4.2))
    labels = _bars(ax, df, stats, flagged, groups, threads, annotate_mb=not factor, unit=unit)
    fs = df.groupby("storage")["fs_type"].first() if "fs_type" in df else {}
    objects = set(df.loc[df["requests"].notna(), "storage"]) if "requests" in df else set()  # S3 tiers

    def tick(g: str) -> str:
        s, fw = where[g]
        text = f"{s}\n({fs[s]})" if isinstance(fs.get(s), str) else s
        if s in objects:  # read by GETs; the file system is the server's, under its volumes
            text = f"{s}\n(objects{', ' + fs[s] if isinstance(fs.get(s), str) else ''})"
        return f"{text}\n{fw}" if fw else text

    ax.set_xticks(np.arange(len(groups)), [tick(g) for g in groups])
    ax.set_ylabel(label("images_per_s"))
    ax.set_xlabel("Storage (file system)" + (", framework" if len(fws) > 1 else ""))
    ax.set_title(figure.title, fontsize=10)
    ax.grid(axis="y", linewidth=0.3)
    ax.set_axisbelow(True)
    if factor:
        sec = ax.secondary_yaxis("right", functions=(lambda v: v * factor, lambda v: v / factor))
        sec.set_ylabel(label("mb_per_s"))
    handles, names = ax.get_legend_handles_labels()
    if flagged.any():
        from matplotlib.patches import Patch

        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//"))
        names.append("cache not as requested")
    # headroom: the legend must not cover a bar, nor a bar's text over it
    room = 1.45 if "get_latency_p50_ms" in df and df["get_latency_p50_ms"].notna().any() else 1.22
    ax.set_ylim(0, np.nanmax([stats["max"].max(), 1.0]) * room)
    ax.legend(
        handles,
        names,
        title=title,
        fontsize=8,
        title_fontsize=8,
        loc="upper left",
        ncol=len(handles),
        columnspacing=1.0,
        handlelength=1.5,
    )
    n_runs = df.groupby(["_group", "_readers"])["run"].count()
    runs = f"{n_runs.min()}" if n_runs.min() == n_runs.max() else f"{n_runs.min()}–{n_runs.max()}"
    note = f"bars: median; whiskers: min–max of {runs} runs per bar"
    if df["bound"].isin(list(MARKED)).any():
        note += "; text in a bar: what limited the cell (analysis/tables/bounds.py)"
    if flagged.any():
        note += "; hatched: a run's cache was not in the requested state"
    if "get_latency_p50_ms" in df and df["get_latency_p50_ms"].notna().any():
        note += "\nover an object store's bar: its median GET (p50 per run, median of runs)"
    fig.text(0.01, 0.01, note, fontsize=6)
    fig.tight_layout(rect=(0, 0.03 * (1 + note.count("\n")), 1, 1))
    plotting.inside_or_above(fig, ax, labels)
    return plotting.save(fig, folder / figure.key)
