"""Nothing waits for ever, and an interrupt is one line: a sweep interrupted with Ctrl-C or SIGTERM ends
with one line naming how to resume and leaves no half-written record, a signal during TensorFlow's
iteration waits for the batch to end, and a wait for a device lock ends at its limit, naming the holder
as it goes. Real processes and signals.

Each test reproduces a failure found by trying the tool as a new user (issue #10) and fails on the code
before the fix.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.commands import python_env, start_module
from support.files import make_jpegs


@pytest.mark.cells
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_sweep_ends_in_one_line_naming_its_folder_and_leaves_no_record(tmp_path, sig):
    """Ctrl-C deadlocked with workload.read_delay_ms > 0; SIGINT printed a traceback, SIGTERM nothing.
    Either ends the sweep with one line that names its folder (to resume in), and no half-done record."""
    make_jpegs(tmp_path / "data", 32)
    out = tmp_path / "sweep"
    proc = start_module(
        "campaign",
        "-m",
        "workload=microbench",
        "threads=2",
        "repeats=500",
        "warmup=0",
        "batch_size=4",
        "workload.read_delay_ms=3",
        "dataset.source=folder",
        f"dataset.path={tmp_path / 'data'}",
        f"storage.root={tmp_path}",
        f"hydra.sweep.dir={out}",
        cwd=tmp_path,
        env=python_env(TF_CPP_MIN_LOG_LEVEL="3"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "run 2/500" not in "".join(
            p.read_text() for p in out.glob("0/*.log")
        ):
            time.sleep(0.3)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)  # old code: hung here in 2 of 5 tries
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err[-3000:]
    # TensorFlow prints its own start-up lines when imported; the campaign ends with exactly one line
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and sum(line.startswith("campaign:") for line in lines) == 1, err[-3000:]
    assert f"interrupted by {signal.Signals(sig).name}" in lines[-1] and f"hydra.sweep.dir={out}" in lines[-1]
    assert not (out / "0" / "record.json").exists()


@pytest.mark.cells
def test_a_signal_ends_a_cell_within_seconds_while_a_batch_takes_minutes(tmp_path):
    """A batch of 4 images at 1 thread, each read 30 s late (a store that stopped answering; an AlexNet step
    on a busy CPU takes as long): a signal waited for the batch, up to 2 min, deaf to SIGTERM in the C++
    iterator meanwhile. The batch is fetched on a helper thread, so the campaign ends within seconds, in one
    line, with no record, and its process does not wait for the helper."""
    make_jpegs(tmp_path / "data", 8)
    out = tmp_path / "sweep"
    proc = start_module(
        "campaign",
        "-m",
        "workload=microbench",
        "threads=1",
        "repeats=1",
        "warmup=0",
        "batch_size=4",
        "workload.read_delay_ms=30000",
        "dataset.source=folder",
        f"dataset.path={tmp_path / 'data'}",
        f"storage.root={tmp_path}",
        f"hydra.sweep.dir={out}",
        cwd=tmp_path,
        env=python_env(TF_CPP_MIN_LOG_LEVEL="3"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _until_idle_in_its_cell(proc.pid, out / "0", time.monotonic() + 180)  # in the first batch's delays
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=100)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    # the first batch alone needs 120 s of reads: ending before half of it proves the wait was cut short
    assert took < 60, took
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and sum(line.startswith("campaign:") for line in lines) == 1, err[-3000:]
    assert "interrupted by SIGTERM" in lines[-1]
    assert not (out / "0" / "record.json").exists()


def _until_idle_in_its_cell(pid: int, cell: os.PathLike, deadline: float) -> None:
    """Wait until the campaign ``pid`` runs its cell (its folder has a log) and has used no CPU for a second:
    TensorFlow is imported and the pipeline built, and the process waits in the run's reads. (The run logs
    nothing before it ends.)"""

    def cpu() -> int:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])  # utime + stime, clock ticks

    last, still = -1, 0
    while time.monotonic() < deadline and still < 2:
        time.sleep(0.5)
        now = cpu()
        still = still + 1 if now == last and list(Path(cell).glob("*.log")) else 0
        last = now


def test_a_call_deaf_to_signals_is_left_on_its_helper_and_the_wait_ends_at_once():
    """``interrupts.waiting``: the main thread waits while the call runs on a helper; a signal raises within
    a fraction of a second though the call (here a wait no signal ends) goes on, and it is marked abandoned;
    the next call gets a helper of its own."""
    import threading

    from jobs import interrupts

    old = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    interrupts.install()
    never = threading.Event()
    try:
        assert interrupts.waiting(sum, [1, 2, 3]) == 6 and not interrupts.abandoned()
        with pytest.raises(ZeroDivisionError):
            interrupts.waiting(lambda: 1 / 0)  # the helper's exception, raised in the caller
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
        with interrupts.deferred(), pytest.raises(interrupts.Interrupted):
            interrupts.waiting(never.wait)
        assert interrupts.abandoned()
        assert interrupts.waiting(sum, [4]) == 4  # a new helper
    finally:
        never.set()
        signal.signal(signal.SIGTERM, old[0])
        signal.signal(signal.SIGINT, old[1])


def test_the_helper_does_not_keep_what_a_call_returned():
    """``interrupts.waiting`` hands the call's value to the caller and keeps nothing of it: a run's last batch
    is freed when the run lets it go (a helper that held it until its next call kept a Grain batch's shared
    memory, 38 MB a task and run, in /dev/shm until the campaign ended)."""
    import gc
    import weakref

    from jobs import interrupts

    class Batch:
        pass

    batch = interrupts.waiting(Batch)
    gone = weakref.ref(batch)
    del batch
    for _ in range(100):  # the helper lets go of it just after it hands it over
        gc.collect()
        if gone() is None:
            break
        time.sleep(0.01)
    assert gone() is None


def test_a_signal_that_lands_inside_a_finalizer_is_raised_after_it_not_lost():
    """Python ignores what a ``__del__`` raises: a Ctrl-C that arrived while TensorFlow's garbage ran its
    finalizer was lost, and the campaign ended with status 0 (a CI run). It is sent again, and raised once
    the finalizer has returned; ``settle()``, where a command ends, waits for it."""
    import gc

    from jobs import interrupts

    ignored = []

    class Garbage:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, inside the finalizer
            time.sleep(0.05)
            ignored.append("finalizer returned")

    old_hook, old = sys.unraisablehook, (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
    sys.unraisablehook = lambda unraisable: ignored.append(unraisable.exc_type)
    interrupts.install()
    try:
        with pytest.raises(KeyboardInterrupt):  # after the finalizer
            garbage = Garbage()
            del garbage
            time.sleep(10)  # ended by the signal, 10 ms after the finalizer on a quiet machine
        assert ignored == ["finalizer returned"]
        with pytest.raises(KeyboardInterrupt):  # the same at once, through settle()
            garbage = Garbage()
            del garbage
            interrupts.settle(limit_s=10)
        gc.collect()
        assert ignored == ["finalizer returned"] * 2 and interrupts._again == []
        time.sleep(0.1)  # nothing more comes
    finally:
        sys.unraisablehook = old_hook
        signal.signal(signal.SIGTERM, old[0])
        signal.signal(signal.SIGINT, old[1])


def test_a_signal_during_tensorflow_iteration_waits_for_the_next_batch():
    """A signal while TensorFlow iterates is noted and raised at the next check between batches (raised
    inside TensorFlow's iterator, it can corrupt the heap on the way out); elsewhere it is raised at once."""
    from jobs import interrupts

    old = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    interrupts.install()
    try:
        with pytest.raises(interrupts.Interrupted, match="SIGTERM"), interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)  # the handler has run: noted, not raised inside the block
            reached = True
            interrupts.check()
        assert reached
        with pytest.raises(KeyboardInterrupt):  # outside TensorFlow's iteration: at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    finally:
        signal.signal(signal.SIGTERM, old[0])
        signal.signal(signal.SIGINT, old[1])


