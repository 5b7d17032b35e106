"""``python -m analysis <campaign folder>``: rebuild results.csv, summary.csv, cells.csv and the figures."""

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    p.add_argument("folder", type=Path, help="a sweep folder (multirun/<date>/<time>) or a single run's folder")
    p.add_argument("--no-figures", action="store_true", help="write the tables only")
    p.add_argument("--baseline", type=Path, default=None,
                   help="a campaign folder with workload=baseline cells, for the efficiency column "
                        "(default: the baseline cells of this folder)")
    args = p.parse_args(argv)
    if not args.folder.is_dir():
        print(f"analysis: {args.folder} is not a folder", file=sys.stderr)
        return 2
    from analysis.build import build

    if args.baseline is not None and not args.baseline.is_dir():
        print(f"analysis: --baseline {args.baseline} is not a folder", file=sys.stderr)
        return 2
    out = build(args.folder, render=not args.no_figures, baseline_from=args.baseline)
    if not (out.completed or out.failed or out.missing or out.unreadable):
        print(f"analysis: no cell records (record.json) and no plan.json under {args.folder}", file=sys.stderr)
        return 1
    print(out.describe())
    return 1 if out.failed or out.missing or out.unreadable else 0


if __name__ == "__main__":
    sys.exit(main())
