"""Convert a cell's dftracer trace (``posix/trace-*.pfw.gz``) into Chrome's trace-event JSON, which
Perfetto (https://ui.perfetto.dev) and chrome://tracing open: ``python -m analysis.perfetto TRACE [OUT]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from jobs import posix

    p = argparse.ArgumentParser(prog="python -m analysis.perfetto", description=__doc__.split("\n\n")[0])
    p.add_argument("trace", type=Path, help="a trace a traced cell wrote: <cell>/posix/trace-*.pfw.gz")
    p.add_argument("out", type=Path, nargs="?", help="where to write (default: beside it, <trace>.json.gz)")
    a = p.parse_args(argv)
    if not a.trace.is_file():
        print(f"analysis.perfetto: {a.trace} is not a file", file=sys.stderr)
        return 2
    out = a.out or a.trace.with_name(a.trace.name.removesuffix(".pfw.gz") + ".json.gz")
    if out.exists():
        print(f"analysis.perfetto: {out} exists; name another output", file=sys.stderr)
        return 2
    try:
        print(posix.to_chrome(a.trace, out))
    except posix.PosixTraceError as e:
        print(f"analysis.perfetto: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
