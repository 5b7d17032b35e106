"""One self-contained HTML page per campaign: figures embedded, Table I, the comparison with the
paper, what failed or is missing, and the provenance of machine and software."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from analysis.htmltable import claims_table as _claims
from analysis.htmltable import table as _table
from jobs import jsonfiles

REPORT = "report.html"

# Marks every figure once the page has loaded, so a headless browser can check them.
_CHECK = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.querySelectorAll('img.figure')];
  const bad = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt);
  document.getElementById('figure-check').textContent =
    'figures loaded: ' + (imgs.length - bad.length) + '/' + imgs.length + (bad.length ? ' broken: ' + bad.join(', ') : '');
});
</script>"""


def _provenance(folder: Path) -> dict:
    from jobs import records

    found: dict = {}
    for path in sorted(folder.rglob(records.FILENAME)):
        try:
            rec = records.read(path)
        except records.RecordError:
            continue
        if rec.status == records.COMPLETED:
            found = found or dict(rec.provenance)
            if rec.provenance.get("accelerator"):  # only cells that ran TensorFlow describe it
                found["accelerator"] = rec.provenance["accelerator"]
                break
    return found


def _figures() -> list[tuple[str, str]]:
    """(file stem, caption) of Table I and of every figure the workloads declare, in the paper's order."""
    from jobs import workloads

    return [("table_i", "Table I: storage baselines beside the paper's IOR figures")] + [
        (f.key, f.title or f.key) for _, f in workloads.figures()]


