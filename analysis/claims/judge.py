"""The paper's claims (``paper_claims.yaml``) judged on a campaign's runs: each claim's quantity measured
from the rows in the paper's layout and regime, beside the paper's value, and its verdict."""

from __future__ import annotations

from pathlib import Path

from analysis.tables import bounds, tidy

CLAIMS = Path(__file__).resolve().parent / "paper_claims.yaml"
REPRODUCED, NOT_REPRODUCED, NOT_MEASURED = "reproduced", "not reproduced", "not measured"
NOT_COMPARABLE = "not comparable"  # measured, but not in the regime the paper's claim is about
STATUSES = (REPRODUCED, NOT_REPRODUCED, NOT_COMPARABLE, NOT_MEASURED)


def load_claims() -> list[dict]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CLAIMS))  # type: ignore[return-value]


def _select(df, conditions: dict):
    """Rows whose column holds the value (or one of the values) of every condition."""
    for column, want in (conditions or {}).items():
        if column not in df:
            return df.iloc[0:0]
        values = [str(v) for v in (want if isinstance(want, list) else [want])]
        df = df[tidy.text(df[column]).isin(values)]
    return df


def _table_i(rows, p):
    if rows.empty:
        return None, ""
    return float(
        rows["mb_per_s"].median()
    ), f"median of {len(rows)} runs on {', '.join(sorted(set(rows['storage'])))}"


def _thread_speedup(rows, p):
    threads = rows["threads"].astype(str)
    one, n = rows[threads == "1"], rows[threads == str(p["threads"])]
    if one.empty or n.empty:
        return None, ""
    tiers = ", ".join(sorted(set(rows["storage"])))
    how = f"median images/s, {len(n)} runs at {p['threads']} threads / {len(one)} at 1, {tiers}"
    from analysis.claims import mechanisms

    one_device = getattr(mechanisms.DEVICE.get(str(p.get("mechanism"))), "one_device", False)
    return (
        float(n["images_per_s"].median() / one["images_per_s"].median()),
        how + (bounds.overlap_bound(one) if one_device else ""),
    )  # servers side by side: no such bound


def _prefetch_cells(rows):
    """Per (storage, threads) cell with prefetch at the commonest batch size: the median steady runtime,
    overlap efficiency, input-only and compute-only times."""
    df = rows[rows["prefetch"] > 0]
    if df.empty:
        return None, None
    batch = df["batch_size"].mode().iloc[0]
    df = df[df["batch_size"] == batch]
    rt = tidy.runtime_column(df)
    cols = [c for c in (rt, "overlap_efficiency", "input_only_s", "compute_only_s") if c in df]
    return df.groupby(["storage", "threads"])[cols].median(), batch


def _prefetch_overlap(rows, p):
    """The median overlap efficiency of the prefetch cells (1.0: the input pipeline fully hidden behind
    the compute, or the compute behind it), with the spread of runtimes across cells beside it."""
    med, batch = _prefetch_cells(rows)
    if med is None or "overlap_efficiency" not in med or med["overlap_efficiency"].isna().all():
        return None, ""
    eff = med["overlap_efficiency"].dropna()
    rt = med.iloc[:, 0]
    how = (
        f"median overlap of {len(eff)} (storage, threads) cells with prefetch, batch {batch} "
        f"({eff.min():.2f}-{eff.max():.2f}); runtime spread across them {rt.max() / rt.min() - 1:.2f}"
    )
    slower = med[med["input_only_s"] > med["compute_only_s"]] if "input_only_s" in med else med.iloc[0:0]
    if not slower.empty:
        threads = sorted(
            {str(t) for t in slower.index.get_level_values("threads")}, key=lambda t: (len(t), t)
        )
        how += (
            f"; on this accelerator the input pipeline at {', '.join(threads)} threads is slower than the "
            "training steps: prefetch cannot hide it"
        )
    return float(eff.median()), how


def _stall_ratio(rows, p):
    slow, fast = [str(x) for x in p["slow"]], [str(x) for x in p["fast"]]
    tiers = {"slow": slow, "fast": fast, "burst_buffer": [f"{f}->{s}" for f in fast for s in slow]}
    parts = {}
    for target in (p["numerator"], p["denominator"]):
        sub = rows[(rows["checkpoint_target"] == target) & rows["checkpoint_tiers"].isin(tiers[target])]
        if sub.empty:
            return None, ""
        parts[target] = sub
    num, den = parts[p["numerator"]], parts[p["denominator"]]
    how = (
        f"median stall {p['numerator']} ({num['checkpoint_tiers'].iloc[0]}) / {p['denominator']} "
        f"({den['checkpoint_tiers'].iloc[0]})"
    )
    return float(num["median_stall_s"].median() / den["median_stall_s"].median()), how


QUANTITIES = {
    "table_i": _table_i,
    "thread_speedup": _thread_speedup,
    "prefetch_overlap": _prefetch_overlap,
    "stall_ratio": _stall_ratio,
}


