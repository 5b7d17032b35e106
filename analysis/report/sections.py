"""The report's sections, one function each (``analysis.report.page`` declares which a folder's report shows):
what each tier delivered, what limited each cell, data layouts, capacity, MLPerf checkpoints, staging
and the POSIX traces. Each returns '' when it has nothing to say, so no section reads only "none"."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from analysis.report.htmltable import table as _table
from jobs import frameworks as jobs_frameworks
from jobs import jsonfiles

PERFETTO = (
    "python -m analysis.perfetto <cell>/posix/trace-*.pfw.gz  # writes <trace>.json.gz: open it at "
    "https://ui.perfetto.dev (or chrome://tracing)"
)


def embed(folder: Path, stem: str, caption: str) -> str:
    """The figure ``<stem>.png`` inlined with its caption ('' when it was not drawn)."""
    png = folder / f"{stem}.png"
    if not png.exists():
        return ""
    data = base64.b64encode(png.read_bytes()).decode()
    return (
        f'<figure id="{stem}"><img class="figure" alt="{stem}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def answers(folder: Path, collected=None) -> str:
    """What each tier delivered and what limited it, first: one compact row per tier and workload
    (analysis.report.answers), with what its cells stood on where it mattered (``collected``: the
    campaign's records, read here when not given)."""
    import pandas as pd

    from analysis.report import answers
    from analysis.tables import tidy

    path = folder / "summary.csv"
    summary = pd.read_csv(path) if path.exists() and path.stat().st_size > 1 else None
    if summary is None:
        return ""
    t = answers.table(summary, collected if collected is not None else tidy.collect(folder))
    if t is None:
        return ""
    return (
        '<h2>What each tier delivered</h2><div class="answers">'
        + _table(t)
        + "</div><p>Medians of the measured runs, from the fewest to the most readers (map threads, or a "
        "DataLoader's workers); the evidence for each bound is in <em>What limited each cell</em> below.</p>"
    )


# The cells table's columns, in order, each with the short header the table shows (summary.csv's names are
# long: with them, 20 columns overflowed the page and cut off the reason)
CELL_COLUMNS = {
    "cell_dir": "cell",
    "workload": "workload",
    "storage": "storage",
    "reader": "reader",
    "framework": "framework",
    "threads": "threads",
    "loader_workers": "workers",
    "batch_size": "batch",
    "prefetch": "prefetch",
    "checkpoint_target": "checkpoint",
    "tasks_per_cell": "tasks",
    "service": "service",
    "images_per_s_median": "images/s",
    "steady_runtime_s_median": "runtime (s)",
    "train_au_percentage_median": "AU (%)",
    "accelerator_busy_percentage_median": "accelerator busy (%)",
    "overlap_efficiency_median": "overlap",
    "median_stall_s_median": "stall (s)",
    "get_latency_p50_ms_median": "GET p50 (ms)",
    "get_latency_p99_ms_median": "GET p99 (ms)",
    "requests_per_image_median": "requests per image",
    "bound": "bound",
    "bound_runs": "runs' bounds",
    "bound_reason": "bound_reason",
}


def cells(folder: Path):
    """Each cell's medians beside what limited it, from summary.csv, under short headers (CELL_COLUMNS);
    a column that tells no cell apart (every value missing, one task, one framework) is left out."""
    import pandas as pd

    path = folder / "summary.csv"
    s = pd.read_csv(path) if path.exists() and path.stat().st_size > 1 else pd.DataFrame()
    if s.empty or "bound" not in s:
        return None
    cols = [
        c
        for c in CELL_COLUMNS
        if c in s
        and s[c].notna().any()
        and not (c in ("tasks_per_cell", "service") and (s[c].fillna(0) <= 1).all())
        and not (c == "framework" and s[c].nunique() < 2)  # named where a campaign read with both
    ]
    return _in_study_order(folder, s[cols].round(3)).rename(columns=CELL_COLUMNS)


def _in_study_order(folder: Path, cells):
    """Cells grid by grid in the order the study ran them (paper.txt), each grid's cells by number."""
    study = study_text(folder)
    if "cell_dir" not in cells or not study:
        return cells
    grids = [
        line.split(":", 1)[0] for line in study.splitlines() if ": " in line and "=" not in line.split(":")[0]
    ]
    parts = cells["cell_dir"].astype(str).str.rsplit("/", n=1, expand=True)
    if parts.shape[1] < 2:
        return cells
    rank = parts[0].map({g: i for i, g in enumerate(grids)}).fillna(len(grids))
    number = _numeric(parts[1])
    return (
        cells.assign(_r=rank.values, _n=number.values)
        .sort_values(["_r", "_n"], kind="stable")
        .drop(columns=["_r", "_n"])
    )


def study_text(folder: Path) -> str:
    """The paper study's paper.txt, '' without one (a FIFO planted there: jobs.jsonfiles.NotAFile)."""
    try:
        return jsonfiles.read_text(folder / "paper.txt")
    except FileNotFoundError:
        return ""


def _numeric(values):
    import pandas as pd

    return pd.to_numeric(values, errors="coerce")


def _reach(folder: Path):
    """How much of the device each data layout and shuffle reached (analysis.tables.layouts), or None."""
    import pandas as pd

    from analysis.tables import layouts

    path = folder / "summary.csv"
    s = pd.read_csv(path) if path.exists() and path.stat().st_size > 1 else pd.DataFrame()
    return layouts.reach(s)


def layouts(folder: Path) -> str:
    table = _reach(folder)
    if table is None:
        return ""
    return (
        "<h2>Data layout and shuffling</h2><p>Each micro-benchmark cell by <code>dataset.format</code> and "
        "<code>shuffle</code>, the paper's layout (files, global) first; <code>efficiency</code>: its MB/s ÷ "
        "fio reading the same stored files on the same tier with as many readers as map threads (a "
        "<code>workload=baseline</code> cell of the same format; empty without one).</p>" + _table(table)
    )


def frameworks(folder: Path) -> str:
    """TensorFlow beside PyTorch, one table per tier with its sentence first (analysis.tables.frameworks);
    '' unless the campaign read with both."""
    import pandas as pd

    from analysis.tables import frameworks as fw

    path = folder / fw.FRAMEWORKS
    if not path.exists() or path.stat().st_size <= 1:
        return ""
    t = pd.read_csv(path)
    said = fw.sentences(t)
    shown = [
        c for c in t.columns if c != "storage" and not (c in fw.SETTINGS and t[c].nunique(dropna=False) < 2)
    ]
    parts = []
    for tier in dict.fromkeys(t["storage"].astype(str)):
        lines = "".join(f"<p>{html.escape(x)}</p>" for x in said.get(tier, []))
        parts.append(
            f"<h3>{html.escape(tier)}</h3>{lines}"
            + _table(t.loc[t["storage"].astype(str) == tier, shown].round(3))
        )
    names = list(dict.fromkeys(t["framework"].astype(str)))
    labels = [jobs_frameworks.label(n) for n in names]
    title = " and ".join([", ".join(labels[:-1]), labels[-1]] if len(labels) > 2 else labels)
    return f"<h2>{html.escape(title)}</h2><p>{_frameworks_intro(names)}</p>" + "".join(parts)


def _frameworks_intro(names: list[str]) -> str:
    """What each framework of the table read with, then what the table's columns are."""
    said = "; ".join(html.escape(jobs_frameworks.reads_with(n)) for n in names)
    said = re.sub(r"`([^`]+)`", r"<code>\1</code>", said)  # the registry's `code` spans
    return f"The micro-benchmark read with {said}. {FRAMEWORKS_INTRO}"


def mlperf(folder: Path) -> str:
    """Sharded checkpoints beside MLPerf Storage's published ones (analysis.tables.mlperf), where a shape
    matches."""
    import pandas as pd

    from analysis.tables import mlperf

    path = folder / mlperf.MLPERF
    if not path.exists():
        return ""
    return f"<h2>Checkpoints beside MLPerf Storage's</h2><p>{MLPERF_INTRO}</p>" + _table(
        pd.read_csv(path).round(3)
    )


def mlperf_rules(folder: Path, collected=None) -> str:
    """A ``+experiment=mlperf`` campaign's verdicts first, then each cell's rules (analysis.mlperf): the
    figure, the limit and the state of every rule (``collected``: the records as the report read them)."""
    import pandas as pd

    from analysis.mlperf import command

    if not command.of_experiment(collected):
        return ""
    found = command.verdicts(folder, command.EXPERIMENT)
    if not found:
        return ""
    lines = [f"cell {v.cell_dir}: {v.line()}" for v in found] + command.most_accelerators(found)
    out = ["<h2>MLPerf Storage: would a compliant run show this?</h2>", f"<p>{MLPERF_RULES_INTRO}</p>"]
    out += [f'<p class="answer"><code>{html.escape(line)}</code></p>' for line in lines]
    for v in found:
        rows = [{"rule": c.rule, "status": c.state, "figure": c.figure, "limit": c.limit} for c in v.checks]
        out.append(f"<h3>Cell {html.escape(v.cell_dir)}: {v.state}</h3>" + _table(pd.DataFrame(rows)))
    return "\n".join(out)


MLPERF_RULES_INTRO = (
    "Each cell of emulated accelerators against MLPerf Storage's training rules "
    "(<code>analysis/mlperf/training.yaml</code>, docs/mlperf.md): CLOSED where the rule holds as the "
    "CLOSED division asks, OPEN where the OPEN division allows the difference, INVALID where no division "
    "accepts it. <code>python -m analysis mlperf</code> prints the same."
)


def posix_calls(folder: Path) -> str:
    """What the POSIX traces say (trace.posix=true): per cell, the figures, and how to open a trace."""
    from analysis.figures.posix import SIZES, TIMELINE
    from analysis.tables import posix
    from jobs.observe.posix import COVERAGE_MIN

    table = posix.per_cell(folder)
    if table is None:
        return ""
    bad = int(table["incomplete"].sum())
    warn = (
        f'<p class="warning"><strong>{bad} traced run(s) are incomplete</strong>: their traces hold less '
        f"than {COVERAGE_MIN:.0%} of the bytes the runs consumed (column <code>coverage</code>); their "
        "figures are not the whole story (<code>posix_complete=false</code> in "
        "<code>posix_summary.csv</code>).</p>"
        if bad
        else f"<p>Every traced run's reads hold at least {COVERAGE_MIN:.0%} of the bytes it "
        "consumed (<code>coverage</code>).</p>"
    )
    return (
        "<h2>POSIX calls (trace.posix)</h2><p>Every open, read, write and close the runs made on their "
        "tiers, recorded by dftracer's preload library; medians over each cell's runs. "
        "<code>small_reads_pct</code>: reads that returned under 100 B (the read that finds the end of each "
        "file returns 0 B); <code>reads_in_flight</code>: time inside read calls per second of the run; "
        "<code>threads_reading</code>: threads that made reads; <code>traced_run</code>: "
        "<code>measured</code> when the measured runs were traced (their rates carry the tracer's cost), "
        "<code>extra</code> for the one run a <code>trace.runs=extra</code> cell traced after its untraced "
        "measured runs. Per run: <code>posix_summary.csv</code>; per file and run: "
        "<code>posix_files.csv</code>.</p>"
        + warn
        + _table(table)
        + embed(folder, SIZES, "Request sizes: read calls by bytes returned, per pipeline and format")
        + embed(folder, TIMELINE, "One run's reads per thread (top) and the device's MB/s beneath")
        + f"<p>To open a raw trace in Perfetto: <code>{html.escape(PERFETTO)}</code>.</p>"
    )


def staging(folder: Path, built) -> str:
    import pandas as pd

    from analysis.tables import staging, tidy

    path = folder / "summary.csv"
    s = pd.read_csv(path) if path.exists() and path.stat().st_size > 1 else pd.DataFrame()
    c = built.collected if built is not None and built.collected is not None else tidy.collect(folder)
    table = staging.comparison(s, c.staged, c.configs)
    if table is None:
        return ""
    return (
        "<h2>Staging</h2><p>Cells that copied their data onto a faster tier before the runs "
        "(<code>storage@stage=&lt;preset&gt;</code>) beside the same cell read where the data lies: images/s "
        "(medians), <code>staged_speedup</code> = from_stage ÷ from_storage, and the copy's time and rate, "
        "which the runs do not include.</p>" + _table(table)
    )


MLPERF_INTRO = (
    "Each model shape measured here that an MLPerf Storage submission also checkpointed: the submission's "
    "figures (converted from DLIO's binary GiB to GB) and this campaign's medians, by MLPerf's definitions "
    "(save and load: the slowest rank's duration; GB/s: every rank's bytes over it). "
    "<code>same_workload</code> is yes only where every rank's shard was written, as many ranks as the "
    "submission's, and loaded cold; the storage always differs, so a row says how this tier does the "
    "submission's job, not that it reproduced a result. Data: "
    "<code>analysis/tables/mlperf_checkpoints.yaml</code>, values: <code>mlperf_checkpoints.csv</code>."
)
FRAMEWORKS_INTRO = (
    "Per cell, medians of its runs: <code>images_per_s</code>; <code>images_per_s_per_core</code>, each "
    "run's images/s ÷ its CPU cores busy; <code>device_read_ratio</code>, bytes read from the device ÷ "
    "bytes of the images delivered (about 1 from a cold cache); <code>first_batch_s</code>, the first "
    "batch's wait; <code>startup_s</code>, PyTorch's <code>iter(DataLoader)</code> until its last "
    "worker was ready to load (started, initialised; within the run's time); "
    "<code>bound</code>, what limited the cell, and its evidence. "
    "Each tier's sentence compares the fastest cell of each framework. Values: <code>frameworks.csv</code>."
)
