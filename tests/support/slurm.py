"""The test cluster (tests/slurm/up.sh) and what a campaign on it booked."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

NODES = 2  # the test cluster: two nodes, each a slurmd in its own network and UTS namespace


def nodes_up() -> int:
    """Nodes of the Slurm cluster that is up and serving (0: none)."""
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=20
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return len(
        {
            line.split()[0]
            for line in out.splitlines()
            if any(s in line for s in ("idle", "mixed", "allocated", "completing"))
        }
    )


def submitted(sweep: Path) -> dict[int, list[str]]:
    """Each cell's Slurm job ids, in the order the campaign submitted them (its submitted.json)."""
    book = json.loads((sweep / "submitted.json").read_text())
    return {int(k): [j["job_id"] for j in v["jobs"]] for k, v in book["cells"].items()}
