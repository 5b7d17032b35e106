"""``python -m analysis mlperf <campaign>``: every cell of emulated accelerators checked against MLPerf
Storage's training rules, each rule's figure beside its limit, then one verdict line per cell and, per
workload and accelerator, the most accelerators that held their AU."""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

from analysis.mlperf import checkpointing, rules
from jobs import records
from jobs.cell import recorded


def verdicts(folder: Path, made_by: str | None = None) -> list:
    """The verdict of every completed cell under ``folder`` that emulated accelerators (``rules.Verdict``)
    or saved and loaded sharded checkpoints (``checkpointing.Verdict``); ``made_by``: only the cells that
    override made."""
    out = []
    for path in sorted(folder.rglob(records.FILENAME)):
        try:
            rec = records.read(path)
        except records.RecordError:
            continue  # the campaign's own summary names an unreadable record
        if rec.status != records.COMPLETED or (made_by is not None and made_by not in rec.overrides):
            continue
        where = str(path.parent.relative_to(folder)) or "."
        measured = records.runs_of(rec)
        try:
            emulated = recorded(rec).accelerator is not None
            if emulated and all("train_au_percentage" in run for run in measured):
                out.append(rules.check(where, rec, path))
            elif checkpointing.is_checkpointing(rec):
                out.append(checkpointing.check(where, rec, path))
        except records.RecordError as e:  # a setting this version cannot read
            print(f"analysis mlperf: cell {where}: {e}; left out", file=sys.stderr)
        except (KeyError, ValueError, TypeError) as e:  # a record edited by hand, or of another version
            print(
                f"analysis mlperf: cell {where}: its record lacks or garbles {e}; left out", file=sys.stderr
            )
    return out


def training(found: list) -> list[rules.Verdict]:
    return [v for v in found if isinstance(v, rules.Verdict)]


def table(v) -> list[str]:
    """The cell's checks, one line each: state, rule, figure and limit."""
    kind = "training" if isinstance(v, rules.Verdict) else "checkpointing"
    lines = [f"cell {v.cell_dir}: MLPerf Storage {rules.rules()['edition']} {kind} rules"]
    for c in v.checks:
        lines.append(f"  {c.state:<8} {c.rule:<24} {c.figure}  [limit: {c.limit}]")
    return lines


def most_accelerators(found: list[rules.Verdict]) -> list[str]:
    """Per workload and accelerator: the most accelerators whose runs held the AU threshold (MLPerf's
    single-host result), and whether that cell is CLOSED-eligible."""
    lines = []
    for key in dict.fromkeys((v.workload, v.accelerator) for v in found):
        cells = [v for v in found if (v.workload, v.accelerator) == key]
        held = [v for v in cells if v.au is not None and v.au >= v.threshold]
        name = f"{key[0]} on {key[1].upper()}"
        if not held:
            lines.append(f"{name}: no cell held AU ≥ {cells[0].threshold:.0f}%")
            continue
        best = max(held, key=lambda v: v.accelerators)
        lines.append(
            f"{name}: at most {best.accelerators} accelerator{'s' if best.accelerators != 1 else ''} "
            f"held AU ≥ {best.threshold:.0f}% (cell {best.cell_dir}, {best.state})"
        )
    return lines


# the study whose campaigns end with the verdict (conf/experiment/mlperf.yaml)
EXPERIMENT = "+experiment=mlperf"


def of_experiment(collected) -> bool:
    """Whether a cell of the campaign whose records the analysis read (``analysis.tables.tidy.Collected``)
    was made by ``+experiment=mlperf``: without one, its records need not be read again."""
    return collected is None or any(EXPERIMENT in c["overrides"].split() for c in collected.cells)


def closing_lines(folder: Path, collected=None) -> list[str]:
    """What a campaign of ``+experiment=mlperf`` prints last: each cell's verdict and the most accelerators
    that held AU (nothing for any other campaign; ``collected``: its records as the analysis read them)."""
    if not of_experiment(collected):
        return []
    found = verdicts(folder, EXPERIMENT)
    if not found:
        return []
    lines = [f"[mlperf] {_cell(v)}{v.line()}" for v in found]
    lines += [f"[mlperf] {line}" for line in most_accelerators(training(found))]
    return [*lines, f"[mlperf] every rule beside its figure: python -m analysis mlperf {folder}"]


