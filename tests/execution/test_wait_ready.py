"""``jobs.lifeline.wait_ready``: the one wait every helper's start goes through, against real processes."""

from __future__ import annotations

import subprocess
import time

import pytest

from jobs import lifeline


def test_a_helper_that_ends_before_it_is_ready_fails_at_once_in_its_own_words(tmp_path):
    proc = subprocess.Popen(
        ["sh", "-c", "echo 'no such bucket' >&2; exit 3"], stderr=subprocess.PIPE, text=True
    )
    t0 = time.monotonic()

    def died():
        return None if proc.poll() is None else RuntimeError(f"ended: {proc.stderr.read().strip()}")

    with pytest.raises(RuntimeError, match="ended: no such bucket"):
        lifeline.wait_ready((tmp_path / "ready").exists, died=died, late=lambda: TimeoutError(), timeout_s=60)
    assert time.monotonic() - t0 < 10  # not the 60 s of the limit


def test_a_helper_that_neither_ends_nor_gets_ready_is_late_and_one_that_gets_ready_is_waited_for(tmp_path):
    proc = subprocess.Popen(["sleep", "30"])
    try:

        def alive():
            return None if proc.poll() is None else RuntimeError("ended")

        with pytest.raises(TimeoutError, match="not ready in 0.3 s"):
            lifeline.wait_ready(
                (tmp_path / "never").exists,
                died=alive,
                late=lambda: TimeoutError("not ready in 0.3 s"),
                timeout_s=0.3,
            )
        writer = subprocess.Popen(["sh", "-c", f"sleep 0.3; echo 7 > {tmp_path / 'ready'}"])
        got = lifeline.wait_ready(
            lambda: (tmp_path / "ready").exists() and (tmp_path / "ready").read_text().strip(),
            died=alive,
            late=lambda: TimeoutError(),
            timeout_s=30,
        )
        assert got == "7"  # the first true value of ready()
        writer.wait()
    finally:
        proc.kill()
        proc.wait()
