"""``python -m analysis mlperf <campaign> --results-dir DIR``: each judged cell laid out as MLPerf Storage's
results tree, so a storage team can hand its runs on in the shape MLPerf's tools read:

  DIR/<division>/<org>/results/<system>/training/<workload>/run/<timestamp>/
  DIR/<division>/<org>/results/<system>/checkpointing/<model>/<timestamp>/
      summary.json          DLIO's summary: accelerators (processes), hosts and the run's metrics: for
                            training its AU, samples/s and MB/s; for checkpointing the checkpoint's size
                            and the mean and deviation of the ten saves' and loads' durations and rates
                            (DLIO's ``checkpoint_size_GB`` and ``*_GB_per_second`` are GiB, as DLIO's)
      per_epoch_stats.json  DLIO's per-epoch figures (a run of this tool is one epoch; a checkpointing
                            run's epoch holds each save and load, ``save_ckpt1``, ``load_ckpt1``, ...)
      dlio_config/          the cell's Hydra folder: config.yaml (resolved), hydra.yaml, overrides.yaml
      <the cell's log>      what the cell printed
      provenance.json       this tool, its commit, the rules' edition, the client library, and the verdict
                            with every rule's figure beside its limit

One folder per measured run (MLPerf's five runs; the warm-up is left out), named by the run's start
(``20261128_062312``; ``..._run3`` after each where two runs of a cell started within one second). The
division is the verdict's: ``closed`` for a CLOSED-eligible cell, ``open`` for an OPEN one; a cell that
breaks a rule goes under ``invalid``, which is no division of MLPerf's, so that it is never handed on by
mistake. Beside ``results/``, ``DIR/<division>/<org>/systems/<system>.json`` is MLPerf's system
description with what the records say (the client hosts, their CPU model and memory, the file system the
runs read and its mount options), null where they say nothing (the storage system's make, model and
capacity) and no network: the submitter fills those in, and one already there is left as it is. Nothing
outside ``DIR`` is written, and a run folder already there is left as it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import statistics
from datetime import datetime
from pathlib import Path

from analysis.mlperf import checkpointing, rules
from jobs import records
from jobs.cell import recorded
from jobs.schema import CampaignConf

DIVISION = {rules.CLOSED: "closed", rules.OPEN: "open", rules.INVALID: "invalid"}
TIMESTAMP = "%Y%m%d_%H%M%S"  # MLPerf Storage's run folders (20260714_120349)
LOG = "__main__.log"  # the cell's log, as Hydra names it


class ResultsDirError(RuntimeError):
    """The tree cannot be written where asked; the message names the option, or the cell."""


def _name(text: str, what: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", text):
        raise ResultsDirError(
            f"{what}={text!r}: a plain name is needed (letters, digits, _ . -; 100 at most)"
        )


def check(out: Path, org: str, system: str) -> None:
    """Raise ResultsDirError, naming the option, where the tree cannot go."""
    _name(org, "--org")
    _name(system, "--system")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ResultsDirError(
            f"--results-dir={out}: not a folder (a link or a file is never written through)"
        )
    if out.exists() and out.stat().st_uid != os.geteuid():
        raise ResultsDirError(f"--results-dir={out}: another user's folder; choose one of your own")


def write(verdicts: list, folder: Path, out: Path, org: str, system: str) -> list[Path]:
    """Lay every verdict's measured runs out under ``out``; returns the run folders written. Every level
    below ``out`` is opened without following a link and must be this user's; each run folder is built
    under a hidden name and renamed into place once whole, so a failure leaves no folder that looks
    like a result."""
    check(out, org, system)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    described: dict[str, list[records.CellRecord]] = {}  # division -> the records of its cells
    for v in verdicts:
        path = folder / v.cell_dir / records.FILENAME
        rec = records.read(path)
        cfg = recorded(rec)  # typed once for its runs' files
        described.setdefault(DIVISION[v.state], []).append(rec)
        levels = [DIVISION[v.state], org, "results", system, *_kind_levels(v)]
        base = _descend(out, levels)
        try:
            for name, run in _named(records.runs_of(rec)):
                if _exists(name, base):
                    continue  # laid out before: what is there stays
                _run_folder(base, name, v, rec, cfg, run, path.parent)
                written.append(out.joinpath(*levels, name))
        except (KeyError, ValueError, TypeError) as e:  # a record edited by hand, or of another version
            raise ResultsDirError(
                f"cell {v.cell_dir}: its record lacks or garbles {e}; the runs from there on are left out"
            ) from None
        finally:
            os.close(base)
    for division, recs in described.items():
        _describe(out, [division, org, SYSTEMS], system, recs)
    return written


SYSTEMS = "systems"  # MLPerf's folder of system descriptions, beside results/


def _describe(out: Path, levels: list[str], system: str, recs: list[records.CellRecord]) -> None:
    """MLPerf's ``systems/<system>.json`` for the cells of ``recs``, where none is there yet (one the
    submitter has filled in stays as it is)."""
    base = _descend(out, levels)
    name, partial = f"{system}.json", f".{system}.json.partial-{os.getpid()}"
    try:
        if _exists(name, base):
            return
        _put(base, partial, json.dumps(system_description(recs), indent=2) + "\n")
        os.rename(partial, name, src_dir_fd=base, dst_dir_fd=base)  # whole, or not there
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial, dir_fd=base)
        os.close(base)


def system_description(recs: list[records.CellRecord]) -> dict:
    """MLPerf Storage's system description (the keys of v1.0's published ``systems/<system>.json``) with
    what the cells' records say: the client nodes' CPU model and memory, every host that ran a task, and
    the file system the runs read with its mount options (an object store: its product and the client
    library). What no record holds (the storage system's make, model, version and capacity, the CPUs'
    frequencies, the memory's class; the CPUs' sockets and cores in records written before they were
    kept) is null, and ``networks`` is empty, for the submitter to fill in."""
    provs = [records.provenance_of(r) for r in recs]
    hosts = sorted({h for r in recs for h in _hosts(r)})
    mounts = {  # the file systems the runs read (an object store's cells read its server, not a mount)
        (m.get("fs_type"), m.get("source"), m.get("options"))
        for prov in provs
        if not prov.object_store
        for m in [prov.read_mount]
        if m
    }
    stores = {
        f"{o.get('product') or o.get('service')} through {o.get('client')}"
        for prov in provs
        for o in [prov.object_store]
        if o
    }
    cpu = next((p.cpu_model for p in provs if p.cpu_model), None)
    topology = next((p["cpu_topology"] for p in provs if p.get("cpu_topology")), {})  # older records: none
    memory = max((p.mem_total_bytes for p in provs), default=0)
    return {
        "networks": [],
        "nodes": [
            {
                "node_type_name": "client",
                "config_options": [],
                "CPU": {
                    "vendor_and_model_name": cpu,
                    "socket_count": topology.get("sockets"),
                    "cores_per_socket": topology.get("cores_per_socket"),
                    "threads_per_socket": topology.get("threads_per_socket"),
                    "base_frequency": None,
                    "boost_frequency": None,
                },
                "DRAM": {"capacity_MiB": memory // 2**20 or None, "class": None, "frequency": None},
                "accelerators": [],  # emulated by their step time: MLPerf Storage runs without them
                "nic_ports": [],
                "drives": [],
            }
        ],
        "benchmark_hosts": [
            {"node_name": h, "node_type_name": "client", "benchmark_instances": [{"mapping_type": "native"}]}
            for h in hosts
        ],
        "storage_system": {
            "vendor_name": None,
            "solution_name": None,
            "model_name": None,
            "version": None,
            "software_defined": None,
            "hyperconverged": None,
            "solution_type": "; ".join(sorted([*(f"{fs} on {src}" for fs, src, _ in mounts), *stores]))
            or None,
            "client_mount_options": sorted({opts for _, _, opts in mounts if opts}),
            "solution_config_options": [],
            "usable_capacity_GiB": None,
            "raw_capacity_GiB": None,
            "hardware_components": [],
            "software_components": [],
        },
    }


def _hosts(rec: records.CellRecord) -> set[str]:
    """The hosts that ran the cell's runs: each task's (a cell of several tasks), else the cell's own."""
    tasks = {t.get("host") for run in rec.runs for t in run.get("task_results") or [] if t.get("host")}
    host = records.provenance_of(rec).host
    return tasks or ({host} if host else set())


