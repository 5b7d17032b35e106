"""Staging (``storage@stage=<preset>``): each staged cell beside the same cell read where the data
lies, with the time the copy took, as tf-Darshan compared reading from Lustre with a staged copy."""

from __future__ import annotations

from analysis import tables

KEYS = ("workload", "pipeline", "storage", "dataset", "format", "shuffle", "threads", "batch_size", "prefetch")


def comparison(summary, staged: dict):
    """Per staged cell: images/s read from the storage tier and from the staged copy (medians), their
    ratio, and the copy's time and rate; None when no cell was staged."""
    if summary is None or summary.empty or "stage" not in summary:
        return None
    s = summary.copy()
    s["stage"] = tables.text(s["stage"])
    s["threads"] = s["threads"].astype(str)
    on = s[s["stage"] != ""]
    if on.empty:
        return None
    off = s[s["stage"] == ""][[*KEYS, "images_per_s_median"]].rename(columns={"images_per_s_median": "from_storage"})
    out = on.merge(off, on=list(KEYS), how="left").rename(columns={"images_per_s_median": "from_stage"})
    out["staged_speedup"] = out["from_stage"] / out["from_storage"]
    facts = [staged.get(str(d), {}) for d in out["cell_dir"]]
    out["stage_s"] = [f.get("stage_s") for f in facts]
    out["stage_mb_s"] = [f.get("stage_mb_s") for f in facts]
    cols = ["storage", "stage", "workload", "pipeline", "format", "threads", "from_storage", "from_stage", "staged_speedup",
            "stage_s", "stage_mb_s", "bound"]
    return out[[c for c in cols if c in out]].round(3)
