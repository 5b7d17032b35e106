"""What collecting the suite imported: each worker collects every test module, so a framework imported by
a module's top lines (Keras alone is about 6 s of CPU) is paid by every worker, even one that runs no test
of it. ``tests/conftest.py`` notes the frameworks that collecting imported; a layout test holds none."""

from __future__ import annotations

import sys

import pytest

FRAMEWORKS = ("tensorflow", "keras", "torch", "jax", "grain")
IMPORTED = pytest.StashKey[list[str]]()


def frameworks_imported() -> list[str]:
    """The frameworks this process has imported so far."""
    return [name for name in FRAMEWORKS if name in sys.modules]