def _why_not(rows, regime: dict) -> str:
    """One line: why the rows do not give the claim's quantity in the regime (the commonest reason
    among the rows outside it, with its evidence)."""
    rows = rows.reset_index(drop=True)
    inside = _select(rows, regime)
    outside = rows.drop(index=inside.index)
    if outside.empty:
        return "too few runs in the regime " + ", ".join(f"{k} in {v}" for k, v in regime.items())
    for column, want in regime.items():
        if column not in outside:
            continue
        values = tidy.text(outside[column])
        off = outside[~values.isin([str(v) for v in (want if isinstance(want, list) else [want])])]
        if off.empty:
            continue
        top = tidy.text(off[column]).value_counts()
        value, n = top.index[0], int(top.iloc[0])
        share = f"{n} of {len(rows)} runs"
        tier = want[0] if isinstance(want, list) else want
        real = f"the real device (storage={tier} storage.root=<its mount point>)"
        if column == "bound" and "bound_reason" in off:
            example = off.loc[tidy.text(off["bound"]) == value, "bound_reason"].iloc[0]
            return f"runs {value or 'of unknown bound'} ({share}): {example}; needs runs the storage limits"
        if column == "storage" and value.startswith("modeled_"):
            return (
                f"measured on {value}: a modelled drive's sequential rate is its datasheet's figure, an "
                f"input of the model; needs {real}"
            )
        if column == "storage" and value.startswith("emulated_"):
            return (
                f"measured on {value}: an emulated tier reads back the throttle it was set to; the claim is "
                f"about a real device's mechanics; needs {real}"
            )
        if column == "device":
            return (
                f"trained on {value} ({share}): the input pipeline and the model share its cores; needs a "
                "GPU, as the paper trained on"
            )
        return f"runs with {column}={value} ({share}); needs {column} in {want}"
    return "too few runs in the regime " + ", ".join(f"{k} in {v}" for k, v in regime.items())


# The paper read one JPEG per file in a globally shuffled order with tf.data: rows measured another way
# (TFRecord, HDF5, a local shuffle, PyTorch's DataLoader) never enter its claims. An empty value passes:
# rows from before the column existed were measured the paper's way.
PAPER_LAYOUT = {
    "format": "files",
    "shuffle": "global",
    "stage": "",
    "tasks_per_cell": "1",
    "service": "0",
    "framework": "tensorflow",
}


def _paper_layout(df):
    for column, value in PAPER_LAYOUT.items():
        if column in df and not df.empty:
            df = df[tidy.text(df[column]).isin([value, ""])]
    return df


def evaluate(claim: dict, results, baselines, storages: dict | None = None) -> tuple[str, float | None, str]:
    """(status, measured value or None, how it was measured or why it is not comparable) of one claim;
    ``storages``: each tier's recorded config (what mechanisms it declares)."""
    from analysis.claims import mechanisms

    fn = QUANTITIES[claim["quantity"]]
    # the quantity may depend on it
    params = {**(claim.get("params") or {}), "mechanism": claim.get("mechanism")}
    source = _paper_layout(baselines if claim["quantity"] == "table_i" else results)
    rows = _select(source, claim.get("select") or {}) if not source.empty else source
    outside = fn(rows, params)[0]  # shown beside a "not comparable" verdict, never judged
    if rows.empty or outside is None:
        return NOT_MEASURED, None, ""
    # a lustre label on ext4 judges nothing
    rows, elsewhere = mechanisms.on_their_file_system(rows, storages or {})
    if elsewhere and (rows.empty or fn(rows, params)[0] is None):
        return NOT_COMPARABLE, outside, elsewhere
    if claim.get("mechanism"):
        rows, lacking = mechanisms.having(claim["mechanism"], rows, storages or {})
        if rows.empty or fn(rows, params)[0] is None:
            return NOT_COMPARABLE, outside, lacking
    regime = claim.get("regime") or {}
    value, how = fn(_select(rows, regime), params)
    if value is None:
        return NOT_COMPARABLE, outside, _why_not(rows, regime)
    tol = claim["tolerance"]
    ok = (
        abs(value - claim["paper"]) <= tol
        if claim.get("absolute")
        else abs(value / claim["paper"] - 1) <= tol
    )
    return (REPRODUCED if ok else NOT_REPRODUCED), value, how


def claims_frame(results, baselines, storages: dict | None = None):
    """One row per claim: the paper's value, the measured one, the tolerance and the verdict."""
    import pandas as pd

    rows = []
    for c in load_claims():
        status, value, how = evaluate(c, results, baselines, storages)
        tol = c["tolerance"]
        rows.append(
            {
                "id": c["id"],
                "claim": c["claim"],
                "section": c["section"],
                "paper": c["paper"],
                "measured": value,
                "unit": c["unit"],
                "tolerance": f"±{tol:g}" if c.get("absolute") else f"±{tol:.0%}",
                "status": status,
                "measured_from": how,
            }
        )
    return pd.DataFrame(rows)
