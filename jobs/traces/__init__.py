"""The I/O a user's own job made, read from the trace they bring, as one table of operations.

Three formats are read, each by its own module, into the same tidy table (``COLUMNS``, one row per call):

- a **Darshan** log (``jobs.traces.darshan``, through PyDarshan): DXT's read and write segments per file
  and rank where the log has them, and always its POSIX and STDIO counters per file and rank;
- a **DFTracer** trace (``jobs.traces.dftracer``): ``.pfw`` or ``.pfw.gz``, one JSON event per line;
- the tool's **own POSIX traces**: a traced cell's folder (``trace.posix=true``) or its ``posix/`` folder,
  whose traces dftracer's preload library wrote.

``read(path)`` picks the reader from what the file holds, not only its name. A trace that cannot be read
raises ``TraceError`` with one line that says what is wrong: not a trace of a format read here, truncated,
of a version not read, holding no reads or writes, or larger than ``MAX_OPERATIONS``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from jobs.traces.operations import COLUMNS, MAX_OPERATIONS, Trace, TraceError

__all__ = ["COLUMNS", "MAX_OPERATIONS", "Trace", "TraceError", "read"]


def read(path: str | os.PathLike) -> Trace:
    """The trace at ``path`` (a Darshan log, a DFTracer trace, or a traced cell's folder); TraceError when
    it is none of them, or is truncated, empty, of a version not read, or too large, or when the way to
    it goes through a link another user made (never followed)."""
    from jobs import owned
    from jobs.traces import darshan, dftracer

    p = Path(path)
    planted = owned.planted_link(p)
    if planted is not None:
        raise TraceError(
            f"{p}: {planted.link} is a link made by {planted.user}: the tool never follows another user's "
            "link (copy the trace to a folder of yours)"
        )
    if p.is_dir():
        return dftracer.read_cell(p)
    _regular(p)
    if darshan.is_log(p):
        return darshan.read(p)
    if dftracer.is_trace(p):
        return dftracer.read(p)
    raise TraceError(
        f"{p}: not a trace this tool reads (a Darshan log, a DFTracer .pfw or .pfw.gz trace, or a traced "
        "cell's folder)"
    )


def _regular(p: Path) -> None:
    """Refuse, before a byte is read, a name that holds no regular file (a FIFO would block for ever)."""
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise TraceError(f"{p}: no such file") from None
    except OSError as e:
        raise TraceError(f"{p}: cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(mode):
        raise TraceError(f"{p}: not a regular file (a trace is a file, or a traced cell's folder)")
    if os.stat(p).st_size == 0:
        raise TraceError(f"{p}: an empty file")
    if not os.access(p, os.R_OK):
        raise TraceError(f"{p}: cannot be read (permission denied)")
