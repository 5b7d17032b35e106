"""``python -m analysis <campaign folder>``: rebuild results.csv, summary.csv, cells.csv, the figures
and report.html; ``python -m analysis compare <A> <B>``: two campaigns side by side;
``python -m analysis profile <campaign> --name N --out F``: an accelerator profile from its measured compute."""

import argparse
import sys
from pathlib import Path


def compare_main(argv: list[str]) -> int:
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
    from analysis.compare import CompareError, compare_campaigns, printable

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
            f"analysis: {a['only_a']} cell{'' if a['only_a'] == 1 else 's'} of A and {a['only_b']} of B have no "
            "counterpart (column paired); "
            "cells pair only when every setting is equal (--ignore KEY leaves one out)",
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


def profile_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m analysis profile",
        description="an accelerator profile (accelerator=<name>) from a training campaign's "
        "compute-only step time",
    )
    p.add_argument("campaign", type=Path, help="a campaign of a training workload (e.g. workload=alexnet)")
    p.add_argument("--name", required=True, help="the profile's name, as in accelerator=<name>")
    p.add_argument(
        "--out", type=Path, required=True, help="a config folder: the profile goes to <out>/accelerator/"
    )
    args = p.parse_args(argv)
    if not args.campaign.is_dir():
        print(f"analysis: {args.campaign} is not a folder", file=sys.stderr)
        return 2
    from analysis.profile import ProfileError, write

    try:
        target = write(args.campaign, args.name, args.out)
    except ProfileError as e:
        print(f"analysis: {e}", file=sys.stderr)
        return 2
    print(f"analysis: profile {args.name}: {target}")
    print(
        f"  use it: python -m campaign.capacity accelerator={args.name} hydra.searchpath=[file://{args.out.resolve()}]"
    )
    return 0


def _not_a_baseline(folder: Path) -> str | None:
    """Why ``folder`` cannot give the efficiency column (the end of one line), or None."""
    from analysis import tables
    from analysis.build import not_a_campaign

    if not folder.is_dir():
        return "is not a folder"
    why = not_a_campaign(folder)
    if why:
        return f": {why}; nothing was written"
    if tables.baselines_frame(tables.collect(folder)).empty:  # else the efficiency column is silently empty
        return (
            "has no completed workload=baseline cell (python -m campaign workload=baseline storage=<tier> measures "
            "one); nothing was written"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from jobs import workloads

    workloads.discover()  # metrics that workloads beyond the built-in ones declare become columns too
    if argv and argv[0] == "compare":
        return compare_main(argv[1:])
    if argv and argv[0] == "profile":
        return profile_main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    p.add_argument(
        "folder",
        type=Path,
        help="a campaign folder: a sweep's (multirun/<date>/<time>), a single run's, "
        "a paper study's or a capacity search's",
    )
    p.add_argument("--no-figures", action="store_true", help="write the tables only")
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a campaign folder with workload=baseline cells, for the efficiency column "
        "(default: the baseline cells of this folder)",
    )
    args = p.parse_args(argv)
    if not args.folder.is_dir():
        print(f"analysis: {args.folder} is not a folder", file=sys.stderr)
        return 2
    from analysis.build import build, not_a_campaign

    why = not_a_campaign(
        args.folder
    )  # before any file is read: a folder of campaigns would get them all merged
    if why:
        print(f"analysis: {why}", file=sys.stderr)
        return 2

    why = _not_a_baseline(args.baseline) if args.baseline is not None else None
    if why:
        print(f"analysis: --baseline {args.baseline} {why}", file=sys.stderr)
        return 2
    from analysis.build import NothingToBuild
    from analysis.outputs import OutputExists
    from jobs.jsonfiles import NotAFile

    try:
        if not args.no_figures:
            from analysis.report import study_text

            study_text(args.folder)  # a FIFO or link as paper.txt stops the report: refused before any table
        out = build(args.folder, render=not args.no_figures, baseline_from=args.baseline)
    except NotAFile as e:
        print(f"analysis: {e}; nothing was written", file=sys.stderr)
        return 2
    except NothingToBuild as e:
        print(f"analysis: {e}", file=sys.stderr)
        return 1
    except OutputExists as e:
        print(f"analysis: {e}", file=sys.stderr)
        return 2
    if not args.no_figures and (out.completed or out.failed):
        from analysis.report import write_report

        try:
            out.files.append(write_report(args.folder, built=out))
        except (OutputExists, NotAFile) as e:  # NotAFile: a FIFO or link where the report reads paper.txt
            print(f"analysis: {e}; the tables and figures were written, report.html was not", file=sys.stderr)
            return 2
    print(out.describe())
    return 1 if out.failed or out.missing or out.unreadable else 0


if __name__ == "__main__":
    sys.exit(main())
