"""What a capacity search (``python -m campaign.capacity``) reads from its campaigns: the rates its first
rounds measured (the tier's read rate, one core's decode rate, the kernels among the nodes) and, per
accelerator count its emulated cells tried, whether every run held the AU threshold; ``capacity.csv``,
the search's table, by name."""

from __future__ import annotations

from pathlib import Path

CAPACITY = "capacity.csv"
KIND = "emulated"
# a folder holding either is a capacity search's (capacity.txt: campaign.capacity.command.MARK)
MARKS = (CAPACITY, "capacity.txt")


def per_node(df):
    """Each row's accelerators per node (its tasks over its nodes)."""
    nodes = df["nodes"].fillna(1).astype(int) if "nodes" in df else 1
    return (df["tasks_per_cell"].astype(int) // nodes).rename("accelerators_per_node")


def tried(results, tier: str, threshold: float):
    """Per accelerator count per node tried on ``tier``: the AU of every measured run (a run's AU is its
    slowest accelerator's), whether every run held the threshold, the aggregate MB/s and the cell's bound."""
    from analysis.tables import bounds

    df = results[(results["kind"] == KIND) & (results["storage"] == tier)]
    out = {}
    for n, runs in df.groupby(per_node(df)):
        au = runs["train_au_percentage"].astype(float)
        out[int(n)] = {
            "passed": bool((au >= 100 * threshold).all()) and len(au) > 0,
            "au_min": float(au.min()),
            "au_median": float(au.median()),
            "mb_per_s": float(runs["mb_per_s"].median()),
            "images_per_s": float(runs["images_per_s"].median()),
            "bound": bounds.cell(runs)[0],
            "runs": len(runs),
        }
    return out


def median(folder: Path, column: str) -> float:
    """The median of ``column`` over the measured runs of a campaign (its results.csv)."""
    import pandas as pd

    df = pd.read_csv(folder / "results.csv")
    return float(df[column].median())


def kernels(folder: Path) -> int:
    """Distinct kernels among the nodes of the campaign's runs (nodes on one kernel count its block-device
    counters once: ``device_counted_on``); 1 for a one-node run."""
    from jobs import records

    seen = set()
    for f in folder.glob("*/record.json"):
        for run in records.read(f).runs:
            seen |= {n.get("device_counted_on") or n.get("host") for n in run.get("per_node") or []}
    return max(1, len(seen))
