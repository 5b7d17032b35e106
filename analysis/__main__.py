"""``python -m analysis <campaign folder>``: rebuild results.csv, summary.csv, cells.csv, the figures
and report.html; ``python -m analysis compare <A> <B>``: two campaigns side by side;
``python -m analysis profile <campaign> --name N --out F``: an accelerator profile from its measured
compute; ``python -m analysis mlperf <campaign>``: its emulated accelerators against MLPerf Storage's
rules; ``python -m analysis trace <file>``: the I/O profile of a user's Darshan log or DFTracer trace."""

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "compare":
        from analysis import compare

        return compare.main(argv[1:])
    if argv and argv[0] == "mlperf":
        from analysis.mlperf import command

        return command.main(argv[1:])
    if argv and argv[0] == "trace":
        from analysis.traces import command as trace

        return trace.main(argv[1:])
    if argv and argv[0] == "profile":
        from analysis import profile

        return profile.main(argv[1:])
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
    from analysis.build import build, not_a_baseline, not_a_campaign

    # before any file is read: a folder of campaigns would get them all merged
    why = not_a_campaign(args.folder)
    if why:
        print(f"analysis: {why}", file=sys.stderr)
        return 2

    why = not_a_baseline(args.baseline) if args.baseline is not None else None
    if why:
        print(f"analysis: --baseline {args.baseline} {why}", file=sys.stderr)
        return 2
    from analysis.build import NothingToBuild
    from analysis.outputs import OutputExists
    from jobs.jsonfiles import NotAFile

    try:
        if not args.no_figures:
            from analysis.report.sections import study_text

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
        from analysis.report.page import write_report

        try:
            out.files.append(write_report(args.folder, built=out))
        except (OutputExists, NotAFile) as e:  # NotAFile: a FIFO or link where the report reads paper.txt
            print(f"analysis: {e}; the tables and figures were written, report.html was not", file=sys.stderr)
            return 2
    print(out.describe())
    return 1 if out.failed or out.missing or out.unreadable else 0


def run() -> int:
    """``main``, ended by Ctrl-C or SIGTERM in one line: every file it had written is whole (each is written
    aside and renamed onto its name; the one being written is removed), and the rest are as they were."""
    from jobs import interrupts

    interrupts.install()
    try:
        with interrupts.surfaced():  # a library's error in place of the interrupt is the interrupt
            status = main()
            interrupts.settle()  # a signal that landed inside a finalizer is raised here, not lost
        return status
    except (KeyboardInterrupt, interrupts.Interrupted) as e:
        print(
            f"analysis: interrupted by {interrupts.name_of(e)}; the files it wrote are whole, the others "
            "as they were: run the same command again",
            file=sys.stderr,
        )
        return 128 + interrupts.signum_of(e)


if __name__ == "__main__":
    from jobs.lifeline import exit_as_python

    exit_as_python(lambda: sys.exit(run()))
