"""Data layout and shuffling (``dataset.format`` × ``shuffle``): how much of the device each layout of the
micro-benchmark reached, the paper's layout first (the report's table)."""

from __future__ import annotations

from analysis.tables import tidy
from analysis.tables.order import thread_key

PAPER = ("files", "global")  # the paper's layout: one JPEG per file, a full shuffle


def reach(summary):
    """Per micro-benchmark cell: layout, shuffle, images/s and MB/s (medians), the share of fio's
    rate over the same stored files (``efficiency``, when the campaign has baselines) and what limited
    it; the paper's layout first. None when the campaign has one layout only. With more than one framework,
    a ``framework`` column, and a PyTorch cell's ``threads`` are its DataLoader workers."""
    if summary is None or summary.empty or "format" not in summary:
        return None
    s = summary[summary["kind"] == "microbench"].copy()
    if s.empty:
        return None
    s["format"] = tidy.text(s["format"]).replace("", "files")
    s["shuffle"] = tidy.text(s["shuffle"]).replace("", "global")
    if len(set(zip(s["format"], s["shuffle"]))) < 2:
        return None
    s["_paper"] = [(f, sh) != PAPER for f, sh in zip(s["format"], s["shuffle"])]
    several = len(tidy.frameworks(s)) > 1
    if several:  # a PyTorch cell by its DataLoader workers, beside TensorFlow's by their map threads
        s["framework"] = tidy.text(s["framework"]).replace("", tidy.TENSORFLOW)
        s["threads"] = tidy.readers(s)
    s["_fw"] = [fw != tidy.TENSORFLOW for fw in s["framework"]] if several else False
    s["_t"] = [thread_key(t) for t in s["threads"]]
    s = s.sort_values(["storage", "pipeline", "_fw", "_t", "_paper", "format", "shuffle"])
    cols = [
        c
        for c in (
            "storage",
            "pipeline",
            "framework" if several else "",
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