def _kind_levels(v) -> list[str]:
    """The levels below the system of a cell's runs: MLPerf's ``training/<workload>/run`` or
    ``checkpointing/<model>``."""
    if isinstance(v, checkpointing.Verdict):
        _name(v.model, f"cell {v.cell_dir}: its model")
        return ["checkpointing", v.model]
    _name(v.workload, f"cell {v.cell_dir}: its workload")
    return ["training", v.workload, "run"]


def _open_own(name: str | Path, dir_fd: int | None, shown: Path) -> int:
    """A folder opened without following a link, refused unless it is this user's."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as e:
        raise ResultsDirError(f"{shown}: not a folder of yours to write in ({e.strerror})") from None
    if os.fstat(fd).st_uid != os.geteuid():
        os.close(fd)
        raise ResultsDirError(f"{shown}: another user's folder; nothing is written in it")
    return fd


def _descend(out: Path, levels: list[str]) -> int:
    """The open folder ``out/levels...``, each level made where missing, none followed through a link."""
    fd = _open_own(out, None, out)
    shown = out
    for part in levels:
        shown = shown / part
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            nfd = _open_own(part, fd, shown)
        finally:
            os.close(fd)
        fd = nfd
    return fd


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _named(measured: list[records.Run]) -> list[tuple[str, records.Run]]:
    """(folder name, run) of the measured runs: each run's start (MLPerf's ``20261128_062312``), with
    ``_run<N>`` after it where two runs of the cell started within one second."""
    stamps = [datetime.fromisoformat(r["started_at"]).strftime(TIMESTAMP) for r in measured]
    clash = len(set(stamps)) < len(stamps)
    return [(f"{s}_run{r.run}" if clash else s, r) for s, r in zip(stamps, measured)]


def _run_folder(
    base: int, name: str, v, rec: records.CellRecord, cfg: CampaignConf, run: records.Run, cell: Path
) -> None:
    """One run's folder, built whole under a hidden name in ``base`` (an open folder), then renamed."""
    partial = f".{name}.partial-{os.getpid()}"
    os.mkdir(partial, 0o755, dir_fd=base)
    try:
        fd = _open_own(partial, base, Path(partial))
        try:
            kept = isinstance(v, checkpointing.Verdict)
            figures = checkpoint_summary(v, rec, cfg, run) if kept else summary(v, rec, cfg, run)
            epochs = checkpoint_epoch(run) if kept else per_epoch(run)
            _put(fd, "summary.json", json.dumps(figures, indent=2) + "\n")
            _put(fd, "per_epoch_stats.json", json.dumps(epochs, indent=2) + "\n")
            hydra = {
                n: read_own(cell / ".hydra" / n) for n in ("config.yaml", "hydra.yaml", "overrides.yaml")
            }
            if any(text is not None for text in hydra.values()):
                os.mkdir("dlio_config", 0o755, dir_fd=fd)
                config = _open_own("dlio_config", fd, Path(partial) / "dlio_config")
                try:
                    for n, text in hydra.items():
                        if text is not None:
                            _put(config, n, text)
                finally:
                    os.close(config)
            log = read_own(cell / LOG)
            if log is not None:
                _put(fd, LOG, log)
            _put(fd, "provenance.json", json.dumps(provenance(v, rec, cfg), indent=2) + "\n")
        finally:
            os.close(fd)
        os.rename(partial, name, src_dir_fd=base, dst_dir_fd=base)
    except BaseException:
        shutil.rmtree(partial, dir_fd=base, ignore_errors=True)
        raise


