"""``python -m campaign.capacity ... platform.dry_run=true``: the search's plan, with nothing run or written.

The search cannot plan its emulated cells ahead: how many accelerators it tries depends on the rates
its two probe campaigns measure. So a dry run prints each probe's own dry run (the cells, the data they
need, the estimated time) and then the shape of the search that would follow them."""

from __future__ import annotations

from pathlib import Path

from campaign.capacity import search
from campaign.overrides import value_of


def is_dry_run(overrides: list[str], profile: dict) -> bool:
    """Whether the search's cells would be dry runs (``platform.dry_run``, from an override or a platform
    preset), read from the composed config of its first tier's emulated cell."""
    from campaign import choices

    tier = (value_of(overrides, "storage") or "local").split(",")[0]
    cell = [*search.prove_cell(tier, profile, overrides), "platform.tasks_per_node=1"]
    return bool(choices.compose(cell).platform.dry_run)


def plan(out: Path, profile: dict, tiers: list[str], most: int, most_why: str, overrides: list[str]) -> int:
    """Print, per tier, the dry runs of its two probe campaigns and the search's shape; 0, or the exit
    status of the first probe whose dry run refused its cells (it printed why). Writes nothing; ``most_why``:
    what set ``most``."""
    from campaign import subcampaign

    for tier in tiers:
        for name, cells, what in search.probes(tier, profile, overrides):
            print(f"[capacity] {tier}: {what} ({name}):", flush=True)
            rc = subcampaign.run(cells, out / tier / name)
            if rc != 0:
                return rc
        print(shape(out / tier / "prove", tier, profile, (most, most_why), overrides), flush=True)
    print(f"[capacity] dry run into {out}: nothing was run or written", flush=True)
    return 0


def shape(prove: Path, tier: str, profile: dict, most: tuple[int, str], overrides: list[str]) -> str:
    """The rounds of emulated cells that would follow the probes, and the cell each round runs; ``most``: the
    most accelerators a cell emulates and what set it."""
    inp = search.Inputs.of(tier, profile, overrides)
    need, nodes = search.demand(inp), inp.nodes
    au = f"AU >= {100 * float(profile['au_threshold']):.0f}%"
    cell = [o for o in search.prove_cell(tier, profile, overrides) if not o.startswith("platform.dry_run")]
    per_node = f" per node on {nodes} nodes" if nodes > 1 else ""
    return (
        f"[capacity] {tier}: then N, the most {profile['name']} accelerators{per_node} both rates feed (one "
        f"needs {need:.0f} images/s at {au}), proven by rounds of emulated cells into {prove}: N - 1, N and "
        f"N + 1, then one more up or down until the largest count whose every run held {au} has a failing "
        f"count above it; 1 to {most[0]} accelerators ({most[1]})\n"
        f"[capacity] {tier}: each round's cells: {' '.join(cell)} platform.tasks_per_node=<accelerators>"
    )
