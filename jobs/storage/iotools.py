"""The I/O benchmark tools behind the baselines: IOR where it is on PATH (clusters), fio otherwise.

Every call returns the measured MB/s together with the tool, its version and the exact command.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from jobs.storage import systools

MIB = 1024 * 1024
# the rate below which a tool's run counts as hung: far below any storage the tool measures (the modelled
# HDD's small random reads move about 10 MB/s), so only a tool that stopped is ended
SLOWEST_BPS = 1e6


@dataclass(frozen=True)
class Measured:
    mb_per_s: float  # decimal MB/s
    bytes: int  # bytes moved
    tool: str
    version: str
    command: str  # the exact command line, shell-quoted


def _version(tool: str) -> str:
    flag = "--version" if tool == "fio" else "-h"
    try:
        out = systools.run([tool, flag])
    except (OSError, systools.NoAnswer):
        return "unknown"
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[0].strip() if text else "unknown"


def tool() -> str:
    """The sequential-bandwidth tool to use: "ior" when on PATH, else "fio"; raises when neither is."""
    if shutil.which("ior"):
        return "ior"
    if shutil.which("fio"):
        return "fio"
    raise FileNotFoundError("neither ior nor fio is on PATH (Debian: apt-get install fio)")


def parse_fio(text: str, rw: str, with_flush: bool = False) -> tuple[float, int]:
    """(MB/s, bytes) of a fio JSON report (fio may print notes before the JSON).

    The time is the group's ``runtime`` (the slowest job); ``with_flush`` takes the single job's
    ``job_runtime`` instead, which includes the end_fsync that ``runtime`` leaves out.
    """
    data = json.loads(text[text.index("{") :])
    jobs = data["jobs"]
    nbytes = sum(j[rw]["io_bytes"] for j in jobs)
    runtime_ms = max((j.get("job_runtime") if with_flush else None) or j[rw]["runtime"] for j in jobs)
    if runtime_ms <= 0 or nbytes <= 0:
        raise RuntimeError(f"fio moved {nbytes} bytes in {runtime_ms} ms: nothing measured")
    return nbytes / (runtime_ms / 1000) / 1e6, nbytes


def parse_ior(summary: dict, operation: str) -> float:
    """Max bandwidth of ``operation`` from IOR's JSON summary (bwMaxMIB), in decimal MB/s."""
    for entry in summary.get("summary", []):
        if entry.get("operation") == operation:
            return float(entry["bwMaxMIB"]) * MIB / 1e6
    raise RuntimeError(f"IOR's summary has no {operation} entry")


def _run(cmd: list[str], cwd: Path, nbytes: int) -> str:
    """``cmd``'s output, within a limit that allows ``nbytes`` moved at ``SLOWEST_BPS``."""
    try:
        p = systools.run(cmd, cwd=cwd, timeout_s=systools.QUICK_S + nbytes / SLOWEST_BPS)
    except systools.NoAnswer as e:
        raise RuntimeError(str(e)) from None
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-500:]}")
    return p.stdout


def _safe_name(name: str) -> str:
    """A file name the tool chose itself: fio splits option values at ':' and cuts them at ';' or
    '#', so only plain names ever reach it (the folders above them go in as the working directory)."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"refusing to pass {name!r} to fio/IOR: not a plain file name")
    return name


def _shown(cwd: Path, cmd: list[str]) -> str:
    """The command as a user would retype it: change into its folder, then run it."""
    return f"cd {shlex.quote(str(cwd))} && {shlex.join(cmd)}"


def sequential(path: Path, size_bytes: int, rw: str, which: str | None = None) -> Measured:
    """Sequential 1 MiB write (flushed before the clock stops) or read of one file, bypassing the
    page cache (O_DIRECT; IOR -B), as Table I's IOR runs. The tool runs in ``path``'s folder and
    sees only its plain name, whatever characters the folder's path holds."""
    which = which or tool()
    cwd, name = path.parent, _safe_name(path.name)
    if which == "ior":
        with tempfile.TemporaryDirectory() as d:
            summary = Path(d) / "ior.json"
            cmd = [
                "ior",
                "-a",
                "POSIX",
                "-B",
                "-e",
                "-k",
                "-t",
                "1m",
                "-b",
                str(size_bytes),
                "-s",
                "1",
                "-i",
                "1",
                "-w" if rw == "write" else "-r",
                "-o",
                name,
                "-O",
                "summaryFormat=JSON",
                "-O",
                f"summaryFile={summary}",
            ]
            _run(cmd, cwd, size_bytes)
            mb = parse_ior(json.loads(summary.read_text()), rw)
        return Measured(mb, size_bytes, "ior", _version("ior"), _shown(cwd, cmd))
    cmd = [
        "fio",
        "--output-format=json",
        f"--name=seq{rw}",
        f"--filename={name}",
        f"--size={size_bytes}",
        f"--rw={rw}",
        "--bs=1M",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=16",
        "--invalidate=1",
    ]
    if rw == "write":
        cmd.append("--end_fsync=1")
    mb, nbytes = parse_fio(_run(cmd, cwd, size_bytes), rw, with_flush=rw == "write")
    return Measured(mb, nbytes, "fio", _version("fio"), _shown(cwd, cmd))


def link_farm(files: list[str], folder: Path, jobs: int) -> list[Path]:
    """Hard links of ``files`` split round-robin into one folder per reader (same inodes, same page
    cache), so ``jobs`` fio readers share the files as ``jobs`` map threads do. At most one reader per
    file: fio refuses a reader without one, so fewer files than ``jobs`` give fewer folders."""
    dirs = [folder / f"job{k}" for k in range(max(1, min(jobs, len(files))))]
    for d in dirs:
        d.mkdir(parents=True)
    for i, f in enumerate(files):
        os.link(f, dirs[i % jobs] / f"{i:07d}{Path(f).suffix}")
    return dirs


def small_files(dirs: list[Path], bs: str = "4k") -> Measured:
    """fio reading every file of ``dirs`` whole, buffered (as read_file), one job per folder; fio
    evicts each file first (invalidate=1). The folders share a parent (``link_farm``'s), in which fio
    runs, so fio sees only their plain names. ``bs``: bytes per read call (4k for image files; the
    TFRecord reader's 256k for shards)."""
    cwd = dirs[0].parent
    if any(d.parent != cwd for d in dirs):
        raise ValueError("small_files wants sibling folders (link_farm's)")
    cmd = [
        "fio",
        "--output-format=json",
        "--group_reporting",
        "--rw=read",
        f"--bs={bs}",
        "--ioengine=psync",
        "--direct=0",
        "--invalidate=1",
        "--file_service_type=sequential",
        "--openfiles=8",
    ]
    for k, d in enumerate(dirs):
        cmd += [f"--name=j{k}", f"--opendir={_safe_name(d.name)}"]
    listed = sum(f.stat().st_size for d in dirs for f in d.iterdir())
    mb, nbytes = parse_fio(_run(cmd, cwd, listed), "read")
    return Measured(mb, nbytes, "fio", _version("fio"), _shown(cwd, cmd))
