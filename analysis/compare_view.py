"""What ``python -m analysis compare`` prints: per grid, a table that fits a terminal (the settings that tell
its cells apart, then A, B and B/A of its headline metrics), and lines that name each cell left unpaired.

The comparison itself (``analysis.compare``) keeps every setting and metric, for ``--csv``: 30 settings
and 19 metrics make lines 900 characters wide, mostly of settings that never change within a grid or
that follow from another (``storage.kind`` from ``storage.name``)."""

from __future__ import annotations

import math
from pathlib import PurePosixPath

# the comparison table's columns (analysis.compare builds it)
SHOWN = (
    "images_per_s_median",
    "mb_per_s_median",
    "steady_runtime_s_median",
    "runtime_s_median",
    "median_stall_s_median",
)
PAIRED = "paired"  # both, only in A, only in B, or alike in A (B): one of its side's cells that are one cell
GRID = "grid"  # the sweep folder that holds the cell, under the campaign folder ("" for a single sweep)
CELL = "cell"  # the cell's folder under its campaign folder: cell_a, cell_b

# settings people vary first; a table names these before any other that tells its cells apart
FIRST = (
    "workload.name",
    "framework",
    "storage.name",
    "storage.reader",
    "threads",
    "loader.num_workers",
    "batch_size",
    "prefetch",
    "cache",
    "checkpoint.target",
    "accelerator.name",
    "platform.tasks_per_node",
    "platform.nodes",
    "dataset.name",
    "dataset.num_images",
)
MOST_METRICS = 2  # per table: three columns each


def text(table, width: int, csv: bool = False) -> str:
    """The comparison as people read it: a heading, then one table per grid (one in all without grids),
    each at most ``width`` characters wide where its settings allow; ``csv``: the whole table is being
    written (no need to say where it is)."""
    a = table.attrs
    grids = sorted(set(table[GRID])) if GRID in table else [""]
    both = a["both"]
    head = f"{both} cell{'' if both == 1 else 's'} paired"
    if grids == [""]:
        keys = told_apart(table, a["keys"])
        told = f"; told apart by {', '.join(_label(k) for k in keys)}" if keys else ""
        out = [f"{head}{told}", _table(table, keys, width)]
    else:
        out = [f"{head} within each of {len(grids)} grids"]
        for grid in grids:
            rows = table[table[GRID] == grid]
            keys = told_apart(rows, a["keys"])
            n = int((rows[PAIRED] == "both").sum())
            told = f"; told apart by {', '.join(_label(k) for k in keys)}" if keys else ""
            out += ["", f"== {grid}: {n} cell{'' if n == 1 else 's'} paired{told}", _table(rows, keys, width)]
    if not csv:
        out.append("(every setting and metric of each cell: --csv FILE)")
    return "\n".join(out)


def told_apart(rows, keys: list[str]) -> list[str]:
    """The fewest settings of ``keys`` that tell ``rows`` apart as all of them do, those of FIRST first:
    a setting that is the same in every row, or that follows from one already named, is left out."""
    if rows.empty:
        return []
    values = rows[[k for k in keys if k in rows]].astype(str)
    every = len(values.drop_duplicates()) if len(values.columns) else 1
    ranked = sorted(
        values.columns, key=lambda k: (FIRST.index(k) if k in FIRST else len(FIRST), k.count("."), k)
    )
    chosen: list[str] = []
    seen = 1
    for k in ranked:
        if seen >= every:
            break
        n = len(values[[*chosen, k]].drop_duplicates())
        if n > seen:
            chosen.append(k)
            seen = n
    return chosen


def _label(key: str) -> str:
    """A setting as it is typed on the command line when it names a preset: ``storage`` for storage.name."""
    return key.removesuffix(".name")


def _metric_label(metric: str) -> str:
    """``images/s`` for images_per_s_median, ``runtime (s)`` for runtime_s_median: the declared unit."""
    from jobs.metrics import METRICS

    name = metric.removesuffix("_median")
    unit = METRICS[name].unit if name in METRICS else ""
    return unit if "/" in unit else f"{name.removesuffix('_s')} ({unit})" if unit else name


def _number(v, ratio: bool = False) -> str:
    """A value as it is read: 2,145 images/s, 92.7 MB/s, 0.447 s; a ratio to two decimals; "-" for none."""
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return "-"
    if ratio:
        return f"{v:.2f}"
    a = abs(v)
    return f"{v:,.0f}" if a >= 1000 else f"{v:.1f}" if a >= 100 else f"{v:.2f}" if a >= 1 else f"{v:#.3g}"


def _table(rows, keys: list[str], width: int) -> str:
    """One grid's rows: its settings, ``paired`` where a row is not, and A, B, B/A of its first headline
    metrics. Where that is wider than ``width``: one metric; then the cell's folder in place of the
    settings that do not fit, named below the table. Rows that no setting tells apart (alike cells) show
    their folders too."""
    metrics = [m for m in SHOWN if any(f"{m}_{s}" in rows and rows[f"{m}_{s}"].notna().any() for s in "ab")]
    if not metrics:
        return "(none of compare's metrics was measured here: images/s, MB/s, runtime or stalls)"
    rows = rows.sort_values([PAIRED, *keys], key=_sortable, kind="stable")  # both, only in A/B, alike
    tries = [(keys, metrics[:MOST_METRICS]), (keys, metrics[:1])]
    tries += [(keys[:n], metrics[:1]) for n in range(len(keys) - 1, -1, -1)]
    same = len(rows[[*keys, PAIRED]].astype(str).drop_duplicates()) < len(rows)  # alike cells: by folder
    for shown, ms in tries:
        lines = _rendered(rows, shown, ms, folder=same or len(shown) < len(keys))
        if max(map(len, lines)) <= width:
            break
    if len(shown) < len(keys):
        lines.append(f"(also told apart by {', '.join(_label(k) for k in keys[len(shown) :])}: --csv FILE)")
    return "\n".join(lines)


