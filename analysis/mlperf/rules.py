"""MLPerf Storage's training rules, checked cell by cell on what the records hold.

Each rule gives a ``Check``: the figure the runs show, the limit the rule sets, and a state. A cell's verdict
is the worst state of its checks, as ``mlpstorage`` judges a result:

- CLOSED: the rule holds as the CLOSED division asks;
- OPEN: the rule is broken in a way the OPEN division allows when it is disclosed (another framework or
  sample format);
- INVALID: no division accepts it (too few runs, a 6% spread, a dataset the page cache can hold, boto3, an
  accelerator that v3.0 takes only for what-if runs, ...).

A workstation seldom complies (five times its memory seldom fits on its disk), so the verdict says which
rules a compliant run would need, each with its figure: a what-if answer with its reasons, never a silent
pass. The numbers are MLPerf Storage's (``training.yaml``); the figures are the records' own.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import statistics
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from analysis.tables import bounds
from jobs import records
from jobs.cell import recorded
from jobs.schema import AcceleratorConf, CampaignConf

CLOSED, OPEN, INVALID = "CLOSED", "OPEN", "INVALID"
WORSE = {CLOSED: 0, OPEN: 1, INVALID: 2}  # the states, best first: a verdict is its worst check's
GIB = 2**30
# the sample format each dataset.format stores its samples in (the tool's file sets are JPEG images)
_SAMPLE_FORMAT = {"files": "jpeg", "tfrecord": "tfrecord", "hdf5": "hdf5", "npz": "npz"}


@functools.cache
def rules() -> dict:
    """MLPerf Storage's training rules (``training.yaml``), read once."""
    return yaml.safe_load((Path(__file__).parent / "training.yaml").read_text())


@dataclass(frozen=True)
class Check:
    rule: str  # what is checked, in MLPerf Storage's words
    figure: str  # what the cell's runs show
    limit: str  # what the rule asks
    state: str  # CLOSED, OPEN or INVALID
    why: str = ""  # the reason in a few words, where the state is not CLOSED


@dataclass(frozen=True)
class Verdict:
    """One cell's checks and what they add up to."""

    cell_dir: str
    workload: str  # MLPerf Storage's workload (unet3d), or the accelerator preset's name where it has none
    accelerator: str  # MLPerf Storage's accelerator (b200), or the preset's device
    accelerators: int  # emulated accelerators of the cell (nodes x tasks per node)
    au: float | None  # the lowest AU of its measured runs, %
    threshold: float  # the AU the rule asks, %
    checks: tuple[Check, ...]

    @property
    def state(self) -> str:
        return max((c.state for c in self.checks), key=WORSE.__getitem__, default=INVALID)

    def line(self) -> str:
        """The verdict in one line: what the cell held, whether CLOSED would accept it, and why not."""
        n = f"{self.accelerators} accelerator{'s' if self.accelerators != 1 else ''}"
        au = "no measured run" if self.au is None else f"AU {self.au:.1f}% (needs {self.threshold:.0f}%)"
        head = f"{self.workload} on {self.accelerator.upper()}: {n} at {au}"
        if self.state == CLOSED:
            return f"{head}; CLOSED-eligible: yes, every rule holds"
        bad = [c for c in self.checks if c.state != CLOSED]
        reasons = "; ".join(f"{c.why} ({c.state})" for c in sorted(bad, key=lambda c: -WORSE[c.state]))
        return f"{head}; CLOSED-eligible: no, because {reasons}"


