"""``python -m analysis compare A B``: each cell's median metrics in campaign A beside the same cell in
campaign B, with B ÷ A; cells pair when everything that defines them is equal.

A paper study's folder holds one sweep per grid, and two grids may hold the same cell (Fig. 7's batch-64
cells are Figs. 6 and 8's 8-thread cells): cells pair within their grid (the sweep folder that holds
them), then by their settings. What cannot be paired is named, never a reason to pair nothing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path, PurePosixPath

from analysis import compare_view, standing
from analysis.compare_view import CELL, GRID, PAIRED
from analysis.tables import identity, tidy

WIDTH = 100  # the printed tables fit a terminal this wide; --csv holds every setting and metric


def main(argv: list[str]) -> int:
    """``python -m analysis compare A B [--csv FILE] [--ignore KEYS]``; the exit status."""
    p = argparse.ArgumentParser(
        prog="python -m analysis compare", description="campaign A beside campaign B, per cell"
    )
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument(
        "--csv", type=Path, default=None, help="also write the whole table, every setting, here (a new file)"
    )
    p.add_argument(
        "--ignore",
        default="",
        help="comma-separated config keys not used to pair cells, e.g. "
        "storage to put an HDD campaign beside an SSD one",
    )
    args = p.parse_args(argv)
    why = _new_file_problem(args.csv) if args.csv is not None else None
    if why:
        print(f"analysis: --csv {args.csv}: {why}", file=sys.stderr)
        return 2
    for f in (args.a, args.b):
        if not f.is_dir():
            print(f"analysis: {f} is not a folder", file=sys.stderr)
            return 2
    try:
        table = compare_campaigns(args.a, args.b, tuple(k for k in args.ignore.split(",") if k))
    except CompareError as e:
        print(f"analysis: {e}", file=sys.stderr)
        return 2
    for u in table.attrs.get("unreadable", []):
        print(f"analysis: UNREADABLE {u} (left out of the comparison)", file=sys.stderr)
    if table.empty:
        print("analysis: nothing to compare (one of the campaigns has no completed cell)", file=sys.stderr)
        return 1
    if args.csv and not _write_csv(table, args.csv):
        return 2

    print(compare_view.text(table, WIDTH, csv=args.csv is not None))
    for line in _standing_lines(table):
        print(line)
    for line in compare_view.unpaired_lines(table):
        print(f"analysis: {line}", file=sys.stderr)
    if not table.attrs["both"]:
        why = (
            "the lines above say why"
            if any(table.attrs["alike"].values())
            else "the campaigns measured different cells"
        )
        print(f"analysis: 0 cells paired: {why}", file=sys.stderr)
        return 1
    return 1 if table.attrs.get("unreadable") else 0


def _standing_lines(table) -> list[str]:
    """Under the ratios, what each side's runs stood on where it mattered (analysis.standing): a B/A
    taken while other processes held the cores of one side is that client's limit, not the storage's."""
    import textwrap

    lines = []
    for side, words in zip("AB", table.attrs["standing"]):
        if words:
            lines += textwrap.wrap(f"{side}: {words}", WIDTH, subsequent_indent="   ")
    return lines


def _new_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a new file the analysis writes (None: it can)."""
    if path.exists() or path.is_symlink():
        return "exists; give a new file (nothing is written over an existing one)"
    if not path.parent.is_dir():
        return f"its folder {path.parent} does not exist or is not a folder; nothing was written"
    return None


def _write_csv(table, path: Path) -> bool:
    """The comparison as the new file ``path``; False (one line said why) when it cannot be written."""
    from analysis import outputs

    try:
        with outputs.new_file(path) as f:
            table.to_csv(f, index=False)
    except OSError as e:  # OutputExists (a file appeared meanwhile), no permission, a full disk
        print(f"analysis: --csv {path}: {e.strerror or e}; nothing was written", file=sys.stderr)
        return False
    return True


class CompareError(ValueError):
    """Two campaigns whose cells cannot be compared at all; the message says why."""


def _check_ignore(ignore: tuple[str, ...], configs: list[dict]) -> None:
    """Raise CompareError for a key of ``ignore`` that names no setting of ``configs`` (a typo would
    otherwise leave out nothing, silently)."""
    if not configs:
        return  # no completed cell: nothing to pair, and nothing to check the keys against
    keys: set[str] = set()

    def walk(prefix: str, v) -> None:
        keys.add(prefix)
        for k, x in v.items() if isinstance(v, dict) else ():
            walk(f"{prefix}.{k}", x)

    for cfg in configs:
        for k, v in cfg.items():
            walk(str(k), v)
    for key in ignore:
        if key not in keys:
            top = sorted({k for cfg in configs for k in cfg})
            raise CompareError(
                f"--ignore {key}: no cell of either campaign has this setting; valid: a key of the "
                f"cells' config (a record's config), one of {', '.join(top)} or a dotted key below one, "
                "e.g. storage or workload.image_side; nothing was written"
            )


def grid_of(cell_dir: str) -> str:
    """The grid a cell belongs to: the folder of its sweep under the campaign folder (``fig7`` for a paper
    study's ``fig7/3``; ``local/prove`` for a capacity search's cell); "" for a single sweep's cell."""
    parent = str(PurePosixPath(cell_dir).parent)
    return "" if parent == "." else parent


