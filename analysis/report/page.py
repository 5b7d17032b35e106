"""One self-contained HTML page per campaign folder that answers the question of the command that made
it: a capacity search opens with its answer and the evidence per accelerator count; a paper study with
its claims' verdicts in words; a plain campaign with what each tier delivered. ``SECTIONS`` declares
each kind's sections in order; a section with nothing to say is left out."""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from analysis import declarations
from analysis.report import sections
from analysis.report.htmltable import claims_table as _claims
from analysis.report.htmltable import table as _table
from analysis.report.sections import study_text

REPORT = "report.html"

# Marks every figure, and every table wider than the page, once the page has loaded, so a headless browser
# can check them.
_CHECK = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.querySelectorAll('img.figure')];
  const bad = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt);
  const broken = bad.length ? ' broken: ' + bad.join(', ') : '';
  document.getElementById('figure-check').textContent =
    'figures loaded: ' + (imgs.length - bad.length) + '/' + imgs.length + broken;
  const wide = [...document.querySelectorAll('div.table')].filter(d => d.scrollWidth > d.clientWidth + 1);
  document.getElementById('table-check').textContent = 'tables wider than the page: ' + wide.length +
    wide.map(d => ' [' + [...d.querySelectorAll('th')].map(h => h.textContent).join('|') + ']').join('');
});
</script>"""


def _provenance(folder: Path):
    """The first completed cell's provenance (``jobs.records.Provenance``; None where no cell completed),
    with the accelerator of the first cell that ran a framework and the versions of every cell's software
    (``versions``: a PyTorch cell's torch, beside a TensorFlow cell's tensorflow; a package two cells ran in
    different versions lists both)."""
    import dataclasses

    from jobs import records

    found, accelerator = None, None
    versions: dict[str, list] = {}
    for path in sorted(folder.rglob(records.FILENAME)):
        try:
            rec = records.read(path)
        except records.RecordError:
            continue
        if rec.status != records.COMPLETED:
            continue
        prov = records.provenance_of(rec)
        found = found or prov
        accelerator = accelerator or prov.accelerator  # only cells that ran a framework describe it
        for name, version in prov.versions.items():
            seen = versions.setdefault(name, [])
            if version is not None and version not in seen:  # None: not installed where that cell ran
                seen.append(version)
    if found is None:
        return None
    merged = {k: ", ".join(map(str, v)) if v else None for k, v in versions.items()}
    return dataclasses.replace(found, accelerator=accelerator, versions=merged)


def _figures(declared) -> list[tuple[str, str]]:
    """(file stem, caption) of Table I and of every figure the records' workloads declare
    (``analysis.declarations.Declared``), in the paper's order."""
    return [("table_i", "Table I: storage baselines beside the paper's IOR figures")] + [
        (f.key, f.title or f.key) for _, f in declared.ordered()
    ]


CAPACITY, PAPER, CAMPAIGN = "capacity", "paper", "campaign"
TITLES = {
    CAPACITY: "How many accelerators can the storage feed?",
    PAPER: "The paper's study, reproduced",
    CAMPAIGN: "Campaign",
}
# Each kind's sections in order, the question the command asked first.
SECTIONS = {
    CAPACITY: ("capacity", "capacity_figure", "counts", "failed", "capacity_inputs", "machine"),
    PAPER: (
        "answers",
        "counts",
        "verdicts",
        "study",
        "claims",
        "cells",
        "frameworks",
        "layouts",
        "mlperf",
        "staging",
        "posix",
        "table_i",
        "figures",
        "failed",
        "fallbacks",
        "machine",
    ),
    CAMPAIGN: (
        "mlperf_rules",  # a +experiment=mlperf campaign's question first: would a compliant run show this?
        "answers",
        "counts",
        "frameworks",
        "verdicts",
        "cells",
        "layouts",
        "mlperf",
        "staging",
        "posix",
        "claims",
        "table_i",
        "figures",
        "failed",
        "fallbacks",
        "machine",
    ),
}


def kind(folder: Path) -> str:
    """What the folder is: a capacity search (its capacity.csv or marker), a paper study (its
    paper.txt) or a plain campaign."""
    from analysis.tables.capacity import MARKS

    if any((folder / m).exists() for m in MARKS):
        return CAPACITY
    return PAPER if study_text(folder) else CAMPAIGN


@dataclass
class Page:
    """What the sections are drawn from."""

    folder: Path
    kind: str
    built: object
    claims: object
    results: object
    facts: dict
    collected: object = None  # the records read once (analysis.tables.tidy.Collected), for every section


