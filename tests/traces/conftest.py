"""The trace tests' shared fixture: one real DFTracer trace of a program whose calls are known."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.traces import program_trace


@pytest.fixture(scope="module")
def dft(tmp_path_factory) -> Path:
    """A DFTracer trace of support.traces.PROGRAM, written by dftracer's preload library."""
    return program_trace(tmp_path_factory.mktemp("dft"))
