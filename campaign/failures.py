"""Why a campaign run by another (``campaign.subcampaign``: a capacity search's round) failed, in words the
parent can put in its own one line: a failed cell's error from its record, else the refusal its planning
gives (the same planning again as a dry run, which writes nothing), else its exit status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _failed_cell(folder: Path) -> str | None:
    from jobs import records

    for path in sorted(folder.glob(f"*/{records.FILENAME}")):
        try:
            rec = records.read(path)
        except records.RecordError:
            continue
        if rec.status == records.FAILED and rec.error:
            message = str(rec.error.get("message") or "").strip().splitlines()
            return (
                f"cell {path.parent.name} ({' '.join(map(str, rec.overrides))}) failed with "
                f"{rec.error.get('type')}: {message[0] if message else 'no message'}"
            )
    return None


def _refusal(args: list[str], folder: Path) -> str | None:
    """The line the campaign's planning refuses ``args`` with, or None when it plans them."""
    from jobs import lifeline

    p = subprocess.run(
        [sys.executable, "-m", "campaign", "-m", *args, "platform.dry_run=true", f"hydra.sweep.dir={folder}"],
        env=lifeline.child_env(),
        capture_output=True,
        text=True,
    )
    if p.returncode == 0:
        return None
    said = [line for line in p.stderr.splitlines() if line.startswith("campaign: ")]
    line = said[-1] if said else (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
    return line.removeprefix("campaign: ").removesuffix("; nothing was run")


def why(args: list[str], folder: Path) -> str:
    """Why ``python -m campaign -m <args> hydra.sweep.dir=<folder>`` did not end well, in one clause."""
    return (
        _failed_cell(folder)
        or _refusal(args, folder)
        or "the campaign stopped before any cell wrote its record (its output above says where)"
    )
