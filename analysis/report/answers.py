"""The report's first answer, one line per tier and workload: the rate it delivered from the fewest
to the most threads, and what limited it at each (summary.csv's medians and bound labels)."""

from __future__ import annotations

RATE = "images_per_s_median"


def _spans(bounds: list[tuple[object, str]], unit: str = "thread") -> str:
    """``[(1, storage), (2, storage), (4, cpu)]`` -> "storage-bound at 1–2 threads, cpu-bound at 4"."""
    parts: list[tuple[str, list]] = []
    for threads, bound in bounds:
        if parts and parts[-1][0] == bound:
            parts[-1][1].append(threads)
        else:
            parts.append((bound, [threads]))
    out = []
    for bound, ts in parts:
        where = f"{ts[0]}" if len(ts) == 1 else f"{ts[0]}–{ts[-1]}"
        out.append(
            f"{bound or 'unknown'}-bound at {where} {unit}{'s' if len(ts) > 1 or str(ts[0]) != '1' else ''}"
        )
    return ", ".join(out)


def per_tier(summary) -> list[str]:
    """One sentence per (storage, workload, framework) with an images/s median, by tier (where
    batch size or prefetch vary: the commonest batch size, with prefetch); a PyTorch cell's rate is by its
    DataLoader workers, and the framework is named only when the campaign read with more than one."""
    import pandas as pd

    from analysis.tables import tidy

    if summary is None or summary.empty or RATE not in summary or "storage" not in summary:
        return []
    s = summary[summary[RATE].notna()].copy()
    s["_t"] = pd.to_numeric(tidy.readers(s), errors="coerce")
    s["_fw"] = tidy.text(s["framework"]).replace("", tidy.TENSORFLOW) if "framework" in s else tidy.TENSORFLOW
    named = len(tidy.frameworks(s)) > 1
    s["_fw_later"] = s["_fw"] != tidy.TENSORFLOW  # TensorFlow's line first
    s = s.sort_values(["storage", "workload", "_fw_later", "_fw"], kind="stable")
    lines = []
    for (storage, workload, fw), g in s.groupby(["storage", "workload", "_fw"], sort=False):
        g = g[g["_t"].notna()]
        for knob in ("batch_size", "prefetch"):  # one setting of the others: the commonest batch, prefetch on
            if knob in g and g[knob].nunique() > 1:
                g = g[g[knob] == (g[knob].max() if knob == "prefetch" else g[knob].mode().iloc[0])]
        if g.empty:
            continue
        by = g.groupby("_t").agg(
            rate=(RATE, "median"), bound=("bound", lambda b: b.mode().iloc[0] if b.notna().any() else "")
        )
        lo, hi = by.index.min(), by.index.max()
        unit = "worker" if fw == "pytorch" else "thread"
        who = f"{storage}, {workload}" + (f" ({fw})" if named else "")
        text = f"{who}: {by.rate[lo]:,.0f} images/s at {lo:g} {unit}{'s' if lo != 1 else ''}"
        if hi != lo:
            text += f", {by.rate[hi]:,.0f} at {hi:g} ({by.rate[hi] / by.rate[lo]:.2f}×)"
        lines.append(f"{text}; {_spans([(f'{t:g}', b) for t, b in by['bound'].items()], unit)}.")
    return lines