def check(cell_dir: str, rec: records.CellRecord, record_path: Path) -> Verdict:
    """The verdict of one completed cell of ``workload=emulated`` (its record at ``record_path``)."""
    r = rules()
    cfg = recorded(rec)
    acc = cfg.accelerator
    profile = r["profiles"].get(acc.name)
    measured = records.runs_of(rec)
    threshold = 100 * float(acc.au_threshold)  # the profile's (the schema gives every profile one)
    au = min((run["train_au_percentage"] for run in measured), default=None)
    accelerators = cfg.platform.nodes * cfg.platform.tasks_per_node
    checks = (
        _profile(acc, profile),
        _framework(cfg, r),
        _format(rec, profile),
        _sample_size(rec, profile, r),
        _runs(rec, r),
        _seeds(measured),
        _gaps(records.runs_of(rec, warmups=True)),
        _replication(measured, r),
        _au(cfg, measured, threshold),
        _first_step(measured),
        _dataset(rec, cfg, r, accelerators),
        _from_device(measured, r),
        file_systems(rec, record_path),
        _client(rec, r),
    )
    return Verdict(
        cell_dir,
        profile["workload"] if profile else acc.name,
        profile["accelerator"] if profile else acc.device,
        accelerators,
        au,
        threshold,
        checks,
    )


def _profile(acc: AcceleratorConf, profile: dict | None) -> Check:
    name = f"accelerator={acc.name}"
    limit = f"a {rules()['edition']} CLOSED profile: " + ", ".join(
        k for k, p in rules()["profiles"].items() if p["division"] == "closed"
    )
    if profile is None:
        return Check(
            "workload and accelerator", name, limit, INVALID, f"{name} is not an MLPerf Storage profile"
        )
    if profile["division"] != "closed":
        why = f"{profile['accelerator'].upper()} is a what-if accelerator in {rules()['edition']}"
        return Check("workload and accelerator", name, limit, INVALID, why)
    return Check("workload and accelerator", name, limit, CLOSED)


def _framework(cfg: CampaignConf, r: dict) -> Check:
    name = cfg.framework.name
    limit = f"{r['framework']} (another framework: OPEN)"
    if name == r["framework"]:
        return Check("data loader", name, limit, CLOSED)
    return Check("data loader", name, limit, OPEN, f"the data loader is {name}'s")


def _format(rec: records.CellRecord, profile: dict | None) -> Check:
    fmt = _SAMPLE_FORMAT.get(records.dataset_of(rec).format, "other")
    if profile is None:
        return Check("sample format", fmt, "the workload's", INVALID, "no MLPerf Storage workload to compare")
    if fmt == profile["format"]:
        return Check("sample format", fmt, profile["format"], CLOSED)
    return Check(
        "sample format",
        fmt,
        f"{profile['format']} (another: OPEN)",
        OPEN,
        f"samples are {fmt}, not {profile['format']}",
    )


def _sample_size(rec: records.CellRecord, profile: dict | None, r: dict) -> Check:
    """The samples' mean size against the workload's record length (neither division may change it)."""
    ds = records.dataset_of(rec)
    mean = ds.total_bytes / ds.files if ds.files else 0.0
    figure = f"{mean / 1e3:,.1f} KB mean"
    if profile is None:
        why = "no MLPerf Storage workload to compare"
        return Check("sample size", figure, "the workload's", INVALID, why)
    want, tolerance = profile["record_bytes"], r["record_tolerance"]
    limit = f"{want / 1e3:,.1f} KB ± {100 * tolerance:.0f}% ({profile['workload']}'s record length)"
    if abs(mean - want) <= tolerance * want:
        return Check("sample size", figure, limit, CLOSED)
    why = f"the samples average {mean / 1e3:,.1f} KB, not {profile['workload']}'s {want / 1e3:,.1f} KB"
    return Check("sample size", figure, limit, INVALID, why)


def _runs(rec: records.CellRecord, r: dict) -> Check:
    runs = records.runs_of(rec, warmups=True)
    warm = sum(run.warmup for run in runs)
    measured = len(runs) - warm
    figure = f"{measured} measured, {warm} warm-up"
    limit = f"exactly {r['measured_runs']} measured, {r['warmup_runs']} warm-up"
    if (measured, warm) == (r["measured_runs"], r["warmup_runs"]):
        return Check("runs", figure, limit, CLOSED)
    return Check(
        "runs",
        figure,
        limit,
        INVALID,
        f"{measured} measured and {warm} warm-up runs, not {r['measured_runs']} and {r['warmup_runs']}",
    )


