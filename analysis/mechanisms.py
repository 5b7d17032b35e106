"""What a claim of the paper depends on, and which measured rows have it.

A claim names its mechanism (``analysis/paper_claims.yaml``: ``mechanism``). Rows measured where the
mechanism is missing cannot test the claim: the verdict is *not comparable*, with the reason, never
*not reproduced*. Two kinds:

- a device's: the tier's preset declares it (``conf/storage/*.yaml``: ``mechanisms``), e.g. a disk
  whose requests cost less at a deeper queue; a flat request-rate throttle has no such gain;
- a run's: the rows' own figures put them in the regime, e.g. checkpoints large enough that the
  tier's rate, not TensorFlow's fixed cost per save, sets the stall.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

STORAGE_PRESETS = Path(__file__).resolve().parent.parent / "conf" / "storage"
CHECKPOINT_MIN_MB = 100.0  # below it TensorFlow's 0.05-0.08 s per save is a large part of a fast tier's stall


@dataclass(frozen=True)
class Mechanism:
    needs: str  # what the claim depends on, as the report prints it
    remedy: str  # what a user needs to measure it


DEVICE = {
    "queue_depth_gains": Mechanism(
        "a device whose requests cost less at a deeper queue (a disk serving queued requests nearest-first)",
        "a real HDD (storage=hdd storage.root=<its mount>) or the modelled one (storage=modeled_hdd)"),
    "parallel_servers": Mechanism(
        "storage servers that serve a run's requests side by side (Lustre's object storage targets)",
        "a Lustre mount (storage=lustre storage.root=<a folder on it>) or the modelled one (storage=modeled_lustre)"),
}
RUN = {
    "checkpoint_rate_bound": Mechanism(
        f"checkpoints large enough that the tier's rate sets the stall (at least {CHECKPOINT_MIN_MB:.0f} MB each; "
        "the paper's were about 600 MB)",
        "a larger model (workload.width, workload.image_side) or the paper scale"),
}


def declared(storage: str, storages: dict) -> list[str]:
    """The mechanisms tier ``storage`` declares: its recorded config, or (records written before tiers
    declared them) its preset's."""
    conf = storages.get(storage) or {}
    if "mechanisms" in conf:
        return list(conf["mechanisms"] or [])
    preset = STORAGE_PRESETS / f"{storage}.yaml"
    if preset.is_file():
        from omegaconf import OmegaConf

        return list(OmegaConf.load(preset).get("mechanisms") or [])
    return []


def having(name: str, rows, storages: dict):
    """(the rows that have mechanism ``name``, why the others cannot test the claim: '' when all can)."""
    from analysis import tables

    if name in DEVICE:
        tiers = sorted(set(tables.text(rows["storage"])))
        ok = [t for t in tiers if name in declared(t, storages)]
        lacking = [t for t in tiers if t not in ok]
        why = (f"measured on {', '.join(lacking)}, which lacks {DEVICE[name].needs}; needs {DEVICE[name].remedy}"
               if lacking else "")
        return rows[tables.text(rows["storage"]).isin(ok)], why
    if name in RUN:
        size = rows.get("checkpoint_mb")
        inside = rows[size >= CHECKPOINT_MIN_MB] if size is not None else rows.iloc[0:0]
        mb = f"{size.median():.0f} MB checkpoints" if size is not None and size.notna().any() else "no checkpoint size"
        return inside, (f"{mb}: the claim is about {RUN[name].needs}; needs {RUN[name].remedy}"
                        if len(inside) < len(rows) else "")
    raise KeyError(f"unknown mechanism {name!r} (analysis/mechanisms.py)")
