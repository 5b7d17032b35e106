"""Checkpoint figures: Fig. 9 (runtime per checkpoint target, the no-checkpoint runtime shaded) and
Fig. 10 (writes to the slow tier over time, direct versus burst buffer, the drain after the run)."""

from __future__ import annotations

from pathlib import Path

from analysis.figures import plotting
from analysis.tables import tidy
from jobs.metrics import label

KIND = "checkpoint"  # the workload module whose rows this module draws
TARGET_NAMES = {"slow": "direct", "fast": "direct", "burst_buffer": "burst buffer"}


def _label(row) -> str:
    mode = "" if row["checkpoint_mode"] == "sync" else f", {row['checkpoint_mode']}"
    tiers = str(row["checkpoint_tiers"]).replace("->", "\n→ ")  # a burst buffer's two tiers on two lines
    return f"{tiers}\n({TARGET_NAMES.get(row['checkpoint_target'], row['checkpoint_target'])}{mode})"


def fig9(results, folder: Path, figure) -> list[Path]:
    """Median runtime per checkpoint target (white bars, min-max whiskers) beside the median runtime of the
    same runs without checkpoints (grey), side by side so that neither hides the other (on a fast tier the
    runs without checkpoints can take longer: the machine's noise, not the checkpoints); the median stall
    per checkpoint written above each pair."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    df = results[results["kind"] == KIND].copy()
    if df.empty:
        return []
    df["label"] = df.apply(_label, axis=1)
    order = list(dict.fromkeys(df["label"]))
    g = df.groupby("label")
    rt = tidy.runtime_column(df)
    med, lo, hi = g[rt].median(), g[rt].min(), g[rt].max()
    base = g[tidy.runtime_column(df, "baseline_steady_runtime_s", "baseline_runtime_s")].median()
    stall = g["median_stall_s"].median()
    x = np.arange(len(order))
    width = 0.36  # two bars per target, side by side
    fig, ax = plt.subplots(figsize=(max(5.5, 1.6 * len(order)), 4.0))
    ax.bar(
        x - width / 2,
        [med[k] for k in order],
        width,
        color="white",
        edgecolor="black",
        label="runtime with checkpoints",
    )
    ax.bar(
        x + width / 2,
        [base[k] for k in order],
        width,
        color="0.75",
        edgecolor="black",
        linewidth=0.4,
        label="same runs without checkpoints",
    )
    ax.errorbar(
        x - width / 2,
        [med[k] for k in order],
        yerr=[[med[k] - lo[k] for k in order], [hi[k] - med[k] for k in order]],
        fmt="none",
        ecolor="black",
        capsize=3,
        linewidth=0.8,
    )
    for xi, k in zip(x, order):
        ax.annotate(
            f"stall {stall[k]:.2f} s a checkpoint",
            (xi, np.nanmax([hi[k], base[k]])),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            fontsize=7,
        )
    ax.set_xticks(x, order, fontsize=8)
    ax.set_ylabel(label(rt))
    ax.set_ylim(0, np.nanmax([*hi.values, *base.values]) * 1.25)
    steps = int(df["steps"].median()) if "steps" in df and df["steps"].notna().any() else 0
    ax.set_title(
        f"Fig. 9: runtime of {steps} steps with checkpoints per target (median, min–max)", fontsize=9
    )
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(axis="y", linewidth=0.3)
    ax.set_axisbelow(True)
    fig.tight_layout()
    return plotting.save(fig, folder / figure.key)


def _trace_device(folder: Path, run) -> str:
    """The device the run's trace counted (its record's ``trace_device``: the slow tier's disk)."""
    from jobs import records

    try:
        runs = records.runs_of(records.read(folder / str(run["record"])))
        # by its number: the record lists its warm-ups first
        return str(next(r for r in runs if r.run == int(run["run"])).get("trace_device") or "?")
    except (records.RecordError, StopIteration, KeyError, ValueError):
        return "?"


def fig10(results, folder: Path, figure) -> list[Path]:
    """MB/s written to the slow tier over time, direct-to-slow against the burst buffer (first measured
    run of each), with the end of training marked and the drain after it shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = results[(results["kind"] == KIND) & results["checkpoint_target"].isin(["slow", "burst_buffer"])]
    df = df[tidy.text(df["trace_file"]) != ""]
    if df.empty:
        return []
    groups = list(dict.fromkeys(zip(df["checkpoint_target"], df["checkpoint_tiers"], df["checkpoint_mode"])))
    fig, axes = plt.subplots(len(groups), 1, figsize=(7, 2.6 * len(groups)), squeeze=False, sharex=True)
    for ax, (target, tiers, mode) in zip(axes[:, 0], groups):
        run = (
            df[
                (df["checkpoint_target"] == target)
                & (df["checkpoint_tiers"] == tiers)
                & (df["checkpoint_mode"] == mode)
            ]
            .sort_values("run")
            .iloc[0]
        )
        s, marks = plotting.read_trace(folder, run["trace_file"])
        t0 = marks.get("first_iterator_call", 0.0)
        x, y = plotting.step_series(s, "write_mb_s", t0)
        ax.fill_between(x, y, step="pre", facecolor="0.6", edgecolor="black", linewidth=0.7)
        end = marks.get("end_of_training", x[-1] + t0) - t0
        drained = marks.get("drain_finished", end + t0) - t0
        ax.axvline(end, color="black", linestyle="--", linewidth=0.9, label="end of training")
        if drained > end + 1e-3:
            ax.axvspan(
                end,
                drained,
                color="tab:blue",
                alpha=0.3,
                zorder=3,
                linewidth=0,
                label=f"drain after training ({drained - end:.2f} s)",
            )
        name = "direct to the slow tier" if target == "slow" else "burst buffer"
        dt = float(s["dt_s"].median())
        ax.set_title(
            f"{name}: {tiers} ({mode})\nthe slow tier's device {_trace_device(folder, run)}, sampled every "
            f"{dt:.2g} s",
            fontsize=8,
        )  # two lines: a long mount path fits the figure's width
        # a bar is one sample: the drain's last writes show in the sample that holds its end, which may end
        # after the shaded drain (its exact times)
        ax.set_ylabel("Write (MB/s per sample)", fontsize=8)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("Time since training started (s)")
    axes[-1, 0].set_xlim(left=0)
    fig.suptitle("Fig. 10: writes to the slow tier's device during and after training", fontsize=9)
    fig.tight_layout()
    return plotting.save(fig, folder / figure.key)
