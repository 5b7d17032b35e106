"""Sharded checkpoints (``workload=sharded_checkpoint``): save and cold-load throughput per tier and model
shape, as MLPerf Storage defines them (every rank's bytes over the slowest rank's duration)."""

from __future__ import annotations

from pathlib import Path

from analysis.figures import plotting
from analysis.tables import tidy
from analysis.tables.order import tier_order
from jobs.metrics import METRICS


def figure(rows, folder: Path, fig_spec) -> list[Path]:
    """Two panels (save, load): one group of bars per tier, slowest first, one bar per model shape and
    ranks written; median with min–max whiskers, each bar labelled with its ranks and the load's cache
    state."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = rows.copy()
    if df.empty or "save_throughput_gb_s" not in df:
        return []
    ranks = df["ranks_written"].astype(int)
    df["shape"] = (
        tidy.text(df["checkpoint_model"])
        + " · "
        + ranks.astype(str)
        + ranks.map({1: " rank"}).fillna(" ranks")
    )
    # through the burst buffer a run saves on the fast tier and loads from storage: its own group of bars
    bb = tidy.text(df.get("checkpoint_target", "")) == "burst_buffer"
    df["where"] = df["storage"].where(~bb, tidy.text(df.get("checkpoint_tiers", "")).str.replace("->", " → "))
    tiers = [
        t for base in tier_order(df["storage"]) for t in dict.fromkeys(df.loc[df["storage"] == base, "where"])
    ]
    shapes = list(dict.fromkeys(df["shape"]))
    width = 0.8 / len(shapes)
    panels = [("save_throughput_gb_s", "save (durable)")]
    if "drain_throughput_gb_s" in df and df["drain_throughput_gb_s"].notna().any():
        panels.append(("drain_throughput_gb_s", "drain (fast tier to storage)"))
    panels.append(("load_throughput_gb_s", "load (cold)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for ax, (metric, what) in zip(axes, panels):
        for k, shape in enumerate(shapes):
            for x, tier in enumerate(tiers):
                one = df[(df["where"] == tier) & (df["shape"] == shape) & df[metric].notna()]
                if one.empty:
                    continue
                med, lo, hi = one[metric].median(), one[metric].min(), one[metric].max()
                bar = ax.bar(
                    x + (k - (len(shapes) - 1) / 2) * width,
                    med,
                    width,
                    yerr=[[med - lo], [hi - med]],
                    capsize=3,
                    label=shape if x == 0 or tier == tiers[0] else None,
                    color=f"C{k}",
                )
                if metric == "load_throughput_gb_s":
                    state = "/".join(sorted(set(tidy.text(one["cache_state"]))))
                    ax.annotate(
                        state,
                        (bar[0].get_x() + width / 2, hi),
                        textcoords="offset points",
                        xytext=(0, 3),
                        ha="center",
                        fontsize=6,
                    )
        ax.set_xticks(range(len(tiers)), [t.replace(" → ", " →\n") for t in tiers], fontsize=8)
        ax.set_ylabel(f"{what.split()[0]} throughput ({METRICS[metric].unit})")
        ax.set_title(what, fontsize=9)
        ax.grid(axis="y", linewidth=0.3)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.12)
    handles, labels = axes[0].get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    axes[0].legend(uniq.values(), uniq.keys(), fontsize=7)
    fig.suptitle(fig_spec.title, fontsize=10)
    fig.text(
        0.01,
        0.01,
        "throughput = bytes of every rank written (read) ÷ the slowest rank's save (load), MLPerf "
        "Storage's definition; save ends at the last fsync; load reads back evicted shards, every byte "
        "checked; text over a load bar: its cache state",
        fontsize=6,
    )
    fig.tight_layout(rect=(0, 0.04, 1, 0.94))
    return plotting.save(fig, folder / fig_spec.key)