def _cell(v) -> str:
    """Which cell a verdict is of, before its line: none for a single run's folder (the cell is it)."""
    return "" if str(v.cell_dir) in (".", "") else f"cell {v.cell_dir}: "


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis mlperf", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="a campaign folder of workload=emulated cells")
    p.add_argument(
        "--results-dir",
        type=Path,
        help="also lay each cell's measured runs out as MLPerf Storage's results tree in this folder "
        "(<division>/<org>/results/<system>/training/<workload>/run/<timestamp>/, and "
        "checkpointing/<model>/<timestamp>/; docs/mlperf.md)",
    )
    p.add_argument("--org", default="iocampaign", help="the tree's organisation (MLPerf's submitter)")
    p.add_argument("--system", default=None, help="the tree's system name (default: the host's name)")
    args = p.parse_args(argv)
    if args.results_dir is not None:
        from analysis.mlperf import results_dir

        args.system = args.system or socket.gethostname()
        try:
            results_dir.check(args.results_dir, args.org, args.system)
        except results_dir.ResultsDirError as e:
            print(f"analysis mlperf: {e}", file=sys.stderr)
            return 2
    if not args.folder.is_dir():
        print(f"analysis mlperf: {args.folder} is not a folder", file=sys.stderr)
        return 2
    found = verdicts(args.folder)
    if not found:
        print(
            f"analysis mlperf: {args.folder} holds no completed cell of emulated accelerators or sharded "
            "checkpoints (python -m campaign workload=emulated accelerator=<profile>, conf/accelerator/; "
            "workload=sharded_checkpoint checkpoint_model=<preset>)",
            file=sys.stderr,
        )
        return 2
    for v in found:
        print("\n".join(table(v)))
    print()
    for v in found:
        print(f"[mlperf] {_cell(v)}{v.line()}")
    for line in most_accelerators(training(found)):
        print(f"[mlperf] {line}")
    if args.results_dir is not None:
        return _lay_out(found, args)
    return 0


def _lay_out(found: list, args) -> int:
    from analysis.mlperf import results_dir

    try:
        written = results_dir.write(found, args.folder, args.results_dir, args.org, args.system)
    except results_dir.ResultsDirError as e:
        print(f"analysis mlperf: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(
            f"analysis mlperf: --results-dir={args.results_dir}: {e.strerror}: {e.filename}", file=sys.stderr
        )
        return 2
    divisions = sorted({p.relative_to(args.results_dir).parts[0] for p in written})
    print(
        f"[mlperf] results tree: {len(written)} run folder{'s' if len(written) != 1 else ''} in "
        f"{args.results_dir} ({', '.join(divisions) or 'nothing new'})"
        + ("; the invalid/ runs break a rule: they are no submission" if "invalid" in divisions else "")
    )
    for division in sorted({results_dir.DIVISION[v.state] for v in found}):
        path = args.results_dir / division / args.org / results_dir.SYSTEMS / f"{args.system}.json"
        print(f"[mlperf] system description: {path} ({_to_fill(path)})")
    return 0


def _to_fill(path: Path) -> str:
    """What the system description at ``path`` still lacks: its null fields, for the submitter."""
    import json

    def nulls(x) -> int:
        if isinstance(x, dict):
            return sum(nulls(v) for v in x.values())
        if isinstance(x, list):
            return sum(nulls(v) for v in x)
        return int(x is None)

    from analysis.mlperf import results_dir

    try:
        described = json.loads(results_dir.read_own(path) or "")  # never through a link
        left, networks = nulls(described), described.get("networks")
    except (ValueError, AttributeError):
        return "not readable as JSON"
    lacking = [f"{left} field{'s' if left != 1 else ''} null"] if left else []
    lacking += [] if networks else ["no network described"]
    if not lacking:
        return "every field filled in"
    return f"{' and '.join(lacking)}: yours to fill in (docs/mlperf.md)"