def compare_campaigns(a: Path, b: Path, ignore: tuple[str, ...] = ()):
    """Each cell's median metrics in campaign A beside the same cell in campaign B, with B / A.

    Cells pair within their grid (``grid_of``; when both campaigns have grids, as two paper studies do),
    then when everything that defines them is equal (``analysis.tables.identity``: the resolved config
    without paths and launch settings; ``ignore``: dotted keys left out, the setting being compared).
    Cells of one campaign that are one cell by that rule cannot be paired: each is shown, as ``alike in
    A`` (or B), never paired by chance. The frame's columns are ``grid`` (with grids), the keys whose
    values differ between cells, ``paired``, ``cell_a``/``cell_b``, then each metric's A, B and ratio.
    ``attrs``: ``unreadable`` records, ``keys`` that vary, the counts ``both``, ``only_a``, ``only_b``,
    ``alike`` (per side: lists of the folders of cells that are one cell), ``ignore``, ``differ`` (per
    group of alike cells: the config keys they differ in), ``standing`` (per side: what its runs stood on,
    "" where nothing mattered; analysis.standing)."""
    import pandas as pd

    collected = [tidy.collect(x) for x in (a, b)]
    _check_ignore(ignore, [cfg for c in collected for cfg in c.configs.values()])
    unreadable = [u for c in collected for u in c.unreadable]
    frames = [tidy.summary_frame(tidy.results_frame(c)) for c in collected]
    if any(f.empty for f in frames):
        empty = pd.DataFrame()
        empty.attrs["unreadable"] = unreadable
        return empty
    metrics = [c for c in frames[0].columns if c.endswith("_median") and c in frames[1].columns]
    by_grid = all(any(grid_of(d) for d in f["cell_dir"]) for f in frames)
    sides = []
    for f, c in zip(frames, collected):
        ids = pd.DataFrame([identity.identity(c.configs[d], ignore) for d in f["cell_dir"]])
        ids.insert(0, GRID, [grid_of(d) if by_grid else "" for d in f["cell_dir"]])
        sides.append((ids, f[metrics].reset_index(drop=True), list(f["cell_dir"])))
    keys = [GRID, *sorted((set(sides[0][0].columns) | set(sides[1][0].columns)) - {GRID})]
    parts, alike, differ = [], {}, []
    for (ids, m, dirs), name in zip(sides, "AB"):
        ids = ids.reindex(columns=keys).fillna("(unset)")  # a key of other cells only: unset in this one
        frame = pd.concat([ids[keys], m], axis=1).assign(**{CELL: dirs})
        dup = frame.duplicated(keys, keep=False)
        groups = [list(g[CELL]) for _, g in frame[dup].groupby(keys, sort=False, dropna=False)]
        alike[name] = groups
        differ += [_differing([collected["AB".index(name)].configs[d] for d in g]) for g in groups]
        parts.append((frame[~dup], frame[dup].assign(**{PAIRED: f"alike in {name}"})))
    (fa, alike_a), (fb, alike_b) = parts
    m = fa.merge(fb, on=keys, suffixes=("_a", "_b"), how="outer", indicator=PAIRED)
    m[PAIRED] = (
        m[PAIRED].map({"both": "both", "left_only": "only in A", "right_only": "only in B"}).astype(str)
    )
    suffixed = [
        x.rename(columns={c: f"{c}_{s}" for c in [*metrics, CELL]})
        for x, s in ((alike_a, "a"), (alike_b, "b"))
    ]
    m = pd.concat([m, *suffixed], ignore_index=True)
    for metric in metrics:
        m[f"{metric}_ratio"] = m[f"{metric}_b"] / m[f"{metric}_a"]
    vary = [k for k in keys[1:] if m[k].nunique(dropna=False) > 1] or ["workload.name"]
    cols = [
        *([GRID] if by_grid else []),
        *vary,
        PAIRED,
        f"{CELL}_a",
        f"{CELL}_b",
        *(c for metric in metrics for c in (f"{metric}_a", f"{metric}_b", f"{metric}_ratio")),
    ]
    m = m[cols]
    order = [*([GRID] if by_grid else []), PAIRED, *vary]
    out = m.loc[:, m.notna().any()].sort_values(order, kind="stable").reset_index(drop=True)
    out.attrs.update(
        unreadable=unreadable,
        keys=vary,
        only_a=int((m[PAIRED] == "only in A").sum()),
        only_b=int((m[PAIRED] == "only in B").sum()),
        both=int((m[PAIRED] == "both").sum()),
        alike=alike,
        differ=differ,
        ignore=ignore,
        by_grid=by_grid,
        standing=[standing.of_collected(c).phrase() for c in collected],
    )
    return out


def _differing(configs: list[dict]) -> list[str]:
    """The dotted config keys whose values differ among ``configs`` (Hydra's node left out)."""
    flat = [identity.flatten(c) for c in configs]
    every = sorted(set().union(*flat))
    return [k for k in every if len({f.get(k, "(unset)") for f in flat}) > 1]
