"""Benchmark: does each command of README.md run in the time written beside it?

    python -m benchmarks.readme_times [--list] [--only TEXT] [--skip TEXT]

Prints first how fast this machine is (``benchmarks.machine``: a fresh Python's import of TensorFlow, in
CPU-s), then runs, one after the other, every command of README.md's ``sh`` blocks that runs here as written:
``python -m ...`` in a new empty folder (what a user's working folder is), ``make demo`` in the checkout.
Left out, and listed as such: ``make test`` (the suite: ``.ci/run`` times it), dry runs, and commands that
name a placeholder or another machine's paths (``<date>``, ``$USER``, ``/data/...``, ``/mnt/...``, a
Slurm site's preset). Prints, per command, its wall time, the part of it its cells waited for other
campaigns' device locks (``device_lock_wait_s`` of the records it wrote), its exit status and the README's
comment, so that each time can be compared with what the README says; a command whose comment gives no
time (``# 63 s``, ``# 11 to 17 min``) is marked. Datasets an earlier run generated are found and not
generated again: purge them first (``python -m campaign.cache purge datasets --root /var/tmp``) to time a
newcomer's first run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import machine

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TIMED = re.compile(r"\d+(?:\.\d+)?\s*(?:s|min)\b")  # a comment that says how long: "63 s", "11 to 17 min"
# what runs only elsewhere or after another command: placeholders, another machine's paths, a Slurm site,
# the full-scale study, dry runs, and compare's two studies of a file system before and after a change
ELSEWHERE = (
    "<",
    "$",
    "/data/",
    "/mnt/",
    "/cfs/",
    "platform=tegner",
    "--scale full",
    "platform.dry_run",
    "paper-A",
)
KEPT = ("multirun", "outputs")  # where the checkout's own commands (make demo) write their campaigns


@dataclass(frozen=True)
class Command:
    line: str  # as written, without its comment
    comment: str  # what the README says of it

    @property
    def timed(self) -> bool:
        return bool(TIMED.search(self.comment))

    @property
    def runs_here(self) -> str | None:
        """Why it is left out (None: it runs here as written)."""
        if self.line.startswith("make test"):
            return "the suite: .ci/run times it"
        hit = next((m for m in ELSEWHERE if m in self.line), None)
        return f"names {hit!r}" if hit else None


def commands(text: str) -> list[Command]:
    """The commands of ``text``'s ``sh`` blocks, with their comments."""
    out, inside = [], False
    for raw in text.splitlines():
        if raw.startswith("```"):
            inside = raw.strip() in ("```sh", "```bash")
            continue
        if not inside or not raw.startswith(("python -m ", "make ")):
            continue
        line, _, comment = raw.partition("#")
        out.append(Command(line.strip(), comment.strip()))
    return out


def _records_since(folders: list[Path], t0: float) -> list[Path]:
    return [p for d in folders if d.is_dir() for p in d.rglob("record.json") if p.stat().st_mtime >= t0 - 1]


def _lock_wait(paths: list[Path]) -> float:
    total = 0.0
    for p in paths:
        try:
            total += float(json.loads(p.read_text())["provenance"].get("device_lock_wait_s") or 0)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a record this version cannot read: its wait is not counted
    return total


def run(cmd: Command) -> dict:
    """Run ``cmd`` as a user would; its wall time, lock wait and exit status."""
    argv = shlex.split(cmd.line)
    if argv[0] == "python":
        argv[0] = sys.executable
    cwd = ROOT if argv[0] == "make" else Path(tempfile.mkdtemp(prefix="readme-times-"))
    env = {**os.environ, "PYTHON": sys.executable} if argv[0] == "make" else dict(os.environ)
    t0 = time.time()
    p = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.time() - t0
    written = _records_since([cwd] if cwd != ROOT else [ROOT / k for k in KEPT], t0)
    tail = p.stderr.strip().splitlines()[-1:] if p.returncode else []
    return {"wall_s": wall, "lock_wait_s": _lock_wait(written), "rc": p.returncode, "error": " ".join(tail)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.readme_times", description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="list the commands and what is left out; run none")
    ap.add_argument("--only", action="append", default=[], help="run only commands containing TEXT")
    ap.add_argument("--skip", action="append", default=[], help="leave out commands containing TEXT")
    args = ap.parse_args(argv)
    failed = 0
    if not args.list:  # how fast this machine is, beside the times the README's machines gave
        print(machine.yardstick(), flush=True)
    print(f"{'measured':>9} {'lock wait':>9} {'rc':>3}  command  # README")
    for cmd in commands(README.read_text()):
        why = cmd.runs_here or next((f"--skip {s}" for s in args.skip if s in cmd.line), None)
        if not why and args.only and not any(o in cmd.line for o in args.only):
            why = "not --only"
        if why or args.list:
            print(f"{'-':>9} {'-':>9} {'-':>3}  {cmd.line}  # {cmd.comment}  [{why or 'would run'}]")
            continue
        r = run(cmd)
        failed += r["rc"] != 0
        notes = [r["error"]] if r["error"] else []
        notes += [] if cmd.timed else ["no time written"]
        print(
            f"{r['wall_s']:8.0f}s {r['lock_wait_s']:8.0f}s {r['rc']:>3}  {cmd.line}  # {cmd.comment}"
            + (f"  [{'; '.join(notes)}]" if notes else ""),
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
