"""What Slurm says about a campaign's jobs: sacct for every state, squeue for why a job waits.

Hand-written rather than submitit's ``SlurmInfoWatcher`` (which runs ``sacct -o JobID,State,NodeList``):
the progress line and ``campaign.status`` also need each job's exit code and, for a pending job, squeue's
reason, and a cluster without accounting still answers through squeue alone; ``campaign.status`` reads the
states in a process that holds no submitit job of the campaign's.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
    "ENDED",
}


@dataclass(frozen=True)
class JobState:
    job_id: str  # "12" or "12_3" (array task)
    state: str  # Slurm's state word: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    exit_code: str = ""
    node: str = ""
    reason: str = ""  # squeue's reason for a pending job

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


def _expand(job_id: str) -> list[str]:
    """'12_[0-2,5]' -> ['12_0', '12_1', '12_2', '12_5']; other ids unchanged."""
    m = re.fullmatch(r"(\d+)_\[([^\]]+)\]", job_id)
    if not m:
        return [job_id]
    out = []
    for part in m[2].split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        out += [f"{m[1]}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def parse_sacct(text: str) -> dict[str, JobState]:
    """Parse ``sacct -n -P -X -o JobID,State,ExitCode,NodeList`` output."""
    out: dict[str, JobState] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 4 or not parts[0]:
            continue
        state = parts[1].split()[0] if parts[1] else "UNKNOWN"  # "CANCELLED by 0" -> CANCELLED
        for jid in _expand(parts[0]):
            out[jid] = JobState(jid, state, parts[2], parts[3] if parts[3] != "None assigned" else "")
    return out


def parse_squeue(text: str) -> dict[str, JobState]:
    """Parse ``squeue -h -o %i|%T|%R`` output (squeue spells array tasks 12_3 as well)."""
    out: dict[str, JobState] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3:
            continue
        for jid in _expand(parts[0]):
            node = parts[2] if parts[1] == "RUNNING" else ""
            out[jid] = JobState(jid, parts[1], "", node, _bare(parts[2]) if parts[1] == "PENDING" else "")
    return out


def _bare(reason: str) -> str:
    """squeue's reason without the parentheses it puts around a pending job's: "Resources"."""
    return reason[1:-1] if reason.startswith("(") and reason.endswith(")") else reason


def _run(cmd: list[str]) -> str | None:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 else None


def states(job_ids: list[str]) -> tuple[dict[str, JobState], bool]:
    """Current state of every job id; the flag says whether sacct answered (accounting works).

    Without sacct, squeue alone cannot tell a cancelled job from a finished one: such jobs come
    back as state "ENDED" once they leave the queue, and the caller decides by the cell's record.
    """
    if not job_ids:
        return {}, True
    arrays = sorted({j.split("_")[0] for j in job_ids})
    acct = _run(["sacct", "-n", "-P", "-X", "-j", ",".join(arrays), "-o", "JobID,State,ExitCode,NodeList"])
    found = parse_sacct(acct) if acct is not None else {}
    queue = _run(["squeue", "-h", "-j", ",".join(arrays), "-o", "%i|%T|%R"])
    queued = parse_squeue(queue) if queue is not None else {}
    out: dict[str, JobState] = {}
    for j in job_ids:
        s = found.get(j)
        q = queued.get(j)
        if q is not None and (s is None or not s.terminal):
            out[j] = JobState(j, q.state, s.exit_code if s else "", q.node, q.reason)
        elif s is not None:
            out[j] = s
        elif acct is None and queue is not None:
            out[j] = JobState(j, "ENDED", reason="left the queue; sacct unavailable")
        else:
            out[j] = JobState(j, "UNKNOWN")
    return out, acct is not None


# node states in which Slurm starts no job on a node (sinfo -t takes them as written here)
OUT_OF_SERVICE = "drain,drained,draining,down,fail,no_respond"


def parse_sinfo(text: str) -> list[str]:
    """Parse ``sinfo -h -N -o %N|%T|%E`` output: "n2 drained (Kill task failed)", "n1 idle, not
    responding" (sinfo's ``idle*``) for each node once, in sinfo's order (a node in two partitions is
    listed twice)."""
    out: list[str] = []
    for line in text.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) < 2 or not parts[0]:
            continue
        reason = parts[2].strip() if len(parts) > 2 and parts[2].strip() not in ("", "none") else ""
        state = parts[1].rstrip("*") + (", not responding" if parts[1].endswith("*") else "")  # idle*
        said = f"{parts[0]} {state}" + (f" ({reason})" if reason else "")
        if said not in out:
            out.append(said)
    return out


def out_of_service() -> list[str]:
    """The nodes Slurm starts no job on now (drained, down, not responding), each with the reason its
    administrator or Slurm gave: what a pending job's reason (Resources, ReqNodeNotAvail) does not name."""
    text = _run(["sinfo", "-h", "-N", "-t", OUT_OF_SERVICE, "-o", "%N|%T|%E"])
    return parse_sinfo(text) if text is not None else []
