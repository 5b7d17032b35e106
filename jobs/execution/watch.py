"""How a multi-task run watches its tasks (``jobs.execution.tasks``): the hand-over files in the run's
folder, the tasks' errors and heartbeats while the run waits, and the end of every task when it fails.

A task whose heartbeat (``beats-<nonce>/<rank>``) stops moving for the run's silence has stopped: its
node failed or it hangs. The run fails naming it and its node, without waiting for Slurm to notice the
node (its SlurmdTimeout: minutes on most sites) or for the run's limit."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

READY_TIMEOUT_S = 600.0  # longest a task may take to build its pipeline (TensorFlow's import included)
CHECK_EVERY_S = 0.25  # how often a waiting run looks at its tasks' errors and heartbeats
BEAT_EVERY_S = 0.5  # how often a task writes its heartbeat


class TaskError(RuntimeError):
    """A task of a multi-task run failed; the message names its rank, its node and its error."""


def remove_beats(beats: Path) -> None:
    """The run's beats folder, gone (a task still ending may write a last beat while it goes)."""
    from jobs import owned

    owned.remove_handover(beats)


def end(procs: list, slurm: bool, watch: Watch) -> None:
    """No task outlives the run. A Slurm step is cancelled through slurmctld (SIGKILL to every task it can
    reach, a stopped one included) while srun is ended; local tasks are ended directly.

    scancel and srun are ended side by side, not one after the other: with a node gone, scancel waits for
    that node's answer until Slurm's MessageTimeout (10 s by default) although the live nodes' tasks are
    killed at once, and srun waits for the same node until it is killed."""
    if all(p.poll() is not None for p in procs):
        return
    cancel = None
    if slurm and watch.step_id:
        with contextlib.suppress(OSError):
            cancel = subprocess.Popen(
                ["scancel", "--signal=KILL", watch.step_id],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
    for p in procs:
        if p.poll() is None:
            p.terminate()  # srun passes SIGTERM on to its tasks
    grace = time.monotonic() + (10 if slurm else 30)
    for p in procs:
        try:
            p.wait(max(0.1, grace - time.monotonic()))
        except subprocess.TimeoutExpired:  # srun waiting on a node that is gone
            p.kill()
            p.wait()
    if cancel is not None:  # slurmctld has the cancel; its wait for a dead node's answer is not the run's
        try:
            cancel.wait(max(0.1, grace - time.monotonic()))
        except subprocess.TimeoutExpired:
            cancel.kill()
            cancel.wait()


class Watch:
    """Watches a run's tasks while it waits: a task that failed (its own error, or srun's word), ended
    with no result, or fell silent (its heartbeat stopped) raises TaskError naming its rank and node."""

    def __init__(self, procs: list, n: int, folder: Path, nonce: str, silence_s: float, err: Path | None):
        self.procs, self.n, self.folder, self.nonce, self.silence_s, self.err = (
            procs,
            n,
            folder,
            nonce,
            silence_s,
            err,
        )
        self.t0 = time.monotonic()
        self.beats: dict[int, tuple[str, float]] = {}  # rank -> (last beat seen, when it changed; monotonic)
        self.hosts: dict[int, str] = {}
        self.step_id: str | None = None  # <job>.<step> of a Slurm step, once a task has said

    def named(self, ranks) -> str:
        """``[1, 3] (on n2)``: ranks, with the nodes they ran on where known."""
        hosts = sorted({self.hosts[r] for r in ranks if r in self.hosts})
        return f"{list(ranks)}" + (f" (on {', '.join(hosts)})" if hosts else "")

    def until(self, done, deadline: float, late_message, waiting_for: str) -> None:
        """Wait until ``done()``, checking the tasks every CHECK_EVERY_S; before the barrier (waiting for
        ``ready``) a task that ended at all has failed."""
        checked = 0.0
        while not done():
            if time.monotonic() - checked >= CHECK_EVERY_S:
                self.check(before_ready=waiting_for == "ready")
                checked = time.monotonic()
            if time.monotonic() > deadline:
                self.check_errors()  # a task's own error first
                late = [
                    r
                    for r in range(self.n)
                    if not (self.folder / file_name(waiting_for, self.nonce, r)).exists()
                ]
                raise TaskError(late_message(late))
            time.sleep(0.02)

    def check(self, before_ready: bool = False) -> None:
        self.check_errors()  # a task that failed with its own error fails the run at once
        codes = [p.poll() for p in self.procs]
        if any(c not in (None, 0) for c in codes):
            self.check_ended()
        if before_ready and any(c is not None for c in codes):
            self.check_ended()
            raise TaskError(f"the tasks ended (exit status {codes}) before all were ready")
        self._beats()

    def _beats(self) -> None:
        now = time.monotonic()
        for r in range(self.n):
            if (self.folder / file_name("result", self.nonce, r)).exists():
                continue  # done: its beat stops
            try:
                text = (self.folder / file_name("beats", self.nonce) / str(r)).read_text()
                host, count, step_id = text.split()
            except (OSError, ValueError):
                host = count = step_id = None
            if count is not None:
                self.hosts[r] = host
                if step_id != "-":
                    self.step_id = step_id
                if self.beats.get(r, (None,))[0] != count:
                    self.beats[r] = (count, now)
            last = self.beats.get(r, (None, self.t0))[1]
            if now - last > self.silence_s:
                where = f" on {self.hosts[r]}" if r in self.hosts else ""
                said = ""
                if r in self.hosts and self.err is not None:
                    from jobs import nodes

                    state = nodes.slurm_state(self.hosts[r])
                    said = f"; Slurm has {self.hosts[r]} as {state}" if state else ""
                what = "wrote no heartbeat" if r not in self.beats else "stopped its heartbeat"
                raise TaskError(
                    f"task {r}{where} {what} for {self.silence_s:.0f} s (platform.task_silence_s): its node "
                    f"failed or the task hangs{said}"
                )

    def check_errors(self) -> None:
        """Raise TaskError naming the first task that failed with its own error; a failed read, the
        ReadFailed of a run in one process, naming the task (the runner names the tier and the run)."""
        errors = sorted(
            (int(f.stem.rsplit("-", 1)[1]), f) for f in self.folder.glob(file_name("error", self.nonce, "*"))
        )
        if errors:
            rank, f = errors[0]
            e = json.loads(f.read_text())
            where = f" (at {e['where']})" if e.get("where") else ""
            on = f" on {e['host']}" if e.get("host") else ""
            if e["type"] == "ReadFailed":
                from jobs.data.read_errors import ReadFailed

                raise ReadFailed(f"task {rank}{on}: {e['message']}")
            raise TaskError(f"task {rank}{on} failed: {e['type']}: {e['message']}{where}")

    def check_ended(self) -> None:
        """Raise TaskError naming the first task that failed (its own error when it wrote one; else the
        node srun names; else its exit status)."""
        self.check_errors()
        if self.err is not None and self.procs[0].poll() not in (None, 0):
            from jobs import nodes

            failed = nodes.srun_failure(self.err)
            if failed:
                raise TaskError(
                    f"task {failed[1]} on {failed[0]} ended: {failed[2]} (srun ended the run's step, "
                    f"exit status {self.procs[0].returncode})"
                )
        for r in range(self.n):
            code = self.procs[r].returncode if len(self.procs) == self.n else self.procs[0].returncode
            if code is not None and (
                code != 0 or not (self.folder / file_name("result", self.nonce, r)).exists()
            ):
                raise TaskError(f"task {self.named([r])} ended with exit status {code} and no result")


def file_name(kind: str, nonce: str, rank: int | str | None = None) -> str:
    """A hand-over file of run ``nonce``: go-<nonce>, ready-<nonce>-<rank>, result-<nonce>-<rank>.json,
    error-..., abort-<nonce>, step-<nonce>.err (srun's stderr), beats-<nonce>/<rank> (the heartbeats)."""
    base = f"{kind}-{nonce}" + ("" if rank is None else f"-{rank}")
    if kind == "step":
        return base + ".err"
    return base + ".json" if kind in ("result", "error") else base


def heartbeat(out: Path, nonce: str, rank: int, node: str) -> None:
    """Every BEAT_EVERY_S: write this task's node, a count and its Slurm step (``beats-<nonce>/<rank>``);
    end the process at once when the runner has given up on the run (``abort-<nonce>``)."""
    import threading

    step = (
        f"{os.environ['SLURM_JOB_ID']}.{os.environ['SLURM_STEP_ID']}"
        if os.environ.get("SLURM_JOB_ID") and os.environ.get("SLURM_STEP_ID")
        else "-"
    )
    # in the run's beats folder, which the runner makes and removes: a task that outlives its run writes
    # nothing
    beats, abort = out / file_name("beats", nonce), out / file_name("abort", nonce)
    beat, part = beats / str(rank), beats / f".{rank}"

    def loop() -> None:
        count = 0
        while True:
            if abort.exists():
                os._exit(3)
            count += 1
            with contextlib.suppress(OSError):
                part.write_text(f"{node} {count} {step}")
                part.replace(beat)
            time.sleep(BEAT_EVERY_S)

    threading.Thread(target=loop, name="task-heartbeat", daemon=True).start()