def _rendered(rows, keys: list[str], metrics: list[str], folder: bool) -> list[str]:
    """The table's lines: the settings ``keys`` (and the cell's folder, ``folder``), ``paired`` where a
    row is not paired, then A, B and B/A of each of ``metrics``."""
    import pandas as pd

    columns: dict[tuple[str, str], list[str]] = {}
    if folder:
        cells = rows[f"{CELL}_a"] if f"{CELL}_a" in rows else pd.Series([math.nan] * len(rows))
        if f"{CELL}_b" in rows:
            cells = cells.fillna(rows[f"{CELL}_b"])
        columns[("cell", "")] = list(cells.astype(str))
    columns.update({(_label(k), ""): list(rows[k].astype(str)) for k in keys})
    if (rows[PAIRED] != "both").any():
        columns[(PAIRED, "")] = list(rows[PAIRED])
    for m in metrics:
        for side, name in (("a", "A"), ("b", "B"), ("ratio", "B/A")):
            col = rows[f"{m}_{side}"] if f"{m}_{side}" in rows else [math.nan] * len(rows)
            columns[(_metric_label(m), name)] = [_number(v, side == "ratio") for v in col]
    frame = pd.DataFrame(columns)
    frame.columns = pd.MultiIndex.from_tuples(frame.columns)
    return [line.rstrip() for line in frame.to_string(index=False).splitlines()]


def _sortable(column):
    """A column as numbers where every value is one (2 before 16), else as text; ``paired`` as both, only
    in A, only in B, then alike."""
    import pandas as pd

    if column.name == PAIRED:
        return column.str.replace("alike", "~alike")
    as_number = pd.to_numeric(column, errors="coerce")
    return as_number if as_number.notna().all() else column.astype(str)


def unpaired_lines(table) -> list[str]:
    """The lines that name the cells left unpaired: those of one side without a counterpart, each by its
    folder (its grid) and settings, and the cells of one side that are one cell, with why they are."""
    a = table.attrs
    lines = []
    if a["only_a"] or a["only_b"]:
        named = [
            f"{side}'s {_described(r, table)}"
            for side in "AB"
            for _, r in table[table[PAIRED] == f"only in {side}"].iterrows()
        ]
        shown = "; ".join(named[:NAMED]) + (
            f"; and {len(named) - NAMED} more (the rows only in A or B above)" if len(named) > NAMED else ""
        )
        lines.append(
            f"{a['only_a']} cell{'' if a['only_a'] == 1 else 's'} of A and {a['only_b']} of B have no "
            f"counterpart: {shown} (cells pair only when every setting is equal; to leave a setting out of "
            "the pairing, give --ignore KEY)"
        )
    why = iter(a["differ"])
    for side in "AB":
        reasons: dict[str, list[list[str]]] = {}  # one line per reason, naming every group it holds
        for cells in a["alike"][side]:
            reasons.setdefault(_alike_reason(side, cells, next(why), a), []).append(cells)
        for reason, groups in reasons.items():
            n = sum(map(len, groups))
            named = "; ".join(" and ".join(g) for g in groups[:NAMED])
            more = f"; and {len(groups) - NAMED} more alike" if len(groups) > NAMED else ""
            alike = f"{n} cells of {side} cannot be paired, each alike another of {side}"
            lines.append(f"{alike}: {named}{more} ({reason})")
    return lines


NAMED = 4  # cells (or groups of alike cells) a line names before it counts the rest


def _alike_reason(side: str, cells: list[str], keys: list[str], attrs: dict) -> str:
    """Why cells of one side are one cell by the pairing's rule: what they differ in, and why it does not
    count."""
    ignored = [k for k in keys if any(k == i or k.startswith(i + ".") for i in attrs["ignore"])]
    rest = [k for k in keys if k not in ignored]
    given = f"--ignore {','.join(attrs['ignore'])}"
    never = "never tell" + ("s" if len(rest) == 1 else "") + " cells apart (where things are, how they ran)"
    if not keys:
        why = "every setting equal"
    elif not rest:
        why = f"they differ only in {', '.join(keys)}, which {given} leaves out"
    elif not ignored:
        why = f"they differ only in {', '.join(keys)}, which {never}"
    else:
        why = f"they differ only in {', '.join(keys)}: {given} leaves out {', '.join(ignored)}, and "
        why += f"{', '.join(rest)} {never}"
    grids = {str(PurePosixPath(c).parent) for c in cells}
    if len(grids) > 1 and not attrs["by_grid"]:
        return f"{why}; in two grids, and {'B' if side == 'A' else 'A'} has no grids to pair them by"
    return why


def _described(row, table) -> str:
    """A cell as its folder (its grid's sweep folder, then the cell's) and the settings that tell its grid's
    cells apart: ``fig7/3 (batch_size=64 prefetch=1)``."""
    rows = table[table[GRID] == row[GRID]] if GRID in table else table
    keys = told_apart(rows, table.attrs["keys"]) or table.attrs["keys"]
    settings = " ".join(f"{_label(k)}={row[k]}" for k in keys if k in table)
    cell = row.get(f"{CELL}_a") if isinstance(row.get(f"{CELL}_a"), str) else row.get(f"{CELL}_b")
    return f"{cell} ({settings})"
