"""TensorFlow beside PyTorch (``framework=tensorflow,pytorch``): per micro-benchmark cell, what each
framework's readers (tf.data's map threads, the DataLoader's worker processes) delivered, what it cost in
cores and device reads, how long it took to start, and what limited it; one sentence per tier saying
which read faster. Written only when a campaign read with both."""

from __future__ import annotations

from pathlib import Path

from analysis.tables import bounds, tidy
from analysis.tables.order import thread_key, tier_order
from jobs import frameworks as jobs_frameworks

FRAMEWORKS = "frameworks.csv"
# what the table compares; the settings beside them say which cell a row is (they vary in some campaigns)
COLUMNS = (
    "storage",
    "pipeline",
    "format",
    "shuffle",
    "cache",
    "batch_size",
    "framework",
    "readers",
    "runs",
    "images_per_s",
    "images_per_s_per_core",
    "device_read_ratio",
    "first_batch_s",
    "startup_s",
    "bound",
    "bound_reason",
    "cell_dir",
)
SETTINGS = ("pipeline", "format", "shuffle", "cache", "batch_size")  # shown in the report where they vary


def table(results):
    """One row per micro-benchmark cell: medians over its measured runs of images/s, images/s per busy
    core (each run's images/s ÷ its cores busy), device bytes ÷ consumed, the first batch's and (PyTorch)
    the workers' start-up; the cell's bound and its evidence. None unless the rows hold both frameworks."""
    import pandas as pd

    if results is None or results.empty or "kind" not in results:
        return None
    df = results[results["kind"] == "microbench"].copy()
    if len(tidy.frameworks(df)) < 2:
        return None
    df["framework"] = tidy.text(df["framework"]).replace("", tidy.TENSORFLOW)
    df["readers"] = tidy.readers(df)
    df["_per_core"] = df["images_per_s"] / df["cpu_cores_busy"].where(df["cpu_cores_busy"] > 0)
    rows = []
    for d, runs in df.groupby("cell_dir", sort=False):
        first = runs.iloc[0]
        bound, reason = bounds.cell(runs)
        rows.append(
            {
                **{k: first.get(k) for k in ("storage", "pipeline", "format", "shuffle", "cache")},
                "batch_size": first.get("batch_size"),
                "framework": first["framework"],
                "readers": first["readers"],
                "runs": len(runs),
                "images_per_s": runs["images_per_s"].median(),
                "images_per_s_per_core": runs["_per_core"].median(),
                "device_read_ratio": runs["device_read_ratio"].median(),
                "first_batch_s": runs["first_batch_s"].median(),
                "startup_s": runs["startup_s"].median(),
                "bound": bound,
                "bound_reason": reason,
                "cell_dir": d,
            }
        )
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    tiers = {t: i for i, t in enumerate(tier_order(out["storage"]))}
    key = [
        (tiers[s], str(p), str(f), str(sh), fw != tidy.TENSORFLOW, fw, thread_key(r))
        for s, p, f, sh, fw, r in zip(
            out["storage"], out["pipeline"], out["format"], out["shuffle"], out["framework"], out["readers"]
        )
    ]
    order = sorted(range(len(out)), key=key.__getitem__)
    return out.iloc[order].reset_index(drop=True)


def sentences(table) -> dict[str, list[str]]:
    """Per tier, one sentence per pipeline and format both frameworks read: which framework's best cell
    read faster, at how many threads or workers, by how much, and what limited each (its bound and
    evidence)."""
    out: dict[str, list[str]] = {}
    if table is None or table.empty:
        return out
    several = {c: table[c].astype(str).nunique() > 1 for c in ("pipeline", "format")}
    for (storage, pipeline, fmt), g in table.groupby(["storage", "pipeline", "format"], sort=False):
        best = {
            fw: one.loc[one["images_per_s"].idxmax()]
            for fw, one in g.groupby("framework", sort=False)
            if one["images_per_s"].notna().any()
        }
        if len(best) < 2:
            continue
        (fast, a), (slow, b) = sorted(best.items(), key=lambda kv: -kv[1]["images_per_s"])[:2]
        where = ", ".join(
            x for x, on in ((str(pipeline), several["pipeline"]), (str(fmt), several["format"])) if on
        )
        where = f" ({where})" if where else ""
        rate_a, rate_b = a["images_per_s"], b["images_per_s"]
        # ``2 threads``, ``1 worker``: what read in parallel, in each framework's own terms
        at_a, at_b = jobs_frameworks.unit(fast, a["readers"]), jobs_frameworks.unit(slow, b["readers"])
        text = (
            f"{storage}{where}: {fast} read faster, {rate_a:,.0f} images/s at {at_a} against {slow}'s "
            f"{rate_b:,.0f} at {at_b} ({rate_a / rate_b:.2f}×); {_limited(fast, a)}; {_limited(slow, b)}."
        )
        out.setdefault(str(storage), []).append(text)
    return out


def _limited(framework: str, row) -> str:
    bound = row["bound"] or "unknown"
    reason = str(row["bound_reason"] or "").rstrip(".")
    return f"{framework} was {bound}-bound" + (f" ({reason})" if reason else "")


def write(results, folder: Path) -> list[Path]:
    """``frameworks.csv`` when the campaign read with both frameworks; the paths written."""
    from analysis import outputs

    t = table(results)
    if t is None or t.empty:
        return []
    path = folder / FRAMEWORKS
    with outputs.create(path) as f:
        t.to_csv(f, index=False)
    return [path]
