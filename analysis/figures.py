"""Figures 4 and 5 of the paper from the tidy results table: medians with min-max whiskers."""

from __future__ import annotations

from pathlib import Path

from analysis import plotting
from jobs.metrics import label

FIGURES = {
    # figure key: (workload, title)
    "fig4": ("microbench", "Fig. 4: input pipeline read → decode → resize 224×224 (median of runs)"),
    "fig5": ("readonly", "Fig. 5: input pipeline with read_file only (median of runs)"),
}
NOT_COLD = {"not_cold", "not_warm"}


def _thread_key(t) -> tuple[int, float]:
    s = str(t)
    return (1, 0.0) if s == "autotune" else (0, float(s))


def bandwidth_figure(results, workload: str, title: str, out_stem: Path) -> list[Path]:
    """Images/s per thread count, one bar group per storage, MB/s on the right; PNG and SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    df = results[results["workload"] == workload].copy()
    if df.empty:
        return []
    df["threads"] = df["threads"].astype(str)
    storages = list(dict.fromkeys(df["storage"]))
    threads = sorted(df["threads"].unique(), key=_thread_key)
    stats = df.groupby(["storage", "threads"])["images_per_s"].agg(["median", "min", "max"])
    flagged = df.groupby(["storage", "threads"])["cache_state"].agg(lambda s: bool(set(s) & NOT_COLD))
    # MB per image converts the left axis into the right one; only honest if it is one number.
    per_image = (df["mb_per_s"] / df["images_per_s"]).dropna()
    factor = float(per_image.median()) if len(per_image) else 0.0
    one_factor = factor > 0 and float((per_image / factor - 1).abs().max()) < 0.02

    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(storages) * max(1, len(threads)) / 3), 4.2))
    width = 0.8 / max(1, len(threads))
    greys = plt.cm.Greys(np.linspace(0.15, 0.75, max(1, len(threads))))
    x = np.arange(len(storages))
    for j, t in enumerate(threads):
        med, lo, hi, hatch = [], [], [], []
        for s in storages:
            if (s, t) in stats.index:
                r = stats.loc[(s, t)]
                med.append(r["median"]), lo.append(r["median"] - r["min"]), hi.append(r["max"] - r["median"])
                hatch.append(bool(flagged.loc[(s, t)]))
            else:
                med.append(np.nan), lo.append(0), hi.append(0), hatch.append(False)
        pos = x - 0.4 + width * (j + 0.5)
        bars = ax.bar(pos, med, width, color=greys[j], edgecolor="black", linewidth=0.6,
                      label=f"{t} thread{'s' if t != '1' else ''}")
        ax.errorbar(pos, med, yerr=[lo, hi], fmt="none", ecolor="black", capsize=2, linewidth=0.8)
        for b, h in zip(bars, hatch):
            if h:
                b.set_hatch("//")
        if not one_factor:
            for b, s in zip(bars, storages):
                sub = df[(df["storage"] == s) & (df["threads"] == t)]
                if len(sub) and np.isfinite(b.get_height()):
                    ax.annotate(f"{sub['mb_per_s'].median():.0f} MB/s", (b.get_x() + b.get_width() / 2, b.get_height()),
                                ha="center", va="bottom", fontsize=6, rotation=90)
    labels = []
    for s in storages:
        sub = df[df["storage"] == s]
        labels.append(f"{s}\n({sub['fs_type'].iloc[0]})" if "fs_type" in sub and sub["fs_type"].notna().any() else s)
    ax.set_xticks(x, labels)
    ax.set_ylabel(label("images_per_s"))
    ax.set_xlabel("Storage (file system)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", linewidth=0.3)
    ax.set_axisbelow(True)
    if one_factor:
        sec = ax.secondary_yaxis("right", functions=(lambda v: v * factor, lambda v: v / factor))
        sec.set_ylabel(label("mb_per_s"))
    handles, names = ax.get_legend_handles_labels()
    if any(flagged):
        from matplotlib.patches import Patch

        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//"))
        names.append("cache not as requested")
    top = np.nanmax([stats["max"].max(), 1.0])
    ax.set_ylim(0, top * 1.22)  # headroom for the legend, which must not cover a bar
    ax.legend(handles, names, title="map threads", fontsize=8, title_fontsize=8, loc="upper left",
              ncol=len(handles), columnspacing=1.0, handlelength=1.5)
    n_runs = df.groupby(["storage", "threads"])["run"].count()
    runs = f"{n_runs.min()}" if n_runs.min() == n_runs.max() else f"{n_runs.min()}–{n_runs.max()}"
    note = f"bars: median; whiskers: min–max of {runs} runs per bar"
    if any(flagged):
        note += "; hatched: a run's cache was not in the requested state"
    fig.text(0.01, 0.01, note, fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return plotting.save(fig, out_stem)


def render_all(results, folder: Path) -> list[Path]:
    """Every figure the results can draw, into ``folder``."""
    from analysis import checkpoints, training

    out: list[Path] = []
    for key, (workload, title) in FIGURES.items():
        out += bandwidth_figure(results, workload, title, folder / key)
    return out + training.render_all(results, folder) + checkpoints.render_all(results, folder)
