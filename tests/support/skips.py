"""Skip markers for tests that need a part this machine may lack. Under CI=true none of them skips: CI
installs every part and runs as root, so a missing part fails there instead of hiding."""

from __future__ import annotations

import os
import shutil

import pytest

from jobs.storage import tiers

IN_CI = os.environ.get("CI") == "true"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NO_TIERS = tiers.available()  # why emulated tiers cannot be built here (root, loops, a cgroup), or None

needs_root = pytest.mark.skipif(NO_TIERS is not None and not IN_CI, reason=str(NO_TIERS))
needs_fio = pytest.mark.skipif(
    shutil.which("fio") is None and not IN_CI, reason="fio not installed (apt-get install fio)"
)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not IN_CI, reason="chromium not installed (apt-get install chromium)"
)