def _embed(folder: Path, stem: str, caption: str) -> str:
    """The figure ``<stem>.png`` inlined with its caption ('' when it was not drawn)."""
    png = folder / f"{stem}.png"
    if not png.exists():
        return ""
    data = base64.b64encode(png.read_bytes()).decode()
    return (f'<figure id="{stem}"><img class="figure" alt="{stem}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def write_report(folder: str | Path, built=None) -> Path:
    """Write ``report.html`` into ``folder`` from its tables and figures (rebuilt unless ``built``,
    the result of ``analysis.build.build``, is given)."""
    import pandas as pd

    from analysis import compare, tables
    from analysis.build import build
    from jobs.observe import accelerator

    folder = Path(folder)
    built = built if built is not None else build(folder)
    c = built.collected if built.collected is not None else tables.collect(folder)
    results, base = tables.results_frame(c), tables.baselines_frame(c)
    claims = compare.claims_frame(results, base, c.storages)
    from analysis import outputs

    with outputs.create(folder / "claims.csv") as f:
        claims.to_csv(f, index=False)
    figs = [f for stem, caption in _figures() if (f := _embed(folder, stem, caption))]
    table_i = pd.read_csv(folder / "table_i.csv") if (folder / "table_i.csv").exists() else None
    problems = pd.DataFrame(built.failed + built.missing)
    fell_back = results[tables.text(results["checkpoint_fallback"]) != ""]
    fallbacks = (fell_back.groupby(["cell_dir", "checkpoint_target", "checkpoint_fallback"]).size()
                 .reset_index(name="runs") if not fell_back.empty else None)
    prov = _provenance(folder)
    mount = prov.get("storage_mount") or {}
    facts = {
        "host": prov.get("host"), "kernel": prov.get("kernel"), "cpu": f"{prov.get('cpu_model')} × {prov.get('cpu_count')}",
        "memory": f"{(prov.get('mem_total_bytes') or 0) / 2**30:.1f} GiB",
        "storage root": f"{mount.get('mount_point')} ({mount.get('fs_type')} on {mount.get('source')}, {mount.get('options')})",
        "accelerator": accelerator.summary(prov.get("accelerator")) or "not recorded (no TensorFlow cell)",
        "git commit": f"{prov.get('git_commit')}{' (dirty)' if prov.get('git_dirty') else ''}",
        **{k: v for k, v in (prov.get("versions") or {}).items()},
    }
    paper_txt = study_text(folder)
    counts = claims["status"].value_counts().to_dict() if not claims.empty else {}
    page = _page(folder, built, claims, table_i, figs, problems, fallbacks, facts, paper_txt, counts)
    return outputs.write_text(folder / REPORT, page)


def _answers(folder: Path) -> str:
    """What each tier delivered and what limited it, first (analysis.answers)."""
    import pandas as pd

    from analysis import answers

    path = folder / "summary.csv"
    lines = answers.per_tier(pd.read_csv(path) if path.exists() and path.stat().st_size > 1 else None)
    if not lines:
        return ""
    items = "".join(f"<li>{html.escape(x)}</li>" for x in lines)
    return ('<h2>What each tier delivered</h2><ul class="answers">' + items + "</ul><p>Medians of the measured runs; "
            "the bound labels and their evidence are in <em>What limited each cell</em> below.</p>")


def _cells(folder: Path):
    """Each cell's medians beside what limited it, from summary.csv."""
    import pandas as pd

    path = folder / "summary.csv"
    s = pd.read_csv(path) if path.exists() and path.stat().st_size > 1 else pd.DataFrame()
    if s.empty or "bound" not in s:
        return None
    cols = [c for c in ("cell_dir", "workload", "storage", "threads", "batch_size", "prefetch", "checkpoint_target",
                        "tasks_per_cell", "service", "images_per_s_median", "steady_runtime_s_median",
                        "train_au_percentage_median", "accelerator_busy_percentage_median",
                        "overlap_efficiency_median", "median_stall_s_median", "bound", "bound_runs", "bound_reason")
            if c in s and s[c].notna().any() and not (c in ("tasks_per_cell", "service") and (s[c].fillna(0) <= 1).all())]
    return _in_study_order(folder, s[cols].round(3))


def _in_study_order(folder: Path, cells):
    """Cells grid by grid in the order the study ran them (paper.txt), each grid's cells by number."""
    study = study_text(folder)
    if "cell_dir" not in cells or not study:
        return cells
    grids = [line.split(":", 1)[0] for line in study.splitlines() if ": " in line and "=" not in line.split(":")[0]]
    parts = cells["cell_dir"].astype(str).str.rsplit("/", n=1, expand=True)
    if parts.shape[1] < 2:
        return cells
    rank = parts[0].map({g: i for i, g in enumerate(grids)}).fillna(len(grids))
    number = _numeric(parts[1])
    return cells.assign(_r=rank.values, _n=number.values).sort_values(["_r", "_n"], kind="stable").drop(columns=["_r", "_n"])


def study_text(folder: Path) -> str:
    """The paper study's paper.txt, '' without one (a FIFO planted there: jobs.jsonfiles.NotAFile)."""
    try:
        return jsonfiles.read_text(folder / "paper.txt")
    except FileNotFoundError:
        return ""


def _numeric(values):
    import pandas as pd

    return pd.to_numeric(values, errors="coerce")


def _layouts(folder: Path):
    """How much of the device each data layout and shuffle reached (analysis.layouts), or None."""
    import pandas as pd

    from analysis import layouts

    path = folder / "summary.csv"
    s = pd.read_csv(path) if path.exists() and path.stat().st_size > 1 else pd.DataFrame()
    return layouts.reach(s)


def _layout_section(folder: Path) -> str:
    table = _layouts(folder)
    if table is None:
        return ""
    return ("<h2>Data layout and shuffling</h2><p>Each micro-benchmark cell by <code>dataset.format</code> and "
            "<code>shuffle</code>, the paper's layout (files, global) first; <code>efficiency</code>: its MB/s ÷ fio "
            "reading the same stored files on the same tier with as many readers as map threads (a "
            "<code>workload=baseline</code> cell of the same format; empty without one).</p>" + _table(table))


def _capacity(folder: Path) -> str:
    from analysis import capacity

    t = capacity.table(folder)
    return "" if t is None else f"<h2>Accelerators the storage can feed</h2><p>{capacity.INTRO}</p>" + _table(t)


def _mlperf_section(folder: Path) -> str:
    """Sharded checkpoints beside MLPerf Storage's published ones (analysis.mlperf), where a shape matches."""
    import pandas as pd

    from analysis import mlperf

    path = folder / mlperf.MLPERF
    if not path.exists():
        return ""
    return f"<h2>Checkpoints beside MLPerf Storage's</h2><p>{mlperf.INTRO}</p>" + _table(pd.read_csv(path).round(3))


def _posix_section(folder: Path) -> str:
    """What the POSIX traces say (trace.posix=true): per cell, the figures, and how to open a trace."""
    from analysis import posix

    table = posix.per_cell(folder)
    if table is None:
        return ""
    bad = int(table["incomplete"].sum())
    warn = (f'<p class="warning"><strong>{bad} traced run(s) are incomplete</strong>: their traces hold less than '
            f"{posix.posix.COVERAGE_MIN:.0%} of the bytes the runs consumed (column <code>coverage</code>); their "
            "figures are not the whole story (<code>posix_complete=false</code> in <code>posix_summary.csv</code>).</p>"
            if bad else f"<p>Every traced run's reads hold at least {posix.posix.COVERAGE_MIN:.0%} of the bytes it "
            "consumed (<code>coverage</code>).</p>")
    return ("<h2>POSIX calls (trace.posix)</h2><p>Every open, read, write and close the runs made on their tiers, "
            "recorded by dftracer's preload library; medians over each cell's runs. <code>small_reads_pct</code>: "
            "reads that returned under 100 B (the read that finds the end of each file returns 0 B); "
            "<code>reads_in_flight</code>: time inside read calls per second of the run; <code>threads_reading</code>: "
            "threads that made reads; <code>traced_run</code>: <code>measured</code> when the measured runs were "
            "traced (their rates carry the tracer's cost), <code>extra</code> for the one run a "
            "<code>trace.runs=extra</code> cell traced after its untraced measured runs. Per run: "
            "<code>posix_summary.csv</code>; per file and run: "
            "<code>posix_files.csv</code>.</p>" + warn + _table(table)
            + _embed(folder, posix.SIZES, "Request sizes: read calls by bytes returned, per pipeline and format")
            + _embed(folder, posix.TIMELINE, "One run's reads per thread (top) and the device's MB/s beneath")
            + f"<p>To open a raw trace in Perfetto: <code>{html.escape(posix.PERFETTO)}</code>.</p>")


def _staging_section(folder: Path, built) -> str:
    import pandas as pd

    from analysis import staging, tables

    path = folder / "summary.csv"
    s = pd.read_csv(path) if path.exists() and path.stat().st_size > 1 else pd.DataFrame()
    c = built.collected if built is not None and built.collected is not None else tables.collect(folder)
    table = staging.comparison(s, c.staged, c.configs)
    if table is None:
        return ""
    return ("<h2>Staging</h2><p>Cells that copied their data onto a faster tier before the runs "
            "(<code>storage@stage=&lt;preset&gt;</code>) beside the same cell read where the data lies: images/s "
            "(medians), <code>staged_speedup</code> = from_stage ÷ from_storage, and the copy's time and rate, which "
            "the runs do not include.</p>" + _table(table))


def _page(folder: Path, built, claims, table_i, figs: list[str], problems, fallbacks, facts: dict, paper_txt: str,
          counts: dict) -> str:
    """The report's HTML, one self-contained page."""
    import pandas as pd

    from analysis import compare

    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>iocampaign report: {html.escape(folder.name)}</title>
<style>
body {{ font-family: sans-serif; max-width: 1300px; margin: 2em auto; padding: 0 1em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.8em; table-layout: auto; max-width: 100%; }}
td, th {{ border: 1px solid #bbb; padding: 0.2em 0.4em; text-align: left; overflow-wrap: break-word; }}
td.reproduced {{ background: #d9f2d9; }} td.not-reproduced {{ background: #f8d7d7; }} td.not-measured {{ background: #eee; }}
td.not-comparable {{ background: #fdf0c8; }} td.prose {{ min-width: 16em; }}
figure {{ margin: 1.5em 0; }} img.figure {{ max-width: 100%; border: 1px solid #ddd; }}
pre {{ background: #f6f6f6; padding: 0.5em; white-space: pre-wrap; }}
</style></head><body>
<h1>iocampaign report: {html.escape(str(folder))}</h1>
<p>{built.completed} cells completed ({built.runs} measured runs), {len(built.failed)} failed,
{len(built.missing)} missing. {html.escape(compare.headline(claims))}</p>
<p id="figure-check" hidden>figures not checked (scripts off)</p>
{_answers(folder)}
{f'<h2>Campaign</h2><pre>{html.escape(paper_txt)}</pre>' if paper_txt else ''}
<h2>Comparison with the paper</h2>
<p>Each claim of Chien et al. beside the same quantity measured here (ratios where the paper gives
ratios), with the tolerance that decides the verdict. A claim about storage is judged only on runs in
the paper's regime (cold cache, limited by the storage, the paper's device); measured outside it, it
is <em>not comparable</em> and the line says why. Data: <code>analysis/paper_claims.yaml</code>,
values: <code>claims.csv</code>.</p>
{_claims(claims)}
<h2>What limited each cell</h2>
<p>bound: storage, cpu, cache, mixed or latency, by the rules in <code>analysis/bounds.py</code> (stated in
docs/measurements.md, "What limited a number"); the label most runs of the cell had, with the evidence.</p>
{_table(_cells(folder))}
{_layout_section(folder)}
{_capacity(folder)}
{_mlperf_section(folder)}
{_staging_section(folder, built)}
{_posix_section(folder)}
<h2>Table I: storage baselines</h2>
{_table(table_i)}
<h2>Figures</h2>
{''.join(figs) or '<p><em>no figures</em></p>'}
<h2>Failed or missing cells</h2>
{_table(problems)}
{'<h2>Checkpoints that fell back to the slow tier</h2><p>These runs asked for the fast tier or the burst buffer '
 'and wrote straight to the slow tier instead; their rows keep the configured target.</p>' + _table(fallbacks)
 if fallbacks is not None else ''}
<h2>Machine and software</h2>
{_table(pd.DataFrame([{"fact": k, "value": v} for k, v in facts.items()]))}
<p>Raw data: <code>results.csv</code> (one row per cell × run), <code>summary.csv</code>,
<code>cells.csv</code>, and every cell's <code>record.json</code>.</p>
{_CHECK}
</body></html>
"""