def _seeds(measured: list) -> Check:
    seeds = [run.get("shuffle_seed") for run in measured]
    figure = ", ".join(str(s) for s in seeds) or "none"
    if len(set(seeds)) == len(seeds) and None not in seeds:
        return Check("seed", figure, "a new seed each run", CLOSED)
    return Check("seed", figure, "a new seed each run", INVALID, "a seed repeats across runs")


def _when(run: records.Run) -> tuple[float, float]:
    start = datetime.fromisoformat(run["started_at"]).timestamp()
    return start, start + float(run.get("run_wall_s") or run["runtime_s"])


def _gaps(runs: list) -> Check:
    spans = [_when(run) for run in runs]
    gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:])]
    shortest = min((end - start for start, end in spans), default=0.0)
    widest = max(gaps, default=0.0)
    figure = f"widest gap {widest:.1f} s"
    limit = f"< the shortest run ({shortest:.1f} s)"
    if widest < shortest:
        return Check("gap between runs", figure, limit, CLOSED)
    return Check("gap between runs", figure, limit, INVALID, f"runs {widest:.0f} s apart, longer than a run")


def _replication(measured: list, r: dict) -> Check:
    rates = [run["images_per_s"] for run in measured]
    limit = f"≤ {100 * r['replication']:.0f}% ((max - min) / median)"
    if len(rates) < 2:
        return Check("replication", "one run", limit, INVALID, "one measured run shows no spread")
    spread = (max(rates) - min(rates)) / statistics.median(rates)
    figure = f"{100 * spread:.1f}% over {min(rates):,.0f}-{max(rates):,.0f} samples/s"
    if spread <= r["replication"]:
        return Check("replication", figure, limit, CLOSED)
    return Check("replication", figure, limit, INVALID, f"the runs' samples/s spread {100 * spread:.1f}%")


# what limited a run that fell short, in MLPerf Storage's users' terms (analysis.tables.bounds' labels)
_GAVE = {
    "cpu": "the client's CPU",
    "storage": "the storage",
    "cache": "the page cache",
    "latency": "request latency",  # its reason says neither saturated, and with what figures
    "mixed": "the client's CPU and the storage both",
}


def _au(cfg: CampaignConf, measured: list, threshold: float) -> Check:
    aus = [run["train_au_percentage"] for run in measured]
    limit = f"≥ {threshold:.0f}% in every run"
    if not aus:
        return Check("accelerator utilization", "no measured run", limit, INVALID, "no measured run")
    figure = f"lowest {min(aus):.1f}%, median {statistics.median(aus):.1f}%"
    if min(aus) >= threshold:
        return Check("accelerator utilization", figure, limit, CLOSED)
    return Check("accelerator utilization", figure, limit, INVALID, _short(cfg, min(measured, key=_au_of)))


def _au_of(run: records.Run) -> float:
    return run["train_au_percentage"]


def _short(cfg: CampaignConf, run: records.Run) -> str:
    """Why the run of lowest AU fell short: what limited it, with the figure that decides it."""
    dev, con = run.get("bytes_read_device"), run.get("bytes_consumed")
    row = {**run, "device_read_ratio": dev / con if dev is not None and con else None}
    emulate = cfg.storage.emulate
    bound, reason = bounds.label(row, dataclasses.asdict(emulate) if emulate is not None else None)
    gave = _GAVE.get(bound, "not known")
    return f"AU fell to {_au_of(run):.1f}%, limited by {gave} ({reason})"


def _first_step(measured: list) -> Check:
    """The first step's I/O counts in samples/s (the runtime) and not in AU (the steady runtime, which starts
    after it: with several accelerators, each task's first step is left out of its own AU)."""
    figure = ", ".join(f"{run['first_step_s']:.2f}" for run in measured) + " s"
    limit = "in samples/s, not in AU"
    left_out = [run["first_step_s"] > 0 and run["steady_runtime_s"] < run["runtime_s"] for run in measured]
    if left_out and all(left_out):
        return Check("first step", figure, limit, CLOSED)
    return Check("first step", figure, limit, INVALID, "the first step is not left out of AU")