def _put(dir_fd: int, name: str, text: str) -> None:
    """A new file in the open folder ``dir_fd``: never through a link, never over a file."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
    with open(fd, "w") as f:
        f.write(text)


def read_own(path: Path) -> str | None:
    """A file of the tool's own folders (a cell's, the results tree), read without following a link; None
    where it is not there or is no plain file."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with open(fd, errors="replace") as f:
        return f.read() if stat.S_ISREG(os.fstat(fd).st_mode) else None


def summary(v: rules.Verdict, rec: records.CellRecord, cfg: CampaignConf, run: records.Run) -> dict:
    """DLIO's ``summary.json`` of one run (one epoch): its keys, this run's figures."""
    au, samples, mb = run["train_au_percentage"], run["images_per_s"], run["mb_per_s"]
    start = datetime.fromisoformat(run["started_at"])
    return {
        "num_accelerators": v.accelerators,
        "num_hosts": cfg.platform.nodes,
        "hostname": records.provenance_of(rec).host,
        "metric": {
            "train_au_percentage": [au],
            "train_au_mean_percentage": au,
            "train_au_meet_expectation": "success" if au >= v.threshold else "fail",
            "train_au_stdev_percentage": 0.0,
            "train_throughput_samples_per_second": [samples],
            "train_throughput_mean_samples_per_second": samples,
            "train_throughput_stdev_samples_per_second": 0.0,
            "train_io_mean_MB_per_second": mb,
            "train_io_stdev_MB_per_second": 0.0,
        },
        "num_files_train": records.dataset_of(rec).files,
        "num_files_eval": 0,
        "num_samples_per_file": 1,
        "epochs": 1,
        "start": start.isoformat(),
        "end": _end(run).isoformat(),
    }


