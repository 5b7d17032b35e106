"""The report's first answer, one line per tier and workload: the rate it delivered from the fewest
to the most threads, and what limited it at each (summary.csv's medians and bound labels), as a compact
table (the report) or as sentences."""

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


def tier(summary):
    """Per row, the tier as the report names it: the storage, with its reader where it has one
    (``s3 · native``, ``s3 · fuse``: one object store read two ways is two answers, not one)."""
    from analysis.tables import tidy

    storage = summary["storage"].astype(str)
    if "reader" not in summary:
        return storage
    reader = tidy.text(summary["reader"])
    return storage.where(reader == "", storage + " · " + reader)


def rows(summary) -> list[dict]:
    """One answer per (tier, workload, framework) with an images/s median, by tier (where batch size or
    prefetch vary: the commonest batch size, with prefetch); a PyTorch cell's rate is by its DataLoader
    workers, and the framework is named only when the campaign read with more than one. Each: who (tier,
    workload, framework), the fewest and most readers (lo, hi) and their rates, the unit (thread or
    worker) and the bounds from the fewest to the most readers."""
    import pandas as pd

    from analysis.tables import tidy
    from jobs import frameworks

    if summary is None or summary.empty or RATE not in summary or "storage" not in summary:
        return []
    s = summary[summary[RATE].notna()].copy()
    s["_t"] = pd.to_numeric(tidy.readers(s), errors="coerce")
    s["_tier"] = tier(s)
    s["_fw"] = tidy.text(s["framework"]).replace("", tidy.TENSORFLOW) if "framework" in s else tidy.TENSORFLOW
    named = len(tidy.frameworks(s)) > 1
    s["_fw_later"] = s["_fw"] != tidy.TENSORFLOW  # TensorFlow's line first
    s = s.sort_values(["_tier", "workload", "_fw_later", "_fw"], kind="stable")
    out = []
    for (where, workload, fw), g in s.groupby(["_tier", "workload", "_fw"], sort=False):
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
        unit = frameworks.unit(fw)
        out.append(
            {
                "tier": where,
                "workload": workload,
                "framework": fw if named else "",
                "cells": set(g["cell_dir"].astype(str)) if "cell_dir" in g else set(),
                "lo": lo,
                "hi": hi,
                "rate_lo": by.rate[lo],
                "rate_hi": by.rate[hi],
                "unit": unit,
                "limited": _spans([(f"{t:g}", b) for t, b in by["bound"].items()], unit),
            }
        )
    return out


def per_tier(summary, collected=None) -> list[str]:
    """``rows`` as sentences: "local, microbench: 234 images/s at 1 thread, 111 at 2 (0.47×); cpu-bound at
    1–2 threads.", with what its cells stood on where it mattered (``collected``: the campaign's records,
    ``analysis.standing``)."""
    lines = []
    for r in rows(summary):
        lo, hi, unit = r["lo"], r["hi"], r["unit"]
        who = f"{r['tier']}, {r['workload']}" + (f" ({r['framework']})" if r["framework"] else "")
        text = f"{who}: {r['rate_lo']:,.0f} images/s at {lo:g} {unit}{'s' if lo != 1 else ''}"
        if hi != lo:
            text += f", {r['rate_hi']:,.0f} at {hi:g} ({r['rate_hi'] / r['rate_lo']:.2f}×)"
        stood = _stood_on(r, collected)
        lines.append(f"{text}; {r['limited']}" + (f"; {stood}" if stood else "") + ".")
    return lines


def _stood_on(row: dict, collected) -> str:
    """What the cells of one answer stood on (lock waits, other processes' CPU), "" where it did not matter
    or nothing was collected."""
    from analysis import standing

    if collected is None or not row["cells"]:
        return ""
    return standing.of_collected(collected, row["cells"]).phrase()


def table(summary, collected=None):
    """``rows`` as a compact table, one line per answer: images/s at the fewest and the most readers,
    the ratio, and what limited it (None without answers); with ``collected`` (the campaign's records), a
    column of what each answer's cells stood on, where it mattered for any of them."""
    import pandas as pd

    found = rows(summary)
    if not found:
        return None
    named = any(r["framework"] for r in found)
    out = []
    for r in found:
        lo, hi, unit = r["lo"], r["hi"], r["unit"]
        one = hi == lo
        out.append(
            {
                "tier": r["tier"],
                "workload": r["workload"],
                **({"framework": r["framework"]} if named else {}),
                "readers": f"{lo:g} {unit}{'s' if lo != 1 else ''}" if one else f"{lo:g} → {hi:g} {unit}s",
                "images/s": f"{r['rate_lo']:,.0f}" if one else f"{r['rate_lo']:,.0f} → {r['rate_hi']:,.0f}",
                "×": "" if one else f"{r['rate_hi'] / r['rate_lo']:.2f}",
                "what limited it": r["limited"],
                "stood on": _stood_on(r, collected),
            }
        )
    t = pd.DataFrame(out)
    return t if t["stood on"].astype(bool).any() else t.drop(columns="stood on")
