"""The processes a command leaves: those of its session, and a SIGKILL to the command alone."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def session_processes(sid: int) -> list[tuple[int, str]]:
    """Live processes of session ``sid`` (the campaign was started as its leader)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append((int(d.name), cmd))
    return out


def kill_alone(proc, within_s: float = 30.0) -> list[tuple[int, str]]:
    """SIGKILL to ``proc`` alone (started as a session leader, so nothing of it runs its clean-up), then
    the processes of its session still alive after ``within_s``; each of those is killed too, so that a
    failing test leaves nothing behind."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + within_s
    while session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = session_processes(proc.pid)
    for pid, _ in left:
        os.kill(pid, signal.SIGKILL)
    return left


def signal_state(pid: int) -> str:
    """What a process that outlived a signal was doing: its signal masks (blocked, ignored, caught, as hex
    sets of /proc/PID/status) and each thread's name, state and kernel wait channel; for a failure's
    message."""
    proc = Path(f"/proc/{pid}")
    try:
        status = (proc / "status").read_text().splitlines()
    except OSError as e:
        return f"pid {pid}: {e}"
    lines = [
        line
        for line in status
        if line.startswith(("Name:", "State:", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))
    ]
    for task in sorted(proc.glob("task/*"), key=lambda p: int(p.name)):
        try:
            name = (task / "comm").read_text().strip()
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            wchan = (task / "wchan").read_text().strip()
        except OSError:
            continue
        lines.append(f"  thread {task.name} {name} {state} {wchan}")
    return "\n".join(lines)


def working_under(folder) -> list[int]:
    """Processes whose working folder lies under ``folder`` (an embedded object-store server runs in its
    own)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(folder)):
                out.append(int(pid))
        except OSError:
            continue
    return out
