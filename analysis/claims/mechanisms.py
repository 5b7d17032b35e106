"""What a claim of the paper depends on, and which measured rows have it.

A claim names its mechanism (``analysis/claims/paper_claims.yaml``: ``mechanism``). Rows measured where the
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

STORAGE_PRESETS = Path(__file__).resolve().parent.parent.parent / "conf" / "storage"
CHECKPOINT_MIN_MB = 100.0  # below it TensorFlow's 0.05-0.08 s per save is a large part of a fast tier's stall


@dataclass(frozen=True)
class Mechanism:
    needs: str  # what the claim depends on, as the report prints it
    remedy: str  # what a user needs to measure it
    # one device serves the reads: its 1-thread busy share bounds what threads can add
    one_device: bool = False


DEVICE = {
    "queue_depth_gains": Mechanism(
        "a device whose requests cost less at a deeper queue (a disk serving queued requests nearest-first)",
        "a real HDD (storage=hdd storage.root=<its mount>) or the modelled one (storage=modeled_hdd)",
        one_device=True,
    ),
    "parallel_servers": Mechanism(
        "storage servers that serve a run's requests side by side (Lustre's object storage targets)",
        "a Lustre mount (storage=lustre storage.root=<a folder on it>) or the modelled one "
        "(storage=modeled_lustre)",
    ),
}
RUN = {
    "checkpoint_rate_bound": Mechanism(
        f"checkpoints large enough that the tier's rate sets the stall (at least {CHECKPOINT_MIN_MB:.0f} MB "
        "each; the paper's were about 600 MB)",
        "a larger model (workload.width, workload.image_side) or the paper scale",
    ),
}


def declared(storage: str, storages: dict, what: str = "mechanisms") -> list[str]:
    """What tier ``storage`` declares under ``what`` (its mechanisms, its ``fs_types``): its recorded config,
    or (records written before tiers declared it) its preset's."""
    conf = storages.get(storage) or {}
    if what in conf:
        return list(conf[what] or [])
    preset = STORAGE_PRESETS / f"{storage}.yaml"
    if preset.is_file():
        from omegaconf import OmegaConf

        return list(OmegaConf.load(preset).get(what) or [])
    return []


def on_their_file_system(rows, storages: dict):
    """(the rows measured on a file system their tier's preset names, why the others cannot test a claim: ''
    when none is left out). A row of storage=lustre read from ext4 (``storage.fs_check=false``, or a record
    from before the check) measured ext4, whatever its label says."""
    from analysis.tables import tidy

    if rows.empty or "fs_type" not in rows or "storage" not in rows:
        return rows, ""
    tiers, fs = tidy.text(rows["storage"]), tidy.text(rows["fs_type"])
    wanted = {t: declared(t, storages, "fs_types") for t in set(tiers)}
    off = [bool(wanted[t]) and f not in ("", "nan", "None") and f not in wanted[t] for t, f in zip(tiers, fs)]
    if not any(off):
        return rows, ""
    pairs = sorted({(t, f) for t, f, o in zip(tiers, fs, off) if o})
    where = ", ".join(f"storage={t} on {f} (not {' or '.join(wanted[t])})" for t, f in pairs)
    keep = [not o for o in off]
    return rows[keep], (
        f"measured with {where}: the root's file system was not the preset's (storage.fs_check=false); "
        "needs a root on the preset's file system"
    )


def having(name: str, rows, storages: dict):
    """(the rows that have mechanism ``name``, why the others cannot test the claim: '' when all can)."""
    from analysis.tables import tidy

    if name in DEVICE:
        tiers = sorted(set(tidy.text(rows["storage"])))
        ok = [t for t in tiers if name in declared(t, storages)]
        lacking = [t for t in tiers if t not in ok]
        why = (
            f"measured on {', '.join(lacking)}, which lacks {DEVICE[name].needs}; needs {DEVICE[name].remedy}"
            if lacking
            else ""
        )
        return rows[tidy.text(rows["storage"]).isin(ok)], why
    if name in RUN:
        size = rows.get("checkpoint_mb")
        inside = rows[size >= CHECKPOINT_MIN_MB] if size is not None else rows.iloc[0:0]
        mb = (
            f"{size.median():.0f} MB checkpoints"
            if size is not None and size.notna().any()
            else "no checkpoint size"
        )
        return inside, (
            f"{mb}: the claim is about {RUN[name].needs}; needs {RUN[name].remedy}"
            if len(inside) < len(rows)
            else ""
        )
    raise KeyError(f"unknown mechanism {name!r} (analysis/claims/mechanisms.py)")
