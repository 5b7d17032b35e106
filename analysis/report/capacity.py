"""The capacity search's report: each tier's answer as the terminal printed it, how it was predicted, the
evidence per accelerator count tried, and capacity.csv's main columns."""

from __future__ import annotations

from pathlib import Path

from analysis.report.htmltable import table as table_html
from analysis.tables.capacity import CAPACITY, tried


def answer_line(r: dict) -> str:
    """The search's answer for one tier (a capacity.csv row), as the terminal and the report say it."""
    on = f" per node ({r['measured_total']} on {r['nodes']} nodes)" if r.get("nodes", 1) > 1 else ""
    bound = (
        r["bound_at_n_plus_1"]
        if isinstance(r.get("bound_at_n_plus_1"), str) and r["bound_at_n_plus_1"]
        else ""
    )
    note = r["note"] if isinstance(r.get("note"), str) and r["note"] else ""
    return (
        f"[capacity] {r['tier']}: {r['measured_n']} {r['accelerator']} accelerator(s){on} held AU >= "
        f"{100 * r['au_threshold']:.0f}% (predicted {r['predicted_n']}, error {int(r['error_n']):+d}; "
        f"limit predicted {r['predicted_limit']}, bound at {r['measured_n'] + 1}: {bound or 'not run'})"
        f"{'; ' + note if note else ''}"
    )


def prediction_text(r: dict) -> str:
    """How the predicted count came about, in one sentence: what the tier and the client's cores can each
    feed (each accelerator's pipeline decodes on its own map threads, one core each at most)."""
    cores = r["cores"] * min(r.get("kernels", 1), r.get("nodes", 1)) / r.get("nodes", 1)
    threads, core, need = int(r.get("threads") or 1), r["core_images_per_s"], r["demand_images_per_s"]
    one = min(threads, cores) * core
    pipeline = (
        f"one core decodes {core:,.0f} images/s, and each accelerator's pipeline decodes on its "
        f"{threads} map thread{'s' if threads != 1 else ''}: "
    )
    if r["predicted_cpu_n"] == 0:
        pipeline += (
            f"{one:,.0f} images/s, short of the {need:,.0f} one accelerator needs, so the CPU can feed none"
        )
    else:
        pipeline += f"the {cores:g} cores decode enough for {r['predicted_cpu_n']}"
    return (
        f"{r['tier']}: one {r['accelerator']} accelerator at AU {100 * r['au_threshold']:.0f}% consumes "
        f"{need:,.0f} images/s; the tier read {r['tier_images_per_s']:,.0f} images/s "
        f"({r['tier_mb_per_s']:,.0f} MB/s, a cold read-only pipeline), enough for "
        f"{r['predicted_storage_n']}; {pipeline}. Predicted: {r['predicted_n']} "
        f"(limit: {r['predicted_limit']})."
    )


def evidence(folder: Path):
    """Per tier and accelerator count tried (the answer's and the prediction's marked beside the count): AU,
    whether it held, the aggregate rate beside the need and the tier's measured rate, and what limited the
    cell; None without capacity.csv or results."""
    import pandas as pd

    if not (folder / CAPACITY).exists() or not (folder / "results.csv").exists():
        return None
    pred, results = pd.read_csv(folder / CAPACITY), pd.read_csv(folder / "results.csv")
    rows = []
    for r in pred.to_dict("records"):
        pct = 100 * r["au_threshold"]
        for n, v in sorted(tried(results, r["tier"], r["au_threshold"]).items()):
            mark = ", ".join(
                x
                for x, hit in (("answer", n == r["measured_n"]), ("predicted", n == r["predicted_n"]))
                if hit
            )
            rows.append(
                {
                    "tier": r["tier"],
                    "accelerators": f"{n} ({mark})" if mark else str(n),
                    "AU min (%)": v["au_min"],
                    f"held ≥ {pct:.0f}%": "yes" if v["passed"] else "no",
                    "images/s (all)": v["images_per_s"],
                    "needed (images/s)": n * r["nodes"] * r["demand_images_per_s"],
                    "of tier's read rate (%)": 100 * v["images_per_s"] / r["tier_images_per_s"],
                    "limited by": v["bound"],
                }
            )
    return pd.DataFrame(rows) if rows else None


def section(folder: Path) -> str:
    """The capacity report's opening: each tier's answer line as the terminal printed it, how it was
    predicted, the evidence per accelerator count, and the figure."""
    import html

    import pandas as pd

    if not (folder / CAPACITY).exists():
        return ""
    pred = pd.read_csv(folder / CAPACITY).to_dict("records")
    lines = "".join(f'<p class="answer"><code>{html.escape(answer_line(r))}</code></p>' for r in pred)
    how = "".join(f"<li>{html.escape(prediction_text(r))}</li>" for r in pred)
    ev = evidence(folder)
    return (
        "<h2>Answer</h2>"
        + lines
        + f"<ul>{how}</ul>"
        + (
            "<h3>Each count tried</h3><p>AU: the slowest accelerator's, lowest of the runs; images/s: every "
            "accelerator together, median of the runs, beside what they need at the threshold and the tier's "
            "measured read rate; limited by: analysis/tables/bounds.py.</p>" + table_html(ev)
            if ev is not None
            else ""
        )
    )


INTRO = (
    "Per tier and accelerator profile (python -m campaign.capacity): the count predicted from the tier's "
    "read rate, one client core's decode rate and one accelerator's demand at the AU threshold, beside the "
    "largest count whose every run held the threshold (AU of the slowest accelerator, first step left out), "
    "the aggregate MB/s there and what limited the next count. Data: capacity.csv."
)


def table(folder: Path):
    """capacity.csv's columns a reader needs first, or None without one."""
    import pandas as pd

    if not (folder / CAPACITY).exists():
        return None
    df = pd.read_csv(folder / CAPACITY)
    cols = [
        "tier",
        "accelerator",
        "au_threshold",
        "demand_images_per_s",
        "tier_images_per_s",
        "core_images_per_s",
        "cores",
        "nodes",
        "kernels",
        "predicted_n",
        "predicted_limit",
        "measured_n",
        "measured_total",
        "error_n",
        "au_at_n",
        "mb_per_s_at_n",
        "au_at_n_plus_1",
        "bound_at_n_plus_1",
        "counts_tried",
        "note",
    ]
    return df[[c for c in cols if c in df]]
