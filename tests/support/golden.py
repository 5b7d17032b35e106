"""Golden files for generated text: a change shows as a diff; after checking it, rewrite the files with
UPDATE_GOLDEN=1 and say why in the commit."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest


def same_as_golden(path: Path, text: str) -> None:
    """Fail with the diff when ``text`` is not the golden file ``path`` (UPDATE_GOLDEN=1 rewrites it)."""
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    expected = path.read_text() if path.exists() else ""
    if text != expected:
        name = f"{path.parent.name}/{path.name}"
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), name, "now"))
        pytest.fail(f"{name} differs from its golden file (UPDATE_GOLDEN=1 rewrites it):\n{diff}")
