"""``python -m campaign.status <sweep folder>``: every cell's state, from its record and from Slurm.

States: completed, failed (with the cell's error), pending (with Slurm's reason), running (with the
node), cancelled, timeout, node_fail, out_of_memory, ... (Slurm's word, lower-cased), and missing
(planned, never submitted nor run). Exit status 0 when nothing failed, 1 otherwise.
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


FAILED_STATES = {"failed", "cancelled", "timeout", "node_fail", "out_of_memory", "preempted", "boot_fail",
                 "deadline", "revoked", "ended", "missing", "unreadable"}


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
            out.append(CellStatus(num, ov, "completed", job, f"{sum(not r['warmup'] for r in rec.runs)} measured runs"))
        elif st is not None and not st.terminal and st.state != "UNKNOWN":
            # a re-submitted cell that failed before is running again: Slurm is newer than the record
            detail = st.reason if st.state == "PENDING" else st.node
            out.append(CellStatus(num, ov, st.state.lower(), job, detail))
        elif rec is not None:
            # Slurm's end (cancelled, timeout, ...) says more than what the cell recorded as it went down
            # (e.g. a worker killed by the same scancel: BrokenProcessPool)
            state = st.state.lower() if st is not None and st.terminal and st.state.lower() in FAILED_STATES else "failed"
            out.append(CellStatus(num, ov, state, job, f"{rec.error['type']}: {rec.error['message']}" if rec.error else ""))
        elif st is not None and st.terminal:
            log = sweep_dir / submit.SUBMITIT_DIR / f"{job}_0_log.out"
            detail = f"exit {st.exit_code}" + (f"; log {log}" if log.exists() else "")
            out.append(CellStatus(num, ov, st.state.lower(), job, detail))
        elif num in unreadable:
            out.append(CellStatus(num, ov, "unreadable", job, unreadable[num]))
        elif job:
            out.append(CellStatus(num, ov, "unknown", job, "Slurm does not know this job (yet)"))
        elif (sweep_dir / c["dir"]).is_dir():
            out.append(CellStatus(num, ov, "missing", "", "started but wrote no record: killed, or still running"))
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
    p.add_argument("folder", type=Path, help="the sweep folder (multirun/<date>/<time>)")
    args = p.parse_args(argv)
    from jobs import plan

    try:
        grids = _paper_grids(args.folder)
    except OSError as e:
        print(f"campaign.status: {e}", file=sys.stderr)
        return 2
    if not os.path.lexists(args.folder / plan.FILENAME) and grids is None:
        print(f"campaign.status: {args.folder} has no plan.json (nor a paper study's paper.txt): not a campaign "
              "folder", file=sys.stderr)
        return 2
    failed = False
    try:
        for name, folder in [("", args.folder)] if grids is None else grids:
            if grids is not None:
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


def _paper_grids(folder: Path) -> list[tuple[str, Path]] | None:
    """(grid, its sweep folder) of a paper study's folder, in the study's order (its paper.txt), or None;
    raises OSError naming paper.txt when it is there but not a file that can be read."""
    from jobs import jsonfiles

    try:
        text = jsonfiles.read_text(folder / "paper.txt")  # a FIFO planted there is refused, never waited on
    except (FileNotFoundError, NotADirectoryError):
        return None
    except UnicodeDecodeError:
        raise OSError(f"{folder / 'paper.txt'} is not a paper study's text") from None
    names = [line.split(":", 1)[0] for line in text.splitlines() if ":" in line and "=" not in line.split(":", 1)[0]]
    return [(n, folder / n) for n in names]


if __name__ == "__main__":
    sys.exit(main())
