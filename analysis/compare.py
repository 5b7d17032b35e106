"""The paper's claims beside the same quantities measured by a campaign, and campaign-to-campaign
comparison (``python -m analysis compare A B``)."""

from __future__ import annotations

from pathlib import Path

CLAIMS = Path(__file__).resolve().parent / "paper_claims.yaml"
REPRODUCED, NOT_REPRODUCED, NOT_MEASURED = "reproduced", "not reproduced", "not measured"


def load_claims() -> list[dict]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CLAIMS))  # type: ignore[return-value]


def _table_i(results, baselines, p):
    sub = baselines[baselines["storage"].isin(p["storages"]) & (baselines["measure"] == f"seq_{p['measure']}")]
    if sub.empty:
        return None, ""
    return float(sub["mb_per_s"].median()), f"median of {len(sub)} runs on {', '.join(sorted(set(sub['storage'])))}"


def _thread_speedup(results, baselines, p):
    df = results[(results["workload"] == p["workload"]) & results["storage"].isin(p["storages"])].copy()
    df["threads"] = df["threads"].astype(str)
    one, n = df[df["threads"] == "1"], df[df["threads"] == str(p["threads"])]
    if one.empty or n.empty:
        return None, ""
    return float(n["images_per_s"].median() / one["images_per_s"].median()), \
        f"median images/s, {', '.join(sorted(set(df['storage'])))}"


def _prefetch_spread(results, baselines, p):
    df = results[(results["kind"] == "alexnet") & (results["prefetch"] > 0)].copy()
    if df.empty:
        return None, ""
    batch = df["batch_size"].mode().iloc[0]
    med = df[df["batch_size"] == batch].groupby(["storage", "threads"])["runtime_s"].median()
    if len(med) < 2:
        return None, ""
    return float(med.max() / med.min() - 1), f"{len(med)} (storage, threads) cells with prefetch, batch {batch}"


def _checkpoint_share(results, baselines, p):
    df = results[(results["kind"] == "checkpoint") & (results["checkpoint_target"] == p["target"])
                 & (results["checkpoint_mode"] == "sync")]
    if df.empty:
        return None, ""
    share = ((df["runtime_s"] - df["baseline_runtime_s"]) / df["runtime_s"]).median()
    return float(share), f"direct to {', '.join(sorted(set(df['checkpoint_tiers'])))}, {len(df)} runs"


def _stall_ratio(results, baselines, p):
    df = results[(results["kind"] == "checkpoint") & (results["checkpoint_mode"] == "sync")]
    slow, bb = df[df["checkpoint_target"] == "slow"], df[df["checkpoint_target"] == "burst_buffer"]
    if slow.empty or bb.empty:
        return None, ""
    return float(slow["median_stall_s"].median() / bb["median_stall_s"].median()), \
        f"{slow['checkpoint_tiers'].iloc[0]} against {bb['checkpoint_tiers'].iloc[0]}"


QUANTITIES = {"table_i": _table_i, "thread_speedup": _thread_speedup, "prefetch_spread": _prefetch_spread,
              "checkpoint_share": _checkpoint_share, "stall_ratio": _stall_ratio}


def claims_frame(results, baselines):
    """One row per claim: the paper's value, the measured one, the tolerance and the verdict."""
    import pandas as pd

    rows = []
    for c in load_claims():
        value, how = (None, "")
        if not results.empty or not baselines.empty:
            value, how = QUANTITIES[c["quantity"]](results, baselines, c.get("params") or {})
        tol = c["tolerance"]
        if value is None:
            status = NOT_MEASURED
        elif c.get("absolute"):
            status = REPRODUCED if abs(value - c["paper"]) <= tol else NOT_REPRODUCED
        else:
            status = REPRODUCED if abs(value / c["paper"] - 1) <= tol else NOT_REPRODUCED
        rows.append({"id": c["id"], "claim": c["claim"], "section": c["section"], "paper": c["paper"],
                     "measured": value, "unit": c["unit"],
                     "tolerance": f"±{tol:g}" if c.get("absolute") else f"±{tol:.0%}", "status": status,
                     "measured_from": how})
    return pd.DataFrame(rows)


def compare_campaigns(a: Path, b: Path):
    """Each cell's median metrics in campaign A beside campaign B, with B / A. Records that could not
    be read are listed in the frame's ``attrs["unreadable"]`` (never skipped silently)."""
    import pandas as pd

    from analysis import tables

    keys = [k for k in tables.CELL_COLUMNS]
    collected = [tables.collect(x) for x in (a, b)]
    unreadable = [u for c in collected for u in c.unreadable]
    fa, fb = (tables.summary_frame(tables.results_frame(c)) for c in collected)
    if fa.empty or fb.empty:
        empty = pd.DataFrame()
        empty.attrs["unreadable"] = unreadable
        return empty
    metrics = [c for c in fa.columns if c.endswith("_median") and c in fb.columns]
    for f in (fa, fb):
        for k in keys:
            f[k] = f[k].astype(str)
    m = fa[keys + metrics].merge(fb[keys + metrics], on=keys, suffixes=("_a", "_b"), how="outer")
    for metric in metrics:
        m[f"{metric}_ratio"] = m[f"{metric}_b"] / m[f"{metric}_a"]
    cols = keys + [c for metric in metrics for c in (f"{metric}_a", f"{metric}_b", f"{metric}_ratio")]
    m = m[cols]
    out = m.loc[:, m.notna().any()]
    out.attrs["unreadable"] = unreadable
    return out