def per_epoch(run: records.Run) -> dict:
    """DLIO's ``per_epoch_stats.json``: the one epoch of this run."""
    return {
        "1": {
            "start": datetime.fromisoformat(run["started_at"]).isoformat(),
            "end": _end(run).isoformat(),
            "duration": run["run_wall_s"],
            "au": run["train_au_percentage"],
            "throughput": run["images_per_s"],
            "steps": run.get("steps"),
        }
    }


def _spread(values: list[float]) -> tuple[float, float]:
    """The mean and the standard deviation (numpy's ``std``, as DLIO takes it) of ``values``."""
    return statistics.fmean(values), statistics.pstdev(values)


def checkpoint_summary(v, rec: records.CellRecord, cfg: CampaignConf, run: records.Run) -> dict:
    """DLIO's ``summary.json`` of one checkpointing run: the checkpoint's size summed over the ranks that
    wrote it, in GiB, and the mean and deviation of the saves' and the loads' durations (each the slowest
    rank's) and rates (size / duration), DLIO's keys."""
    gib = float(run["checkpoint_gb"]) * 1e9 / 2**30
    metric: dict = {"checkpoint_size_GB": gib}
    for op, key in (("save", "save_each_duration_s"), ("load", "load_each_duration_s")):
        durations = [float(d) for d in (run.get(key) or [run[f"{op}_duration_s"]])]
        rates = [gib / d for d in durations if d > 0]
        (
            metric[f"{op}_checkpoint_io_mean_GB_per_second"],
            metric[f"{op}_checkpoint_io_stdev_GB_per_second"],
        ) = _spread(rates) if rates else (None, None)
        (
            metric[f"{op}_checkpoint_duration_mean_seconds"],
            metric[f"{op}_checkpoint_duration_stdev_seconds"],
        ) = _spread(durations)
    return {
        "num_accelerators": v.processes,
        "num_hosts": cfg.platform.nodes,
        "hostname": records.provenance_of(rec).host,
        "metric": metric,
        "num_checkpoints_write": len(run.get("save_each_duration_s") or [None]),
        "num_checkpoints_read": len(run.get("load_each_duration_s") or [None]),
        "start": datetime.fromisoformat(run["started_at"]).isoformat(),
        "end": _end(run).isoformat(),
    }


def checkpoint_epoch(run: records.Run) -> dict:
    """DLIO's ``per_epoch_stats.json`` of a checkpointing run: its one epoch's saves and loads, each with
    its duration and rate (GiB/s)."""
    gib = float(run["checkpoint_gb"]) * 1e9 / 2**30
    epoch: dict = {
        "start": datetime.fromisoformat(run["started_at"]).isoformat(),
        "end": _end(run).isoformat(),
    }
    for op, key in (("save", "save_each_duration_s"), ("load", "load_each_duration_s")):
        for n, d in enumerate(run.get(key) or [run[f"{op}_duration_s"]], start=1):
            epoch[f"{op}_ckpt{n}"] = {"duration": float(d), "throughput": gib / float(d) if d else None}
    return {"1": epoch}


def _end(run: records.Run) -> datetime:
    from datetime import timedelta

    return datetime.fromisoformat(run["started_at"]) + timedelta(seconds=float(run["run_wall_s"]))


def provenance(v, rec: records.CellRecord, cfg: CampaignConf) -> dict:
    """Who made the run and what its rules say: this tool, its commit, the rules' edition, the storage and
    client library, the cell's verdict and every check."""
    prov = records.provenance_of(rec)
    measured = [r["images_per_s"] for r in records.runs_of(rec)]
    if isinstance(v, checkpointing.Verdict):  # no samples: its summary holds its durations and rates
        measured = []
    return {
        "benchmark_tool": "iocampaign",
        "tool_commit": prov.git_commit,
        "rules_edition": rules.rules()["edition"],
        "storage": cfg.storage.name,
        "client_library": (prov.object_store or {}).get("client"),
        "cell_id": rec.cell_id,
        "verdict": v.state,
        "verdict_line": v.line(),
        "runs_median_samples_per_second": statistics.median(measured) if measured else None,
        "checks": [
            {"rule": c.rule, "figure": c.figure, "limit": c.limit, "state": c.state, "why": c.why}
            for c in v.checks
        ],
    }
