"""``python -m analysis trace <trace> [--out <folder>]``: the I/O profile of a job a user traced (a Darshan
log, a DFTracer trace, or a traced cell's folder), as tables and one figure, and a summary on stdout.

The trace is read whole before anything is written: a trace that cannot be read gets one line and leaves
nothing. The outputs go to ``--out`` (default ``<trace name>_io`` in the current folder; a campaign's cell
folder ``3`` is named with its campaign's: ``<campaign>-3_io``), each claimed in
the folder's manifest first (``analysis.outputs``): a rerun replaces the tool's own files there, and a file
of the user's under one of their names is refused before any is written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from analysis.traces import figure, tables
from jobs import traces

SUFFIXES = (".pfw.gz", ".pfw", ".darshan", ".gz")
SOURCES = {"darshan": "Darshan log", "dftracer": "DFTracer trace", "iocampaign": "traced cell's POSIX trace"}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis trace", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "trace", type=Path, help="a Darshan log, a DFTracer .pfw/.pfw.gz trace, or a traced cell's folder"
    )
    p.add_argument(
        "--out", type=Path, default=None, help="the folder for its tables and figure (default: <name>_io)"
    )
    p.add_argument("--no-figures", action="store_true", help="write the tables only")
    p.add_argument(
        "--compare",
        type=Path,
        default=None,
        metavar="CAMPAIGN",
        help="a campaign folder with trace.posix=true cells: the trace beside each (trace_compare.csv)",
    )
    p.add_argument(
        "--dftracer",
        type=Path,
        default=None,
        help="also write its calls as a DFTracer trace (a new .pfw.gz file), which DFTracer's analyzer and "
        "python -m analysis.perfetto read",
    )
    a = p.parse_args(argv)
    from analysis import outputs

    try:
        t = traces.read(a.trace)
    except traces.TraceError as e:
        print(f"analysis trace: {e}", file=sys.stderr)
        return 2
    if a.dftracer is not None and not t.has_calls:
        print(
            f"analysis trace: --dftracer: {a.trace} holds counters only, no calls to write", file=sys.stderr
        )
        return 2
    if a.dftracer is not None and os.path.lexists(a.dftracer):
        print(f"analysis trace: --dftracer {a.dftracer} exists; name a new file", file=sys.stderr)
        return 2
    if a.dftracer is not None and not a.dftracer.absolute().parent.is_dir():
        print(f"analysis trace: --dftracer {a.dftracer}: its folder does not exist", file=sys.stderr)
        return 2
    if a.out is not None and a.out.is_symlink():
        print(f"analysis trace: --out {a.out} is a symbolic link; name a folder", file=sys.stderr)
        return 2
    prof = tables.profile(t)
    out = a.out or Path(default_name(a.trace))
    extra = {}
    if a.compare is not None:
        from analysis.traces import beside

        if not a.compare.is_dir():
            print(f"analysis trace: --compare {a.compare} is not a folder", file=sys.stderr)
            return 2
        try:
            extra[beside.NAME] = beside.frame(prof, t.path.name, a.compare)
        except beside.NothingBeside as e:
            print(f"analysis trace: {e}", file=sys.stderr)
            return 2
    try:
        written = write(prof, t, out, figures=not a.no_figures, extra=extra)
    except (outputs.OutputExists, NotADirectoryError, FileExistsError) as e:
        print(f"analysis trace: {e}; nothing was written", file=sys.stderr)
        return 2
    if a.dftracer is not None:
        try:
            export(t, a.dftracer)
        except outputs.OutputExists as e:
            print(f"analysis trace: {e}", file=sys.stderr)
            return 2
    print("\n".join(describe(t, prof)))
    for df in extra.values():
        shown = df[["row", "reads", "reads_per_file", "mean_read_bytes", "small_read_share"]]
        print(shown.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    print(f"analysis trace: {len(written)} files in {out}")
    if a.dftracer is not None:
        print(f"analysis trace: its calls as a DFTracer trace: {a.dftracer}")
    return 0


def export(t: traces.Trace, target: Path) -> Path:
    """The trace's calls as a new DFTracer trace at ``target`` (gzipped when its name ends in .gz)."""
    import gzip
    import io

    from analysis import outputs
    from jobs.traces import dftracer

    with outputs.new_file(target, binary=True) as raw:
        gz = gzip.GzipFile(fileobj=raw, mode="wb") if target.name.endswith(".gz") else None
        f = io.TextIOWrapper(gz or raw, encoding="utf-8")
        dftracer.write(t, f)
        f.flush()
        f.detach()  # the file itself is closed by new_file, which then gives it its name
        if gz is not None:
            gz.close()  # its trailer; the file it wrote into stays open
    return target


def default_name(trace: Path) -> str:
    """``<trace name>_io``: a traced cell's folder by its campaign's name too (``16-25-00-3_io``), as a
    multirun numbers its cells 0, 1, ... in every campaign."""
    path = trace.resolve()
    name = f"{path.parent.name}-{path.name}" if path.is_dir() and path.name.isdigit() else path.name
    for s in SUFFIXES:
        if name.endswith(s):
            name = name[: -len(s)]
            break
    return f"{name}_io"


def write(prof: tables.Profile, t: traces.Trace, out: Path, figures: bool, extra: dict) -> list[Path]:
    """The profile's tables (and ``extra`` ones, by file name) and figure in ``out``; each name checked
    first, so a user's file there stops it before anything is written."""
    from analysis import outputs

    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} exists and is not a folder")
    frames = {**prof.tables(), **extra}
    names = [*frames, *((f"{figure.STEM}.png", f"{figure.STEM}.svg") if figures else ())]
    if out.is_dir():
        outputs.check([out / n for n in names])  # every name first: a user's file stops it before any write
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, df in frames.items():
        with outputs.create(out / name) as f:
            df.to_csv(f, index=False)
        written.append(out / name)
    if figures:
        written += figure.render(prof, out, title=f"{t.path.name}, a {SOURCES[t.source]}: {_headline(prof)}")
    return written


def _headline(prof: tables.Profile) -> str:
    s = prof.summary.iloc[0]
    return (
        f"{s['reads']:,} reads ({_bytes(s['bytes_read'])}), "
        f"{s['writes']:,} writes ({_bytes(s['bytes_written'])}) on {s['files']:,} files"
    )


def _bytes(n) -> str:
    n = float(n)
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def describe(t: traces.Trace, prof: tables.Profile) -> list[str]:
    """The summary a user reads first: what the job did, from what, and what the trace lacks."""
    import pandas as pd

    s = prof.summary.iloc[0]
    share = s["sequential_read_share"]
    io = s["io_share"]
    lines = [
        f"{t.path}: a {SOURCES[t.source]}, profiled from its {s['from']}",
        f"  {_headline(prof)}, by {_count(s['processes'])} process(es)"
        + ("" if pd.isna(s["threads"]) else f" and {_count(s['threads'])} thread(s)"),
        f"  mean read {_bytes(s['mean_read_bytes'])}"
        if s["mean_read_bytes"] == s["mean_read_bytes"] and s["reads"]
        else "  no reads",
        f"  sequential reads: {100 * share:.0f}%"
        if share is not None and share == share
        else "  sequential reads: not known",
        f"  time in I/O: {s['io_s']:.3f} s, {100 * io:.1f}% of the time of those that made calls, "
        f"over {s['span_s']:.3g} s"
        if io is not None and io == io
        else f"  time in I/O: {s['io_s']:.3f} s",
    ]
    return lines + [f"  note: {n}" for n in t.notes]


def _count(n) -> str:
    return "?" if n is None or n != n else f"{int(n):,}"
