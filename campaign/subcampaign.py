"""Campaigns run by another (the paper's grids, the capacity search's rounds).

- ``run``: ``python -m campaign -m`` as a child process, started warm, that ends cleanly, tiers and locks
  released, when its parent is interrupted.
- ``plan_all``: the dry runs of several command lines in one child process (``python -m
  campaign.subcampaign``), started warm as ``run``'s: one process for all of them, run one by one as the
  shell would run them.
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
from pathlib import Path


def run(args: list[str], sweep_dir: Path, preload: tuple[str, ...] | None = None) -> int:
    """``python -m campaign -m <args> hydra.sweep.dir=<sweep_dir>``, started warm (``jobs.execution.warm``:
    forked from a server that imported TensorFlow, Hydra and pandas once for all of this process's
    sub-campaigns); its exit status. ``preload``: what the server imports, when this process's first call
    starts it (``preload_for`` every grid the process will run; by default, this grid's)."""
    from jobs import interrupts, lifeline
    from jobs.execution import warm

    child = warm.start(
        "campaign",
        ["-m", *args, f"hydra.sweep.dir={sweep_dir}"],
        lifeline.child_env(),
        preload_for([args]) if preload is None else preload,
    )
    try:
        return child.wait()
    except BaseException as e:  # SIGTERM or Ctrl-C: let the campaign unwind (tiers, locks) before leaving
        child.send_signal(interrupts.signum_of(e))  # its own line names the signal the user sent
        child.wait(120)
        raise


def preload_for(grids: list[list[str]]) -> tuple[str, ...]:
    """What the warm server of the sub-campaigns ``grids`` imports: TensorFlow where a cell of one would
    run on it (a dry run's do not run), with Keras where such a cell's workload builds a Keras model, or
    where the grid's workload cannot be read here."""
    from jobs.execution import warm

    tensorflow = [args for args in grids if _runs_tensorflow(args)]
    if not tensorflow:
        return warm.COMMON
    keras = any(_uses_keras(args) for args in tensorflow)
    return (*warm.COMMON, warm.TENSORFLOW if keras else warm.TENSORFLOW_DATA)


def _runs_tensorflow(args: list[str]) -> bool:
    """Whether a cell of the grid ``args`` would run on a framework that imports TensorFlow (a dry run's
    do not run)."""
    from campaign import choices
    from campaign.overrides import flag_of, value_of
    from jobs import frameworks

    if flag_of(args, "platform.dry_run"):
        return False
    chosen = value_of(args, "framework") or choices.default("framework") or frameworks.PAPERS
    return any(
        frameworks.FRAMEWORKS[n].imports_tensorflow for n in chosen.split(",") if n in frameworks.FRAMEWORKS
    )


def _uses_keras(args: list[str]) -> bool:
    """Whether a cell of the grid ``args`` may build a Keras model: its workload presets' kinds say so; an
    experiment, or a preset not read here, counts as one that does."""
    from campaign import choices
    from campaign.overrides import value_of
    from jobs import workloads

    if value_of(args, "experiment"):
        return True
    chosen = value_of(args, "workload") or choices.default("workload")
    if not chosen:
        return True
    for name in chosen.split(","):
        kind = choices.preset_kind(name, choices.searchpath(args))
        if kind not in workloads.names() or workloads.get(kind).uses_keras:
            return True
    return False


def plan_all(argvs: list[list[str]], preload: tuple[str, ...] | None = None) -> list[dict]:
    """Each argument list's ``python -m campaign <argv>`` run in one child process, one after another (the
    caller adds ``platform.dry_run=true``): per command, its exit status and what it printed
    (``status``, ``out``, ``err``). The child is started warm (``jobs.execution.warm``), from the server
    that this process's sub-campaigns are forked from after it (``preload``: what it imports, where this
    call starts it; by default, what the grids need), so that neither a fresh Python's start nor its
    imports are paid for the plans."""
    import os

    from jobs import lifeline
    from jobs.execution import warm

    argvs = [list(argv) for argv in argvs]
    read, write = os.pipe()
    try:
        child = warm.start(
            "campaign.subcampaign",
            [json.dumps(argvs)],
            lifeline.child_env(),
            preload_for(argvs) if preload is None else preload,
            stdout=write,
        )
    finally:
        os.close(write)
    with os.fdopen(read, encoding="utf-8") as f:
        try:
            text = f.read()
            status = child.wait()
        except BaseException:  # SIGTERM or Ctrl-C while planning: the plans end with this process
            child.kill()
            child.wait()
            raise
    said = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    if len(said) < len(argvs):  # the driver itself failed (its traceback on standard error)
        err = f"the plans' driver ended with exit status {status}"
        said.append({"argv": argvs[len(said)], "status": status or 1, "out": "", "err": err})
    return said


def _one(argv: list[str]) -> dict:
    """``python -m campaign <argv>`` in this process, as the shell would run it."""
    from hydra.core.global_hydra import GlobalHydra

    from jobs import lifeline

    GlobalHydra.instance().clear()
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["campaign", *argv]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), lifeline.in_one_process():
        try:
            runpy.run_module("campaign", run_name="__main__", alter_sys=True)
            status = 0
        except SystemExit as e:  # python -m campaign ends with sys.exit(<status>)
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception as e:  # noqa: BLE001 - reported as the command's failure, as its traceback would be
            status = 1
            print(f"{type(e).__name__}: {e}", file=err)
        finally:
            from jobs import interrupts

            interrupts.release()  # its end held signals (campaign.__main__.exit_with): the next is not held
    return {"argv": argv, "status": status, "out": out.getvalue(), "err": err.getvalue()}


def main() -> None:
    """The argument lists, a JSON list (the first argument, else standard input); stdout: one JSON line per
    command, in order."""
    argvs = json.loads(sys.argv[1]) if len(sys.argv) > 1 else json.load(sys.stdin)
    out = sys.stdout
    for argv in argvs:
        print(json.dumps(_one(argv)), file=out, flush=True)


if __name__ == "__main__":
    from jobs.execution import warm
    from jobs.lifeline import exit_as_python

    warm.zygote()  # started warm: a copy of this process, now, serves the plans' own sub-plans
    exit_as_python(main)