def write_report(folder: str | Path, built=None) -> Path:
    """Write ``report.html`` into ``folder`` from its tables and figures (rebuilt unless ``built``,
    the result of ``analysis.build.build``, is given)."""
    from analysis import outputs
    from analysis.build import build
    from analysis.claims import judge
    from analysis.tables import tidy

    folder = Path(folder)
    built = built if built is not None else build(folder)
    c = built.collected if built.collected is not None else tidy.collect(folder)
    results, base = tidy.results_frame(c), tidy.baselines_frame(c)
    claims = judge.claims_frame(results, base, c.storages)
    with outputs.create(folder / "claims.csv") as f:
        claims.to_csv(f, index=False)
    page = Page(folder, kind(folder), built, claims, results, _facts(folder), c)
    return outputs.write_text(folder / REPORT, _html(page))


def _facts(folder: Path) -> dict:
    from jobs.observe import accelerator

    prov = _provenance(folder)
    if prov is None:  # every cell failed before it recorded its machine
        return {"machine": "not recorded: no cell completed (each failure is in the table of cells)"}
    mount = prov.storage_mount
    return {
        "host": prov.host,
        "kernel": prov.kernel,
        "cpu": f"{prov.cpu_model} × {prov.cpu_count}",
        "memory": f"{prov.mem_total_bytes / 2**30:.1f} GiB",
        "storage root": f"{mount.get('mount_point')} ({mount.get('fs_type')} on {mount.get('source')}, "
        f"{mount.get('options')})",
        "accelerator": accelerator.summary(prov.accelerator) or "not recorded (no cell ran a framework)",
        "git commit": f"{prov.git_commit}{' (dirty)' if prov.git_dirty else ''}",
        **prov.versions,
    }


def _any_measured(p: Page) -> bool:
    from analysis.claims.judge import NOT_MEASURED

    return not p.claims.empty and bool((p.claims["status"] != NOT_MEASURED).any())


def _section(title: str, intro: str, df) -> str:
    """A titled table, or '' when it has no rows."""
    return "" if df is None or df.empty else f"<h2>{title}</h2>{intro}{_table(df)}"


def _verdicts(p: Page) -> str:
    from analysis.claims import verdicts

    if not (p.kind == PAPER or _any_measured(p)):
        return ""
    from analysis import standing

    return verdicts.section(p.claims, standing.sentence(p.collected if p.collected is not None else p.folder))


def _counts(p: Page) -> str:
    b = p.built
    return (
        f"<p>{b.completed} cells completed ({b.runs} measured runs), {len(b.failed)} failed, "  # type: ignore[attr-defined]
        f"{len(b.missing)} missing.</p>"
    )  # type: ignore[attr-defined]


def _claims_section(p: Page) -> str:
    if p.kind != PAPER and not _any_measured(p):
        return ""
    return f"<h2>Comparison with the paper</h2>{CLAIMS_INTRO}{_claims(p.claims)}"


def _study(p: Page) -> str:
    txt = study_text(p.folder)
    return f"<h2>Campaign</h2><pre>{html.escape(txt)}</pre>" if txt else ""


def _cells(p: Page) -> str:
    return _section("What limited each cell", CELLS_INTRO, sections.cells(p.folder))


def _table_i(p: Page) -> str:
    import pandas as pd

    path = p.folder / "table_i.csv"
    return _section("Table I: storage baselines", "", pd.read_csv(path) if path.exists() else None)


def _figures_section(p: Page) -> str:
    declared = p.collected.declared if p.collected is not None else declarations.builtin()
    embedded = (sections.embed(p.folder, stem, caption) for stem, caption in _figures(declared))
    figs = "".join(f for f in embedded if f)
    return f"<h2>Figures</h2>{figs}" if figs else ""


def _failed(p: Page) -> str:
    import pandas as pd

    return _section("Failed or missing cells", "", pd.DataFrame(p.built.failed + p.built.missing))  # type: ignore[attr-defined]


def _fallbacks(p: Page) -> str:
    from analysis.tables import tidy

    r = p.results
    fell = r[tidy.text(r["checkpoint_fallback"]) != ""]
    return (
        ""
        if fell.empty
        else _section(
            "Checkpoints that fell back to the slow tier",
            FALLBACK_INTRO,
            fell.groupby(["cell_dir", "checkpoint_target", "checkpoint_fallback"])
            .size()
            .reset_index(name="runs"),
        )
    )