def test_waiting_for_a_device_lock_has_a_time_limit(tmp_path, monkeypatch, caplog):
    """The wait ends at its limit, and says so at the start and then every NOTE_EVERY_S, naming the
    holder."""
    from jobs.storage import locks

    monkeypatch.setattr(locks, "NOTE_EVERY_S", 1.0)

    code = (
        "import time; from jobs.storage import locks;"
        f"cm = locks.device_lock({str(tmp_path)!r}, {str(tmp_path)!r}); cm.__enter__();"
        "print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=python_env()
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with (
            caplog.at_level("WARNING", logger="jobs.storage.locks"),
            pytest.raises(
                locks.LockTimeout,
                match=rf"pid {holder.pid} \([^,]+, user root\) held the device of .*lock_timeout_min",
            ),
            locks.device_lock(str(tmp_path), str(tmp_path), timeout_s=2.5),
        ):
            pass
        assert time.monotonic() - t0 < 6
        notes = [
            r.getMessage()
            for r in caplog.records
            if r.getMessage().startswith(f"waiting for pid {holder.pid}")
        ]
        assert len(notes) == 3, notes  # at 0, 1 and 2 s
    finally:
        holder.kill()
        holder.wait()


def test_a_signal_the_main_thread_has_not_taken_yet_is_seen_as_pending():
    """``interrupts.pending``: a SIGINT that waits for the main thread (held here by a blocked mask, in a
    campaign by a read on a FUSE mount that only SIGKILL interrupts) is seen from the kernel's pending
    sets, and no longer once the handler has run; a signal that does not end a campaign is not counted."""
    import threading

    from jobs import interrupts

    taken = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: taken.append(signum))
    main = threading.main_thread().ident
    try:
        assert not interrupts.pending()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGUSR2})
        try:
            signal.pthread_kill(main, signal.SIGUSR2)
            assert not interrupts.pending()
            signal.pthread_kill(main, signal.SIGINT)
            assert interrupts.pending() and not taken
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        assert taken == [signal.SIGINT] and not interrupts.pending()
    finally:
        signal.signal(signal.SIGINT, old)
        signal.sigwait({signal.SIGUSR2})  # the blocked SIGUSR2 taken, never delivered
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})


