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
    """Per tier, one sentence per pipeline and format two or more frameworks read: which framework's best
    cell read fastest, at how many threads or workers, by how much, and what limited each (its bound and
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
        ranked = sorted(best.items(), key=lambda kv: -kv[1]["images_per_s"])
        where = ", ".join(
            x for x, on in ((str(pipeline), several["pipeline"]), (str(fmt), several["format"])) if on
        )
        text = _ranked(f"{storage}{f' ({where})' if where else ''}", ranked)
        out.setdefault(str(storage), []).append(text)
    return out


def _ranked(where: str, ranked: list) -> str:
    """The sentence of one tier (and pipeline, format): the fastest framework's best cell against the
    others', in each framework's own terms (``2 threads``, ``1 worker``), and what limited each."""
    (fast, a), rest = ranked[0], ranked[1:]
    rate_a = a["images_per_s"]
    at = {fw: jobs_frameworks.unit(fw, row["readers"]) for fw, row in ranked}
    if len(rest) == 1:
        slow, b = rest[0]
        rate_b = b["images_per_s"]
        return (
            f"{where}: {fast} read faster, {rate_a:,.0f} images/s at {at[fast]} against {slow}'s "
            f"{rate_b:,.0f} at {at[slow]} ({rate_a / rate_b:.2f}×); {_limited(fast, a)}; {_limited(slow, b)}."
        )
    others = ", ".join(
        f"{fw}'s {row['images_per_s']:,.0f} at {at[fw]} ({rate_a / row['images_per_s']:.2f}× slower)"
        for fw, row in rest
    )
    limits = "; ".join(_limited(fw, row) for fw, row in ranked)
    return f"{where}: {fast} read fastest, {rate_a:,.0f} images/s at {at[fast]}, against {others}; {limits}."


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
