"""Staging (``storage@stage=<preset>``): each staged cell beside the same cell read where the data
lies, with the time the copy took, as tf-Darshan compared reading from Lustre with a staged copy."""

from __future__ import annotations

from analysis.tables import identity, tidy


def comparison(summary, staged: dict, configs: dict):
    """Per staged cell: images/s read from the storage tier and from the staged copy (medians), their
    ratio, and the copy's time and rate; None when no cell was staged. A staged cell pairs with the cell
    whose every other setting is equal (``analysis.tables.identity`` without ``stage``); with none, its
    ``from_storage`` is empty."""
    if summary is None or summary.empty or "stage" not in summary:
        return None
    s = summary.copy()
    s["stage"] = tidy.text(s["stage"])
    s["cell_dir"] = s["cell_dir"].astype(str)  # read back from summary.csv, "0" is 0
    on = s[s["stage"] != ""]
    if on.empty:
        return None
    key = {
        d: tuple(sorted(identity.identity(configs[d], ignore=("stage",)).items()))
        for d in s["cell_dir"]
        if d in configs
    }
    off = {
        key[d]: v
        for d, v in zip(s.loc[s["stage"] == "", "cell_dir"], s.loc[s["stage"] == "", "images_per_s_median"])
        if d in key
    }
    out = on.rename(columns={"images_per_s_median": "from_stage"}).copy()
    out["from_storage"] = [off.get(key.get(d)) for d in out["cell_dir"]]
    out["staged_speedup"] = out["from_stage"] / out["from_storage"].astype(float)
    facts = [staged.get(str(d), {}) for d in out["cell_dir"]]
    out["stage_s"] = [f.get("stage_s") for f in facts]
    out["stage_mb_s"] = [f.get("stage_mb_s") for f in facts]
    cols = [
        "storage",
        "stage",
        "workload",
        "pipeline",
        "format",
        "cache",
        "tasks_per_cell",
        "service",
        "threads",
        "from_storage",
        "from_stage",
        "staged_speedup",
        "stage_s",
        "stage_mb_s",
        "bound",
    ]
    return out[[c for c in cols if c in out]].round(3)
