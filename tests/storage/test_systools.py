"""The system tools a tier runs are bounded: one that does not end is killed at its limit and named in
one line, and a clean-up goes on without it."""

from __future__ import annotations

import time

import pytest

from jobs.storage import systools


def test_a_tool_that_does_not_end_is_killed_at_its_limit_and_named(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(systools.NoAnswer) as e:
        systools.run(["sh", "-c", "trap '' TERM; sleep 30"], timeout_s=1, cwd=tmp_path)
    assert time.monotonic() - t0 < 10  # SIGKILL, not a polite SIGTERM that the tool may ignore
    assert str(e.value) == "sh -c 'trap '\"'\"''\"'\"' TERM; sleep 30' did not end within 1 s and was killed"
    assert systools.quietly(["sleep", "30"], timeout_s=1) is None


def test_a_tool_that_ends_gives_its_status_and_output(tmp_path):
    p = systools.run(["sh", "-c", "pwd; echo said >&2; exit 3"], cwd=tmp_path)
    assert (p.returncode, p.stdout.strip(), p.stderr.strip()) == (3, str(tmp_path), "said")
    assert systools.quietly(["true"]) == 0
