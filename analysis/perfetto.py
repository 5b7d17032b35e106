"""Convert a cell's dftracer trace (``posix/trace-*.pfw.gz``) into Chrome's trace-event JSON, which
Perfetto (https://ui.perfetto.dev) and chrome://tracing open: ``python -m analysis.perfetto TRACE [OUT]``."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

from jobs.observe import posix


def main(argv: list[str] | None = None) -> int:
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
        print(to_chrome(a.trace, out))
    except posix.PosixTraceError as e:
        print(f"analysis.perfetto: {e}", file=sys.stderr)
        return 1
    return 0


def to_chrome(src: Path, dst: Path) -> Path:
    """Convert a dftracer trace into Chrome's trace-event JSON (complete events, ``ph: X``; the
    file's path in ``args.path``), which Perfetto (ui.perfetto.dev) and chrome://tracing open.
    Written as ``<dst>.part`` and renamed when complete: a file that is not a whole gzip'd dftracer
    trace, or one without POSIX events, raises PosixTraceError and leaves nothing."""
    part = dst.with_name(dst.name + ".part")
    n = 0
    try:
        with gzip.open(part, "wt") if dst.suffix == ".gz" else open(part, "w") as out:
            out.write('{"displayTimeUnit":"ms","traceEvents":[\n')
            for name, tid, ts, dur, args, path in posix.events([src]):
                e = {
                    "name": name,
                    "cat": "STDIO" if name in posix.STDIO_CALLS else "POSIX",
                    "ph": "X",
                    "pid": 0,
                    "tid": tid,
                    "ts": ts,
                    "dur": dur,
                    "args": {**{k: v for k, v in args.items() if k != "hhash"}, "path": path},
                }
                out.write(("" if n == 0 else ",\n") + json.dumps(e))
                n += 1
            out.write("\n]}\n")
    except (OSError, EOFError, UnicodeDecodeError, ValueError) as e:
        part.unlink(missing_ok=True)
        why = "it ends early (truncated)" if isinstance(e, EOFError) else f"{type(e).__name__}: {e}"
        raise posix.PosixTraceError(
            f"{src} is not a whole gzip'd dftracer trace ({why}); nothing written"
        ) from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    if n == 0:
        part.unlink(missing_ok=True)
        raise posix.PosixTraceError(
            f"{src} holds no dftracer POSIX or STDIO event on a file; nothing written"
        )
    os.replace(part, dst)
    return dst


if __name__ == "__main__":
    sys.exit(main())
