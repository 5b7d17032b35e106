"""Sharded checkpoints beside MLPerf Storage's published checkpoint results (``mlperf_checkpoints.csv`` and
the report's table): for each model shape measured here that a submission also ran, the submission's save
and load figures and this campaign's, in the same units and by the same definitions (durations the
slowest rank's, throughput every rank's bytes over it), and whether the two are the same workload.

They are the same workload when this campaign wrote every rank's shard of the model (not a subset), the
load was cold, and the ranks were as many as the submission's. The storage differs, which is what the
table is for: a comparable row says how this tier does the submission's job, never that it reproduced it.
"""

from __future__ import annotations

from pathlib import Path

PUBLISHED = Path(__file__).resolve().parent / "mlperf_checkpoints.yaml"
MLPERF = "mlperf_checkpoints.csv"
GIB = 2**30 / 1e9  # GB in a GiB: DLIO reports binary units
COLUMNS = [
    "model",
    "source",
    "storage",
    "ranks_written",
    "ranks",
    "checkpoint_gb",
    "save_s",
    "save_gb_s",
    "load_s",
    "load_gb_s",
    "load_cache",
    "runs",
    "same_workload",
    "why",
]


def published() -> list[dict]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(PUBLISHED))


def table(results):
    """The comparison as a tidy table (None when no measured model shape has published figures)."""
    import pandas as pd

    from analysis.tables import tidy

    if results is None or results.empty or "save_throughput_gb_s" not in results:
        return None
    rows = results[results["save_throughput_gb_s"].notna()].copy()
    pubs = [p for p in published() if p["model"] in set(tidy.text(rows["checkpoint_model"]))]
    if not pubs:
        return None
    rows["where"] = rows["storage"].where(
        tidy.text(rows.get("checkpoint_target", "")) != "burst_buffer",
        tidy.text(rows.get("checkpoint_tiers", "")),
    )
    out = []
    for p in pubs:
        out.append(
            {
                "model": p["model"],
                "source": f"{p['round']} {p['division']}, {p['submitter']} {p['system']} "
                f"({p['hosts']} host{'s' if p['hosts'] > 1 else ''})",
                "storage": "(the submitter's)",
                "ranks_written": p["ranks"],
                "ranks": p["ranks"],
                "checkpoint_gb": p["checkpoint_gib"] * GIB,
                "save_s": p["save_s"],
                "save_gb_s": p["save_gib_s"] * GIB,
                "load_s": p["load_s"],
                "load_gb_s": p["load_gib_s"] * GIB,
                "load_cache": "",
                "runs": None,
                "same_workload": "",
                "why": f"published: {p['source']}",
            }
        )
        mine = rows[tidy.text(rows["checkpoint_model"]) == p["model"]]
        for (where, written), g in mine.groupby(["where", "ranks_written"], sort=False):
            whole = (
                bool((g["checkpoint_gb"] >= 0.999 * g["model_checkpoint_gb"]).all())
                if "model_checkpoint_gb" in g
                else int(written) == p["ranks"]
            )
            states = sorted(set(tidy.text(g["cache_state"])))
            why = []
            if not whole:
                why.append(
                    f"subset mode: {int(written)} of the model's ranks wrote their shards (the submission: "
                    f"all {p['ranks']}), so the bytes and the slowest rank are a subset's"
                )
            elif int(written) != p["ranks"]:
                why.append(f"{int(written)} ranks, the submission {p['ranks']}")
            if states != ["cold"]:
                why.append(f"loads not all cold ({'/'.join(states)})")
            out.append(
                {
                    "model": p["model"],
                    "source": "measured here",
                    "storage": where,
                    "ranks_written": int(written),
                    "ranks": p["ranks"],
                    "checkpoint_gb": g["checkpoint_gb"].median(),
                    "save_s": g["save_duration_s"].median(),
                    "save_gb_s": g["save_throughput_gb_s"].median(),
                    "load_s": g["load_duration_s"].median(),
                    "load_gb_s": g["load_throughput_gb_s"].median(),
                    "load_cache": "/".join(states),
                    "runs": len(g),
                    "same_workload": "no" if why else "yes",
                    "why": "; ".join(why)
                    or f"the submission's shape on {where}: its storage beside the submitter's",
                }
            )
    return pd.DataFrame(out, columns=COLUMNS).astype({"runs": "Int64", "ranks_written": int, "ranks": int})


def write(results, folder: Path) -> list[Path]:
    from analysis import outputs

    t = table(results)
    if t is None:
        return []
    with outputs.create(folder / MLPERF) as f:
        t.round(4).to_csv(f, index=False)
    return [folder / MLPERF]