@pytest.mark.cells
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_analysis_ends_in_one_line_and_every_file_is_whole(paper, tmp_path, sig):
    """Before: Ctrl-C in ``python -m analysis`` printed a traceback (exit -2), and SIGTERM ended it without a
    word, with the file it was writing left beside its name. Now one line and 130 or 143; no file half
    written; the same command again completes."""
    import shutil

    import pandas as pd

    from support.commands import analysis

    study = tmp_path / "study"
    shutil.copytree(paper, study, symlinks=True)

    def newest() -> int:
        return max(p.stat().st_mtime_ns for p in study.rglob("results.csv"))

    before = newest()
    proc = start_module(
        "analysis", str(study), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while newest() == before and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # its first tables are written: it is drawing the figures
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err[-3000:]
    assert err.splitlines() == [
        f"analysis: interrupted by {signal.Signals(sig).name}; the files it wrote are whole, the others as "
        "they were: run the same command again"
    ], err[-3000:]
    assert not [p for p in study.rglob("*") if p.name.endswith(".part")]
    for table in study.rglob("results.csv"):
        assert len(pd.read_csv(table)) > 0, table
    again = analysis(str(study), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]


# A user's kind of storage whose free space, asked while the campaign plans, meets a signal. In its place a
# library catches the interrupt and raises an error of its own, as OmegaConf did when SIGTERM came while it
# built a cell's config: its clean-up of the half-built node failed (a CI run beside a CPU hog printed the
# traceback of that AttributeError under the capacity search's one line).
CATCHES_THE_SIGNAL = """
import os
import signal
import time
from dataclasses import dataclass

from jobs.storage.backends.backend import Backend


@dataclass(frozen=True)
class Catching(Backend):
    def space(self, st):
        try:
            os.kill(os.getpid(), int(os.environ["SIGNAL_TO_CATCH"]))
            time.sleep(5)
        except BaseException:
            raise AttributeError("'NoneType' object has no attribute '_invalidate_flags_cache'") from None
        return super().space(st)


BACKEND = Catching("catching", requests=False, every_node=False, evicts=True, sighted_only=False)
"""


def _catching(tmp_path, module: str, sig: int) -> tuple:
    """(an empty working folder, an empty storage root, the environment) for a command that finds the
    user's kind of storage ``module`` (``iocampaign_backends.catching``) and the signal it sends itself."""
    from support.paths import ROOT

    own = tmp_path / "mine"
    (own / "iocampaign_backends").mkdir(parents=True)
    (own / "iocampaign_backends" / "catching.py").write_text(module)
    cwd, root = tmp_path / "cwd", tmp_path / "root"
    cwd.mkdir()
    root.mkdir()
    return cwd, root, python_env(PYTHONPATH=f"{own}{os.pathsep}{ROOT}", SIGNAL_TO_CATCH=str(int(sig)))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("mode", ["-m", "single run"])
def test_an_error_a_library_raised_in_place_of_a_signals_interrupt_ends_the_campaign_as_that_signal(
    tmp_path, sig, mode
):
    """Before: Hydra's handler printed the library's error as a traceback and the campaign ended with
    status 1, as if it had failed. Now: the signal's one line and 128 + the signal; nothing written."""
    from support.commands import run_module

    cwd, root, env = _catching(tmp_path, CATCHES_THE_SIGNAL, sig)
    args = ("storage.kind=catching", f"storage.root={root}", "dataset.num_images=16", "batch_size=8")
    p = run_module("campaign", *(("-m",) if mode == "-m" else ()), *args, cwd=cwd, env=env)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    name = signal.Signals(sig).name
    assert p.returncode == 128 + sig and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"campaign: interrupted by {name}"), p.stderr
    assert list(root.iterdir()) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_error_a_library_raised_in_place_of_a_signals_interrupt_ends_the_capacity_search_as_that_signal(
    tmp_path, sig
):
    """The capacity search checks its cells in its own process before its first round, and took any error
    there for the checks' answer. Before: the library's error as a refusal, ``campaign.capacity: 'NoneType'
    object has no attribute '_invalidate_flags_cache'; nothing was run``, and status 2, as for bad input.
    Now: the signal's one line and 128 + the signal; nothing written."""
    from support.commands import run_module

    cwd, root, env = _catching(tmp_path, CATCHES_THE_SIGNAL, sig)
    tier = ("storage.kind=catching", f"storage.root={root}", "dataset.num_images=16", "batch_size=8")
    p = run_module("campaign.capacity", "accelerator=resnet50_a100", *tier, cwd=cwd, env=env)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    name = signal.Signals(sig).name
    assert p.returncode == 128 + sig and "Traceback" not in p.stderr, p.stderr[-3000:]
    said = f"campaign.capacity: interrupted by {name} before its search began; nothing ran"
    assert lines == [said], p.stderr
    assert list(root.iterdir()) == [] and list(cwd.iterdir()) == []


# the same, as a module of the user's is imported when the campaign starts (a signal while Python imports
# a library: Ctrl-C right after Enter)
CATCHES_THE_SIGNAL_AT_IMPORT = """
import os
import time

try:
    os.kill(os.getpid(), int(os.environ["SIGNAL_TO_CATCH"]))
    time.sleep(5)
except BaseException:
    raise AttributeError("'NoneType' object has no attribute '_invalidate_flags_cache'") from None
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_error_a_library_raised_in_place_of_a_signals_interrupt_as_the_campaign_starts_is_that_signal(
    tmp_path, sig
):
    """Before Hydra runs, the campaign registers the schemas of every kind of storage, a user's own among
    them. Before: the library's error as a traceback, status 1. Now: the signal's one line, 128 + the
    signal, nothing written."""
    from support.commands import run_module

    cwd, root, env = _catching(tmp_path, CATCHES_THE_SIGNAL_AT_IMPORT, sig)
    p = run_module("campaign", "storage=local", f"storage.root={root}", cwd=cwd, env=env)
    name = signal.Signals(sig).name
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 128 + sig and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert lines == [f"campaign: interrupted by {name} before any cell started; nothing was kept"], p.stderr
    assert list(cwd.iterdir()) == []