def _machine(p: Page) -> str:
    import pandas as pd

    return (
        "<h2>Machine and software</h2>"
        + _table(pd.DataFrame([{"fact": k, "value": v} for k, v in p.facts.items()]))
        + "<p>Raw data: <code>results.csv</code> (one row per cell × run), <code>summary.csv</code>, "
        "<code>cells.csv</code>, and every cell's <code>record.json</code>.</p>"
    )


def _capacity(p: Page) -> str:
    from analysis.report import capacity

    return capacity.section(p.folder)


def _capacity_figure(p: Page) -> str:
    return sections.embed(
        p.folder,
        "capacity",
        "Accelerators the storage can feed: AU against accelerators, with the "
        "threshold, the prediction and the answer",
    )


def _capacity_inputs(p: Page) -> str:
    from analysis.report import capacity

    t = capacity.table(p.folder)
    return (
        ""
        if t is None
        else (
            f"<details><summary>The prediction's inputs and the search (capacity.csv)</summary>"
            f"<p>{capacity.INTRO}</p>{_table(t)}</details>"
        )
    )


RENDER = {
    "verdicts": _verdicts,
    "counts": _counts,
    "answers": lambda p: sections.answers(p.folder, p.collected),
    "study": _study,
    "claims": _claims_section,
    "cells": _cells,
    "frameworks": lambda p: sections.frameworks(p.folder),
    "layouts": lambda p: sections.layouts(p.folder),
    "mlperf": lambda p: sections.mlperf(p.folder),
    "mlperf_rules": lambda p: sections.mlperf_rules(p.folder, p.collected),
    "staging": lambda p: sections.staging(p.folder, p.built),
    "posix": lambda p: sections.posix_calls(p.folder),
    "table_i": _table_i,
    "figures": _figures_section,
    "failed": _failed,
    "fallbacks": _fallbacks,
    "machine": _machine,
    "capacity": _capacity,
    "capacity_figure": _capacity_figure,
    "capacity_inputs": _capacity_inputs,
}

CLAIMS_INTRO = """<p>Each claim of Chien et al. beside the same quantity measured here (ratios where the paper
gives ratios), with the tolerance that decides the verdict. A claim about storage is judged only on runs in
the paper's regime (cold cache, limited by the storage, the paper's device); measured outside it, it
is <em>not comparable</em> and the line says why. Data: <code>analysis/claims/paper_claims.yaml</code>,
values: <code>claims.csv</code>.</p>"""
CELLS_INTRO = """<p>bound: storage, cpu, cache, mixed or latency, by the rules in
<code>analysis/tables/bounds.py</code> (stated in docs/measurements.md, "What limited a number"), applied to
the median of the cell's runs; the evidence beside it.</p>"""
FALLBACK_INTRO = (
    "<p>These runs asked for the fast tier or the burst buffer and wrote straight to the slow tier "
    "instead; their rows keep the configured target.</p>"
)
STYLE = """body { font-family: sans-serif; max-width: 1300px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.8em; table-layout: auto; max-width: 100%; }
td, th { border: 1px solid #bbb; padding: 0.2em 0.4em; text-align: left; overflow-wrap: break-word; }
th { overflow-wrap: normal; hyphens: none; }
td.reproduced { background: #d9f2d9; } td.not-reproduced { background: #f8d7d7; }
td.CLOSED { background: #d9f2d9; } td.OPEN { background: #fdf0c8; } td.INVALID { background: #f8d7d7; }
td.not-measured { background: #eee; } td.not-comparable { background: #fdf0c8; } td.prose { min-width: 16em; }
p.answer code { font-size: 1.1em; background: #eef5ff; padding: 0.3em; display: block;
  white-space: pre-wrap; }
figure { margin: 1.5em 0; } img.figure { max-width: 100%; border: 1px solid #ddd; }
div.table { overflow-x: auto; max-width: 100%; }
pre { background: #f6f6f6; padding: 0.5em; white-space: pre-wrap; }"""


def _html(p: Page) -> str:
    """The report's HTML, one self-contained page: the kind's sections in their declared order."""
    body = "\n".join(x for name in SECTIONS[p.kind] if (x := RENDER[name](p)))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>iocampaign report: {html.escape(p.folder.name)}</title>
<style>
{STYLE}
</style></head><body>
<h1>{html.escape(TITLES[p.kind])}</h1>
<p><code>{html.escape(str(p.folder))}</code></p>
<p id="figure-check" hidden>figures not checked (scripts off)</p>
<p id="table-check" hidden>tables not checked (scripts off)</p>
{body}
{_CHECK}
</body></html>
"""
