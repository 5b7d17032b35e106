"""``python -m campaign.status [campaign folder]``: every cell's state, from its record and from Slurm.

States: completed, failed (with the cell's error), pending (with Slurm's reason), running (with the
node), cancelled, timeout, node_fail, out_of_memory, ... (Slurm's word, lower-cased), and missing
(planned, never submitted nor run). Exit status 0 when nothing failed, 1 otherwise. Without a folder:
multirun/latest; a paper study's folder and a capacity search's list each of their campaigns.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class CellStatus:
    num: int
    overrides: str
    state: str
    job_id: str = ""
    detail: str = ""


FAILED_STATES = {
    "failed",
    "cancelled",
    "timeout",
    "node_fail",
    "out_of_memory",
    "preempted",
    "boot_fail",
    "deadline",
    "revoked",
    "ended",
    "missing",
    "unreadable",
}


def collect(sweep_dir: Path) -> list[CellStatus]:
    """The status of every cell of a sweep (records first; Slurm for cells without one)."""
    from campaign.slurm import sacct, submit
    from jobs import plan as plans
    from jobs import records

    plan = [{"num": c.num, "dir": c.dir, "overrides": c.overrides} for c in plans.read(sweep_dir)]
    jobs = submit.latest_jobs(sweep_dir)
    pending = {c["num"]: jobs[c["num"]] for c in plan if c["num"] in jobs}
    out: list[CellStatus] = []
    need_slurm = []
    recs = {}
    unreadable = {}
    for c in plan:
        path = sweep_dir / c["dir"] / records.FILENAME
        if os.path.lexists(path):  # a link or FIFO there is reported unreadable by records.read
            try:
                recs[c["num"]] = records.read(path)
            except records.RecordError as e:
                unreadable[c["num"]] = str(e)
        if (c["num"] not in recs or recs[c["num"]].status != records.COMPLETED) and c["num"] in pending:
            need_slurm.append(pending[c["num"]])
    slurm, _ = sacct.states(need_slurm)
    for c in plan:
        num, ov = c["num"], " ".join(c["overrides"])
        job = jobs.get(num, "")
        rec = recs.get(num)
        st = slurm.get(job)
        if rec is not None and rec.status == records.COMPLETED:
            out.append(CellStatus(num, ov, "completed", job, f"{len(records.runs_of(rec))} measured runs"))
        elif st is not None and not st.terminal and st.state != "UNKNOWN":
            # a re-submitted cell that failed before is running again: Slurm is newer than the record
            detail = st.reason if st.state == "PENDING" else st.node
            out.append(CellStatus(num, ov, st.state.lower(), job, detail))
        elif rec is not None:
            # Slurm's end (cancelled, timeout, ...) says more than what the cell recorded as it went down
            # (e.g. a worker killed by the same scancel: BrokenProcessPool)
            state = (
                st.state.lower()
                if st is not None and st.terminal and st.state.lower() in FAILED_STATES
                else "failed"
            )
            out.append(
                CellStatus(
                    num, ov, state, job, f"{rec.error['type']}: {rec.error['message']}" if rec.error else ""
                )
            )
        elif st is not None and st.terminal:
            log = sweep_dir / submit.SUBMITIT_DIR / f"{job}_0_log.out"
            detail = f"exit {st.exit_code}" + (f"; log {log}" if log.exists() else "")
            out.append(CellStatus(num, ov, st.state.lower(), job, detail))
        elif num in unreadable:
            out.append(CellStatus(num, ov, "unreadable", job, unreadable[num]))
        elif job:
            out.append(CellStatus(num, ov, "unknown", job, "Slurm does not know this job (yet)"))
        elif (sweep_dir / c["dir"]).is_dir():
            out.append(
                CellStatus(num, ov, "missing", "", "started but wrote no record: killed, or still running")
            )
        else:
            out.append(CellStatus(num, ov, "missing", "", "never submitted nor run"))
    return out


def render(cells: list[CellStatus]) -> str:
    counts: dict[str, int] = {}
    for c in cells:
        counts[c.state] = counts.get(c.state, 0) + 1
    lines = [", ".join(f"{n} {s}" for s, n in sorted(counts.items()))]
    w = max(len(c.overrides) for c in cells) if cells else 0
    for c in cells:
        lines.append(f"#{c.num:<3} {c.state:<10} {c.job_id:<10} {c.overrides:<{w}}  {c.detail}".rstrip())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m campaign.status", description=__doc__.split("\n")[0])
    p.add_argument(
        "folder",
        type=Path,
        nargs="?",
        default=Path("multirun") / "latest",
        help="the campaign folder: a sweep's (multirun/<date>/<time>), a paper study's or a capacity "
        "search's (default multirun/latest, the newest campaign under multirun/)",
    )
    args = p.parse_args(argv)
    from jobs import plan

    try:
        parts = _parts(args.folder)
    except OSError as e:
        print(f"campaign.status: {e}", file=sys.stderr)
        return 2
    if not os.path.lexists(args.folder / plan.FILENAME) and parts is None:
        print(f"campaign.status: {_not_a_campaign(args.folder)}", file=sys.stderr)
        return 2
    failed = False
    try:
        for name, folder in [("", args.folder)] if parts is None else parts:
            if parts is not None:
                print(f"== {name}")
            if not os.path.lexists(folder / plan.FILENAME):
                print("not started: no plan.json yet")
                failed = True
                continue
            cells = collect(folder)
            print(render(cells))
            failed |= any(c.state in FAILED_STATES for c in cells)
    except (plan.PlanError, OSError) as e:  # OSError: submitted.json is a FIFO, a link, or unreadable
        print(f"campaign.status: {e}", file=sys.stderr)
        return 2
    return 1 if failed else 0


def _not_a_campaign(folder: Path) -> str:
    """Why ``folder`` is not one (one line): what a campaign folder holds."""
    what = (
        "does not exist"
        + (" (no campaign ran from this folder yet)" if folder == Path("multirun", "latest") else "")
        if not os.path.lexists(folder)
        else "is not a folder"
        if not folder.is_dir()
        else "has no plan.json (a sweep's), paper.txt (a paper study's) "
        "nor capacity.txt (a capacity search's)"
    )
    hint = "; give the campaign folder: python -m campaign.status multirun/<date>/<time>"
    return f"{folder} {what}: not a campaign folder{hint}"


# each tier's campaigns of a capacity search (campaign.capacity)
ROUNDS = ("storage_rate", "cpu_rate", "prove")


def _parts(folder: Path) -> list[tuple[str, Path]] | None:
    """(name, its sweep folder) of a paper study's grids (its paper.txt, in the study's order) or of a
    capacity search's campaigns (its capacity.txt: each tier's rounds), or None for any other folder; raises
    OSError naming the marker when it is there but not a file that can be read."""
    from campaign.capacity.command import MARK

    text = _marker(folder / "paper.txt")
    if text is not None:
        names = [
            line.split(":", 1)[0]
            for line in text.splitlines()
            if ":" in line and "=" not in line.split(":", 1)[0]
        ]
        return [(n, folder / n) for n in names]
    text = _marker(folder / MARK)
    if text is None:
        return None
    tiers = next((line.split("=", 1)[1] for line in text.splitlines() if line.startswith("tiers=")), "")
    return [(f"{t}/{r}", folder / t / r) for t in tiers.split(",") if t for r in ROUNDS]


def _marker(path: Path) -> str | None:
    """The text of a study's marker file, or None when there is none."""
    from jobs import jsonfiles

    try:
        return jsonfiles.read_text(path)  # a FIFO planted there is refused, never waited on
    except (FileNotFoundError, NotADirectoryError):
        return None
    except UnicodeDecodeError:
        raise OSError(f"{path} is not a study's text") from None


if __name__ == "__main__":
    from jobs.lifeline import exit_as_python

    exit_as_python(lambda: sys.exit(main()))
