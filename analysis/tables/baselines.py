"""Table I (the tiers' own bandwidth) and the micro-benchmark's efficiency against its tier."""

from __future__ import annotations

from pathlib import Path

from analysis.tables import tidy

TABLE_I = "table_i"


def table_i(baselines, configs: dict):
    """Per storage: median (min-max) sequential read and write MB/s, the tool, and the paper's figures."""
    import pandas as pd

    if baselines.empty:
        return pd.DataFrame()
    seq = baselines[baselines["measure"].isin(["seq_read", "seq_write"])]
    g = (
        seq.groupby(["storage", "measure"])["mb_per_s"]
        .agg(["median", "min", "max", "count"])
        .unstack("measure")
    )
    out = pd.DataFrame(index=g.index)
    for m in ("seq_read", "seq_write"):
        out[f"{m.split('_')[1]}_mb_s"] = g[("median", m)]
        out[f"{m.split('_')[1]}_min"] = g[("min", m)]
        out[f"{m.split('_')[1]}_max"] = g[("max", m)]
    out["runs"] = g[("count", "seq_read")]
    out["tool"] = seq.groupby("storage")["tool"].first()
    out["paper_read_mb_s"] = [configs.get(s, {}).get("ior_read_mb_s") for s in out.index]
    out["paper_write_mb_s"] = [configs.get(s, {}).get("ior_write_mb_s") for s in out.index]
    from analysis.tables.order import tier_order

    return out.reindex(tier_order(seq["storage"])).reset_index()  # slowest first, as the paper lists them


def small_file_rates(baselines):
    """Median MB/s of fio reading the dataset's stored files (image files, or TFRecord/HDF5 files)
    per storage, format and number of readers."""
    sm = baselines[baselines["measure"] == "small_read"].copy()
    sm["format"] = sm["format"].fillna("files").replace("", "files") if "format" in sm else "files"
    return sm.groupby(["storage", "format", "readers"])["mb_per_s"].median()


def efficiency(summary, baselines):
    """Add ``small_file_mb_s`` and ``efficiency`` (median MB/s of a micro-benchmark cell ÷ fio's rate
    over the same stored files on its tier with as many readers as it has map threads, or DataLoader
    workers) to the summary."""
    import numpy as np

    if summary.empty or baselines is None or baselines.empty or "mb_per_s_median" not in summary:
        return summary
    rates = small_file_rates(baselines)
    base = []
    for (_, row), t in zip(summary.iterrows(), tidy.readers(summary)):
        fmt = row.get("format") if isinstance(row.get("format"), str) and row.get("format") else "files"
        key = (row["storage"], fmt, int(t)) if t.isdigit() else None
        ok = row["kind"] == "microbench" and key in rates.index
        base.append(rates[key] if ok else np.nan)
    summary = summary.copy()
    summary["small_file_mb_s"] = base
    summary["efficiency"] = summary["mb_per_s_median"] / summary["small_file_mb_s"]
    return summary


def write_table_i(table, folder: Path) -> list[Path]:
    """table_i.csv, table_i.md and table_i.png (a rendered table)."""
    if table.empty:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from analysis import outputs

    csv = folder / f"{TABLE_I}.csv"
    with outputs.create(csv) as f:
        table.to_csv(f, index=False)

    def cell(med, lo, hi):
        return f"{med:.1f} ({lo:.0f}–{hi:.0f})"

    def paper(v):
        return "" if v is None or v != v else f"{v:.2f}"

    rows = [
        [
            r["storage"],
            cell(r["read_mb_s"], r["read_min"], r["read_max"]),
            cell(r["write_mb_s"], r["write_min"], r["write_max"]),
            f"{r['tool']}, {int(r['runs'])} runs",
            paper(r["paper_read_mb_s"]),
            paper(r["paper_write_mb_s"]),
        ]
        for _, r in table.iterrows()
    ]
    head = [
        "Storage",
        "Max read MB/s\nmedian (min–max)",
        "Max write MB/s\nmedian (min–max)",
        "Tool",
        "Paper read\nMB/s",
        "Paper write\nMB/s",
    ]
    md = outputs.write_text(
        folder / f"{TABLE_I}.md",
        "| "
        + " | ".join(h.replace("\n", " ") for h in head)
        + " |\n|"
        + "---|" * len(head)
        + "\n"
        + "".join("| " + " | ".join(r) + " |\n" for r in rows),
    )
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.3 * (len(rows) + 2)))
    ax.axis("off")
    t = ax.table(
        cellText=rows,
        colLabels=head,
        loc="center",
        cellLoc="center",
        colWidths=[0.12, 0.22, 0.22, 0.16, 0.14, 0.14],
    )
    t.auto_set_font_size(False)
    t.set_fontsize(7)
    t.scale(1, 1.4)
    for (r, _), c in t.get_celld().items():
        if r == 0:
            c.set_height(c.get_height() * 1.8)
    ax.set_title("Table I: storage baselines (this campaign) beside the paper's IOR figures", fontsize=9)
    png = folder / f"{TABLE_I}.png"
    fig.tight_layout()
    with outputs.create(png, binary=True) as f:
        fig.savefig(f, format="png", dpi=150)
    plt.close(fig)
    return [csv, md, png]