def _client_memory(prov: records.Provenance) -> tuple[int, bool]:
    """The memory the rule counts per host: the machine's, or the runs' cgroup limit where one held them
    (``platform.memory_limit_gb``: their page cache could not grow beyond it); and whether it is the limit."""
    total, limit = prov.mem_total_bytes, prov.memory_limit_bytes
    if limit and (not total or int(limit) < total):
        return int(limit), True
    return total, False


def _dataset(rec: records.CellRecord, cfg: CampaignConf, r: dict, accelerators: int) -> Check:
    ds = records.dataset_of(rec)
    size, files = ds.total_bytes, ds.files
    memory, limited = _client_memory(records.provenance_of(rec))
    hosts = cfg.platform.nodes
    need = r["memory_multiple"] * hosts * memory
    steps = r["steps_per_epoch"] * cfg.batch_size * accelerators
    figure = f"{size / GIB:.2f} GiB in {files:,} samples"
    held = " (the runs' memory limit)" if limited else ""
    rule = f"{r['memory_multiple']} x {hosts} x {memory / GIB:.1f} GiB{held}"
    limit = f"≥ {rule} = {need / GIB:.1f} GiB and ≥ {steps:,} samples"
    if size >= need and files >= steps:
        return Check("dataset size", figure, limit, CLOSED)
    short = []
    if size < need:
        short.append(f"{size / GIB:.2f} GiB against the {need / GIB:.0f} GiB that {rule} requires")
    if files < steps:
        short.append(f"{files:,} samples against {steps:,} for {r['steps_per_epoch']} steps")
    why = "the dataset is " + " and ".join(short)
    if files and size:  # the rule's bytes in samples of the set's own mean size
        complies = max(steps, math.ceil(need * files / size))
        why += f" (a set that complies here: dataset.num_images={complies})"
    return Check("dataset size", figure, limit, INVALID, why)


def _from_device(measured: list, r: dict) -> Check:
    """A run the page cache served shows high AU and no storage traffic: the storage gave no number."""
    ratios = [
        run["bytes_read_device"] / run["bytes_consumed"]
        for run in measured
        if run.get("bytes_read_device") is not None and run.get("bytes_consumed")
    ]
    limit = f"≥ {100 * r['from_device']:.0f}% of the bytes consumed, every run"
    if not ratios:
        return Check("read from storage", "not counted", limit, INVALID, "no run counted its device reads")
    figure = f"lowest {100 * min(ratios):.0f}%"
    if min(ratios) >= r["from_device"]:
        return Check("read from storage", figure, limit, CLOSED)
    return Check(
        "read from storage",
        figure,
        limit,
        INVALID,
        f"the page cache served {100 * (1 - min(ratios)):.0f}% of a run",
    )


def file_systems(rec: records.CellRecord, record_path: Path) -> Check:
    """Data and results on different file systems: the data's device against the record's own."""
    data = records.provenance_of(rec).read_mount.get("dev")
    st = os.stat(record_path)
    results = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    figure = f"data on {data or 'a store'}, results on {results}"
    if data != results:
        return Check("data and results", figure, "different file systems", CLOSED)
    return Check(
        "data and results",
        figure,
        "different file systems",
        INVALID,
        f"data and results share the file system {results}",
    )


def _client(rec: records.CellRecord, r: dict) -> Check:
    limit = "an approved object client: " + ", ".join(r["object_clients"])
    store = records.provenance_of(rec).object_store  # what the runs read through: a record of the store's own
    if not store:
        return Check("object client", "none (files)", limit, CLOSED)
    client = store.get("client")
    if client in r["object_clients"]:
        return Check("object client", client, limit, CLOSED)
    return Check("object client", client, limit, INVALID, f"{client} is not an approved client")
