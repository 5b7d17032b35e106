"""``python -m analysis mlperf <campaign> --results-dir DIR``: each judged cell laid out as MLPerf Storage's
results tree, so a storage team can hand its runs on in the shape MLPerf's tools read:

  DIR/<division>/<org>/results/<system>/training/<workload>/run/<timestamp>/
      summary.json          DLIO's summary: accelerators, hosts, the run's AU, samples/s and MB/s, files
      per_epoch_stats.json  DLIO's per-epoch figures (a run of this tool is one epoch)
      dlio_config/          the cell's Hydra folder: config.yaml (resolved), hydra.yaml, overrides.yaml
      <the cell's log>      what the cell printed
      provenance.json       this tool, its commit, the rules' edition, the client library, and the verdict
                            with every rule's figure beside its limit

One folder per measured run (MLPerf's five runs; the warm-up is left out), named by the run's start
(``20261128_062312``; ``..._run3`` after each where two runs of a cell started within one second). The
division is the verdict's: ``closed`` for a CLOSED-eligible cell, ``open`` for an OPEN one; a cell that
breaks a rule goes under ``invalid``, which is no division of MLPerf's, so that it is never handed on by
mistake. MLPerf's ``submission.yaml``, its system description, is the submitter's to write. Nothing
outside ``DIR`` is written, and a run folder already there is left as it is.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
from datetime import datetime
from pathlib import Path

from analysis.mlperf import rules
from jobs import records

DIVISION = {rules.CLOSED: "closed", rules.OPEN: "open", rules.INVALID: "invalid"}
TIMESTAMP = "%Y%m%d_%H%M%S"  # MLPerf Storage's run folders (20260714_120349)
LOG = "__main__.log"  # the cell's log, as Hydra names it


class ResultsDirError(RuntimeError):
    """The tree cannot be written where asked; the message names the option."""


def _name(text: str, option: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", text):
        raise ResultsDirError(f"{option}={text!r}: a plain name is needed (letters, digits, _ . -)")


def check(out: Path, org: str, system: str) -> None:
    """Raise ResultsDirError, naming the option, where the tree cannot go."""
    _name(org, "--org")
    _name(system, "--system")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ResultsDirError(
            f"--results-dir={out}: not a folder (a link or a file is never written through)"
        )


def write(verdicts: list[rules.Verdict], folder: Path, out: Path, org: str, system: str) -> list[Path]:
    """Lay every verdict's measured runs out under ``out``; returns the run folders written."""
    check(out, org, system)
    written = []
    for v in verdicts:
        path = folder / v.cell_dir / records.FILENAME
        rec = records.read(path)
        base = out / DIVISION[v.state] / org / "results" / system / "training" / v.workload / "run"
        for name, run in _named(rec.runs):
            at = base / name
            _no_link(out, at)
            if at.exists():
                continue  # laid out before: what is there stays
            at.mkdir(parents=True)
            _run_folder(at, v, rec, run, path.parent)
            written.append(at)
    return written


def _no_link(out: Path, at: Path) -> None:
    """Refuse a link anywhere between ``out`` and ``at`` (a folder of the tree another user replaced)."""
    for p in [at, *at.parents]:
        if p.is_symlink():
            raise ResultsDirError(f"--results-dir={out}: {p} is a link; nothing is written through one")
        if p == out:
            return


def _named(runs: list[dict]) -> list[tuple[str, dict]]:
    """(folder name, run) of the measured runs: each run's start (MLPerf's ``20261128_062312``), with
    ``_run<N>`` after it where two runs of the cell started within one second."""
    measured = [r for r in runs if not r.get("warmup")]
    stamps = [datetime.fromisoformat(r["started_at"]).strftime(TIMESTAMP) for r in measured]
    clash = len(set(stamps)) < len(stamps)
    return [(f"{s}_run{r['run']}" if clash else s, r) for s, r in zip(stamps, measured)]


def _run_folder(at: Path, v: rules.Verdict, rec: records.CellRecord, run: dict, cell: Path) -> None:
    (at / "summary.json").write_text(json.dumps(summary(v, rec, run), indent=2) + "\n")
    (at / "per_epoch_stats.json").write_text(json.dumps(per_epoch(run), indent=2) + "\n")
    hydra = cell / ".hydra"
    if hydra.is_dir() and not hydra.is_symlink():
        (at / "dlio_config").mkdir()
        for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
            if (hydra / name).is_file() and not (hydra / name).is_symlink():
                shutil.copyfile(hydra / name, at / "dlio_config" / name)
    if (cell / LOG).is_file() and not (cell / LOG).is_symlink():
        shutil.copyfile(cell / LOG, at / LOG)
    (at / "provenance.json").write_text(json.dumps(provenance(v, rec), indent=2) + "\n")


def summary(v: rules.Verdict, rec: records.CellRecord, run: dict) -> dict:
    """DLIO's ``summary.json`` of one run (one epoch): its keys, this run's figures."""
    plat = rec.config.get("platform") or {}
    au, samples, mb = run["train_au_percentage"], run["images_per_s"], run["mb_per_s"]
    start = datetime.fromisoformat(run["started_at"])
    return {
        "num_accelerators": v.accelerators,
        "num_hosts": int(plat.get("nodes") or 1),
        "hostname": (rec.provenance or {}).get("host"),
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
        "num_files_train": int((rec.dataset or {}).get("files") or 0),
        "num_files_eval": 0,
        "num_samples_per_file": 1,
        "epochs": 1,
        "start": start.isoformat(),
        "end": _end(run).isoformat(),
    }


def per_epoch(run: dict) -> dict:
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


def _end(run: dict) -> datetime:
    from datetime import timedelta

    return datetime.fromisoformat(run["started_at"]) + timedelta(seconds=float(run["run_wall_s"]))


def provenance(v: rules.Verdict, rec: records.CellRecord) -> dict:
    """Who made the run and what its rules say: this tool, its commit, the rules' edition, the storage and
    client library, the cell's verdict and every check."""
    prov = rec.provenance or {}
    measured = [r["images_per_s"] for r in rec.runs if not r.get("warmup")]
    return {
        "benchmark_tool": "iocampaign",
        "tool_commit": prov.get("git_commit"),
        "rules_edition": rules.rules()["edition"],
        "storage": (rec.config.get("storage") or {}).get("name"),
        "client_library": (prov.get("object_store") or {}).get("client"),
        "cell_id": rec.cell_id,
        "verdict": v.state,
        "verdict_line": v.line(),
        "runs_median_samples_per_second": statistics.median(measured) if measured else None,
        "checks": [
            {"rule": c.rule, "figure": c.figure, "limit": c.limit, "state": c.state, "why": c.why}
            for c in v.checks
        ],
    }
