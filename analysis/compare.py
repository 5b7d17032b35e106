"""``python -m analysis compare A B``: each cell's median metrics in campaign A beside the same cell in
campaign B, with B ÷ A; cells pair when everything that defines them is equal."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.tables import identity, tidy


def main(argv: list[str]) -> int:
    """``python -m analysis compare A B [--csv FILE] [--ignore KEYS]``; the exit status."""
    p = argparse.ArgumentParser(
        prog="python -m analysis compare", description="campaign A beside campaign B, per cell"
    )
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--csv", type=Path, default=None, help="also write the table here (a new file)")
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
    import pandas as pd

    a = table.attrs
    print(f"{a['both']} cell{'' if a['both'] == 1 else 's'} paired; told apart by {', '.join(a['keys'])}")
    with pd.option_context(
        "display.width", 160, "display.max_columns", None, "display.float_format", "{:.4g}".format
    ):
        print(printable(table).to_string(index=False))
    if a["only_a"] or a["only_b"]:
        print(
            f"analysis: {a['only_a']} cell{'' if a['only_a'] == 1 else 's'} of A and {a['only_b']} of B have "
            "no counterpart (column paired); cells pair only when every setting is equal (--ignore KEY "
            "leaves one out)",
            file=sys.stderr,
        )
    if not a["both"]:
        print("analysis: 0 cells paired: the campaigns measured different cells", file=sys.stderr)
        return 1
    return 1 if table.attrs.get("unreadable") else 0


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
    """Two campaigns whose cells cannot be paired; the message says why."""


SHOWN = (
    "images_per_s_median",
    "mb_per_s_median",
    "steady_runtime_s_median",
    "runtime_s_median",
    "median_stall_s_median",
)
PAIRED = "paired"  # both, only in A, only in B


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


def compare_campaigns(a: Path, b: Path, ignore: tuple[str, ...] = ()):
    """Each cell's median metrics in campaign A beside the same cell in campaign B, with B / A.

    Cells pair when everything that defines them is equal (``analysis.tables.identity``: the resolved config
    without paths and launch settings; ``ignore``: dotted keys left out, the setting being compared).
    The frame's columns are the keys whose values differ between cells, ``paired`` (both, only in A,
    only in B: a cell without its counterpart is shown, never dropped), then each metric's A, B and
    ratio. ``attrs``: ``unreadable`` records, ``keys`` that vary, ``only_a``/``only_b`` counts."""
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
    sides = []
    for f, c in zip(frames, collected):
        ids = pd.DataFrame([identity.identity(c.configs[d], ignore) for d in f["cell_dir"]])
        sides.append((ids, f[metrics].reset_index(drop=True)))
    keys = sorted(set(sides[0][0].columns) | set(sides[1][0].columns))
    for (ids, _), name in zip(sides, "AB"):
        for k in keys:
            if k not in ids:
                ids[k] = "(unset)"
        dup = int(ids.duplicated(keys, keep=False).sum())
        if dup:
            raise CompareError(
                f"{dup} cells of {name} are the same cell once {', '.join(ignore) or 'paths'} is left "
                "out: they cannot be paired (leave out less with --ignore)"
            )
    both = pd.concat([ids[keys] for ids, _ in sides])
    vary = [k for k in keys if both[k].nunique(dropna=False) > 1] or ["workload.name"]
    fa, fb = (pd.concat([ids[keys], m], axis=1) for ids, m in sides)
    m = fa.merge(fb, on=keys, suffixes=("_a", "_b"), how="outer", indicator=PAIRED)
    m[PAIRED] = (
        m[PAIRED].map({"both": "both", "left_only": "only in A", "right_only": "only in B"}).astype(str)
    )
    for metric in metrics:
        m[f"{metric}_ratio"] = m[f"{metric}_b"] / m[f"{metric}_a"]
    cols = [
        *vary,
        PAIRED,
        *(c for metric in metrics for c in (f"{metric}_a", f"{metric}_b", f"{metric}_ratio")),
    ]
    m = m[cols]
    out = m.loc[:, m.notna().any()].sort_values([PAIRED, *vary], kind="stable").reset_index(drop=True)
    out.attrs.update(
        unreadable=unreadable,
        keys=vary,
        only_a=int((m[PAIRED] == "only in A").sum()),
        only_b=int((m[PAIRED] == "only in B").sum()),
        both=int((m[PAIRED] == "both").sum()),
    )
    return out


def printable(table, most: int = 2):
    """The comparison as people read it: the varying keys, ``paired``, and A, B, B/A of the first ``most``
    headline metrics measured (the CSV holds every metric)."""
    metrics = [m for m in SHOWN if f"{m}_ratio" in table][:most]
    names = {
        f"{m}_{side}": f"{m.removesuffix('_median')} {label}"
        for m in metrics
        for side, label in (("a", "A"), ("b", "B"), ("ratio", "B/A"))
    }
    return table[[*table.attrs.get("keys", []), PAIRED, *names]].rename(columns=names)
