"""What C++ code writes on standard error during a cell's runs, in the cell's ``native.log`` instead of on
the terminal: TensorFlow's per-op lines (``tf_record_dataset_op.cc:390] TFRecordDataset `buffer_size` is
unspecified`` for every TFRecord pipeline; ``OP_REQUIRES failed at whole_file_read_ops.cc`` for every image a
``campaign.cache purge`` took away under a running cell, about 1,200 lines), absl's, CUDA's, PyTorch's C++
warnings. They are written straight to file descriptor 2, below Python, so it is descriptor 2 that points at
the file for the block, and so it does for the processes started in it (fio, DataLoader workers, task
processes). Python's own lines still reach the terminal: ``sys.stderr`` and the logging handlers that wrote
on descriptor 2 write where it went before, so the one line a failed run ends with, the dataset's progress
and a lock wait are seen as before. TensorFlow's start-up lines, printed once per process at its import,
have a file of their own (``jobs.execution.tfstart``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

NAME = "native.log"

_active: list[Path] = []  # the log of the block this process is in (an inner block writes there too)


@contextlib.contextmanager
def into(log: Path) -> Iterator[Path]:
    """Descriptor 2 appended to ``log`` for the block, Python's writers on it sent where it went before.
    Inside another block of this process, the outer one's file is kept (a benchmark's, around the runs it
    makes). ``log`` is removed at the end if nothing was written in it."""
    if _active:
        yield _active[-1]
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    _flush()
    saved = os.dup(2)
    terminal = _writer_on(saved)
    moved = _move_writers(terminal)
    _active.append(log)
    try:
        with open(log, "ab") as f:
            os.dup2(f.fileno(), 2)
        yield log
    finally:
        _flush()
        os.dup2(saved, 2)
        _active.pop()
        _restore(moved)
        terminal.close()
        os.close(saved)
        with contextlib.suppress(OSError):
            if log.stat().st_size == 0:
                log.unlink()


def _on_fd2(stream) -> bool:
    try:
        return stream is not None and stream.fileno() == 2
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False  # pytest's capture, a StringIO: not descriptor 2, left as it is


def _writer_on(fd: int) -> io.TextIOWrapper:
    """A line-buffered text writer on ``fd`` that leaves it open, encoded as ``sys.stderr`` is."""
    like = sys.stderr if _on_fd2(sys.stderr) else sys.__stderr__
    encoding = getattr(like, "encoding", None) or "utf-8"
    errors = getattr(like, "errors", None) or "backslashreplace"
    raw = open(fd, "wb", buffering=0, closefd=False)  # noqa: SIM115 (closed with the writer)
    return io.TextIOWrapper(raw, encoding=encoding, errors=errors, line_buffering=True, write_through=True)


def _handlers() -> Iterator[logging.StreamHandler]:
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for lg in loggers:
        for h in getattr(lg, "handlers", ()):
            # logging.lastResort and its kind read sys.stderr at each line: they follow it already
            follows = isinstance(type(h).__dict__.get("stream"), property)
            if isinstance(h, logging.StreamHandler) and not follows:
                yield h


def _move_writers(terminal) -> list[tuple[object, object]]:
    """``sys.stderr`` and every logging handler that writes on descriptor 2 now write on ``terminal``;
    returns what to put back: (handler or None for sys.stderr, its stream)."""
    moved: list[tuple[object, object]] = []
    for h in _handlers():
        if _on_fd2(h.stream):
            moved.append((h, h.setStream(terminal)))
    if _on_fd2(sys.stderr):
        moved.append((None, sys.stderr))
        sys.stderr = terminal
    return moved


def _restore(moved: list[tuple[object, object]]) -> None:
    for h, stream in reversed(moved):
        if h is None:
            sys.stderr = stream
        else:
            h.setStream(stream)


def _flush() -> None:
    for s in (sys.stderr, sys.__stderr__):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            s.flush()
