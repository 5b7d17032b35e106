"""How many accelerators a tier can feed (``python -m campaign.capacity``): the prediction from what
the tool measures in a minute, the search's verdict on each tried count from the emulated cells,
``capacity.csv`` and the capacity figure.

Prediction (a rate model in the spirit of Plumber, Kuchnik et al., MLSys'22): one accelerator at
AU = threshold consumes ``batch × threshold ÷ step time`` images/s. The tier delivers what a cold
read-only pipeline reads from it; the client delivers its decode rate per core on as many cores as
the accelerators' map threads may use. The predicted count is the largest N both sides sustain, and
the side that stops N + 1 is the predicted limit.

On several nodes (``platform.nodes=K``) N is the count per node and every cell runs N on each of the K
nodes: the tier's rate is what readers on all K nodes read from it together, and each node decodes
on its own cores. Nodes that share one kernel (containers, or the namespaced test cluster) share its
cores too, so a node's cores are the kernel's divided among its nodes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

CAPACITY = "capacity.csv"
KIND = "emulated"


@dataclass(frozen=True)
class Inputs:
    tier: str
    accelerator: str
    batch_size: int
    step_time_s: float  # the profile's, at its own batch size
    profile_batch_size: int
    au_threshold: float  # 0..1
    tier_images_per_s: float  # a cold read-only pipeline on the tier (storage side)
    tier_mb_per_s: float
    core_images_per_s: float  # the decode pipeline on one thread, warm cache (client side, per core)
    cores: int  # of one node's kernel
    threads: int  # map threads of each accelerator's pipeline
    nodes: int = 1  # nodes every cell runs on; N is per node
    kernels: int = 1  # distinct kernels among those nodes (a node's cores = cores x kernels / nodes)

    def node_cores(self) -> float:
        return self.cores * min(self.kernels, self.nodes) / self.nodes


def demand(inp: Inputs) -> float:
    """Images/s one accelerator consumes when it is busy ``au_threshold`` of the time."""
    per_image_s = inp.step_time_s / inp.profile_batch_size
    return inp.au_threshold / per_image_s


def predict(inp: Inputs, most: int = 1000) -> dict:
    """The predicted capacity per node, its limit and the rates it came from (a flat dict for capacity.csv)."""
    need = demand(inp) * (1 - 1e-9)  # a supply equal to the demand suffices, whatever the rounding
    n_storage = math.floor(inp.tier_images_per_s / (need * inp.nodes))
    n_cpu = 0
    while (
        n_cpu < most
        and (n_cpu + 1) * need <= min(inp.node_cores(), (n_cpu + 1) * inp.threads) * inp.core_images_per_s
    ):
        n_cpu += 1
    need = demand(inp)
    n = min(n_storage, n_cpu)
    limit = "storage" if n_storage < n_cpu else "cpu" if n_cpu < n_storage else "storage and cpu"
    return {
        **asdict(inp),
        "demand_images_per_s": need,
        "predicted_storage_n": n_storage,
        "predicted_cpu_n": n_cpu,
        "predicted_n": n,
        "predicted_limit": limit,
    }


def per_node(df):
    """Each row's accelerators per node (its tasks over its nodes)."""
    nodes = df["nodes"].fillna(1).astype(int) if "nodes" in df else 1
    return (df["tasks_per_cell"].astype(int) // nodes).rename("accelerators_per_node")


def tried(results, tier: str, threshold: float):
    """Per accelerator count per node tried on ``tier``: the AU of every measured run (a run's AU is its
    slowest accelerator's), whether every run held the threshold, the aggregate MB/s and the cell's bound."""
    from analysis import bounds

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


def next_counts(seen: dict[int, dict], predicted: int, most: int) -> list[int]:
    """The accelerator counts to run next: first N - 1, N and N + 1 around the prediction; then one
    more above the largest that held, or below the smallest that failed, until the largest count that
    held has a failing count above it (or ``most`` is reached). [] when the search is done."""
    if not seen:
        n = max(1, predicted)
        return [c for c in sorted({max(1, n - 1), n, n + 1}) if c <= most]
    held = [n for n, v in seen.items() if v["passed"]]
    best = max(held, default=0)
    if held:
        return [] if best >= most or best + 1 in seen else [best + 1]
    lowest = min(seen)
    return [lowest - 1] if lowest > 1 else []


def measured(seen: dict[int, dict], most: int, bound_by: str = "") -> tuple[int, str]:
    """(the largest count that held with every run passing, how the search ended); ``bound_by``: what set
    ``most`` when not --most (e.g. the CPUs of the cluster's nodes)."""
    held = [n for n, v in seen.items() if v["passed"]]
    best = max(held, default=0)
    if best >= most and best + 1 not in seen:
        return best, f"at least {best}: the search stopped at {bound_by or f'--most {most}'}"
    if best == 0:
        return 0, "even one accelerator fell below the threshold"
    return best, ""


def row(pred: dict, seen: dict[int, dict], most: int, bound_by: str = "") -> dict:
    """The tier's line of capacity.csv."""
    n, note = measured(seen, most, bound_by)
    at, above = seen.get(n, {}), seen.get(n + 1, {})
    return {
        **pred,
        "measured_n": n,
        "measured_total": n * pred.get("nodes", 1),
        "error_n": n - pred["predicted_n"],
        "au_at_n": at.get("au_min"),
        "mb_per_s_at_n": at.get("mb_per_s"),
        "au_at_n_plus_1": above.get("au_min"),
        "bound_at_n_plus_1": above.get("bound", ""),
        "counts_tried": " ".join(str(c) for c in sorted(seen)),
        "note": note,
    }


def per_node_nodes(df):
    return df["nodes"].fillna(1).astype(int) if "nodes" in df else [1] * len(df)


def capacity_figure(results, folder: Path, figure) -> list[Path]:
    """AU (the slowest accelerator's, median of runs) against accelerators, one line per tier; the
    threshold as a line and each tier's predicted count (capacity.csv) as a dashed mark."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from analysis import plotting

    df = results[results["kind"] == KIND]
    if df.empty:
        return []
    pred = pd.read_csv(folder / CAPACITY) if (folder / CAPACITY).exists() else pd.DataFrame()
    fig, ax = plt.subplots(figsize=(6.8, 4.0))
    for tier in plotting.tier_order(df["storage"]):
        one = df[df["storage"] == tier]
        med = one.groupby(per_node(one))["train_au_percentage"].median()
        line = ax.plot(med.index, med.values, marker="o", label=tier)[0]
        mine = pred[pred["tier"] == tier] if not pred.empty else pred
        if not mine.empty and mine["predicted_n"].iloc[0] > 0:
            ax.axvline(
                mine["predicted_n"].iloc[0],
                color=line.get_color(),
                linestyle="--",
                linewidth=1,
                label=f"{tier}: predicted {int(mine['predicted_n'].iloc[0])}",
            )
        if not mine.empty and mine["measured_n"].iloc[0] > 0:
            n = int(mine["measured_n"].iloc[0])
            ax.plot(
                [n],
                [med.get(n)],
                marker="*",
                markersize=14,
                color=line.get_color(),
                linestyle="",
                label=f"{tier}: measured {n}",
            )
    if not pred.empty:
        ax.axhline(
            100 * float(pred["au_threshold"].iloc[0]),
            color="black",
            linestyle=":",
            linewidth=1,
            label=f"AU threshold {100 * float(pred['au_threshold'].iloc[0]):.0f}%",
        )
    nodes = sorted(set(per_node_nodes(df)))
    ax.set_xlabel(
        "Emulated accelerators (tasks of the cell)"
        if nodes == [1]
        else f"Emulated accelerators per node (on {', '.join(map(str, nodes))} nodes)"
    )
    ax.set_ylabel("AU of the slowest accelerator (%)")
    ax.set_ylim(0, 105)
    ax.set_xlim(0.5, max(per_node(df).max(), pred["predicted_n"].max() if not pred.empty else 0) + 0.5)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title(
        f"Accelerators the storage can feed: {', '.join(sorted(set(pred['accelerator'])))}"
        if not pred.empty
        else "Emulated accelerators: AU (median of runs)",
        fontsize=9,
    )
    ax.grid(linewidth=0.3)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return plotting.save(fig, folder / figure.key)


MARKS = (CAPACITY, "capacity.txt")  # a folder holding either is a capacity search's (campaign.capacity.MARK)


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
        f"{100 * r['au_threshold']:.0f}% (predicted {r['predicted_n']}, error {int(r['error_n']):+d}; limit predicted "
        f"{r['predicted_limit']}, bound at {r['measured_n'] + 1}: {bound or 'not run'}){'; ' + note if note else ''}"
    )


def prediction_text(r: dict) -> str:
    """How the predicted count came about, in one sentence."""
    cores = r["cores"] * min(r.get("kernels", 1), r.get("nodes", 1)) / r.get("nodes", 1)
    return (
        f"{r['tier']}: one {r['accelerator']} accelerator at AU {100 * r['au_threshold']:.0f}% consumes "
        f"{r['demand_images_per_s']:,.0f} images/s; the tier read {r['tier_images_per_s']:,.0f} images/s "
        f"({r['tier_mb_per_s']:,.0f} MB/s, a cold read-only pipeline), enough for {r['predicted_storage_n']}; one "
        f"core decodes {r['core_images_per_s']:,.0f} images/s and {cores:g} cores are enough for "
        f"{r['predicted_cpu_n']}: predicted {r['predicted_n']} (limit: {r['predicted_limit']})."
    )


def evidence(folder: Path):
    """Per tier and accelerator count tried: AU, whether it held, the aggregate rate beside the need and
    the tier's measured rate, and what limited the cell; None without capacity.csv or results."""
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
                    "accelerators": n,
                    "AU min (%)": v["au_min"],
                    f"held ≥ {pct:.0f}%": "yes" if v["passed"] else "no",
                    "images/s (all)": v["images_per_s"],
                    "needed (images/s)": n * r["nodes"] * r["demand_images_per_s"],
                    "of tier's read rate (%)": 100 * v["images_per_s"] / r["tier_images_per_s"],
                    "limited by": v["bound"],
                    "": mark,
                }
            )
    return pd.DataFrame(rows) if rows else None


def section(folder: Path) -> str:
    """The capacity report's opening: each tier's answer line as the terminal printed it, how it was
    predicted, the evidence per accelerator count, and the figure."""
    import html

    import pandas as pd

    from analysis.htmltable import table as html_table

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
            "measured read rate; limited by: analysis/bounds.py.</p>" + html_table(ev)
            if ev is not None
            else ""
        )
    )


INTRO = (
    "Per tier and accelerator profile (python -m campaign.capacity): the count predicted from the tier's read "
    "rate, one client core's decode rate and one accelerator's demand at the AU threshold, beside the largest "
    "count whose every run held the threshold (AU of the slowest accelerator, first step left out), the "
    "aggregate MB/s there and what limited the next count. Data: capacity.csv."
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
