"""``python -m campaign``: one cell on the defaults, or a grid with ``-m key=a,b``."""

import contextlib
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TensorFlow's C++ INFO lines bury the campaign's own

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from campaign import choices, errors, helptext, keys, outputs, schema  # noqa: E402


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from campaign.cell import execute
    from jobs import interrupts

    with interrupts.surfaced():  # before Hydra's handler prints it as a traceback
        execute(cfg)


# what can set ``hydra.mode`` for a command without -m: an experiment preset (conf/experiment/fig6.yaml), the
# mode itself, a search path (whose configs might), a group of Hydra's own, Hydra's flags (another config);
# nothing else in conf/ sets it (tests/campaign/test_config.py holds that)
MODE_SETTERS = ("experiment=", "experiment@", "hydra.mode", "hydra.searchpath", "hydra/", "-")


@contextlib.contextmanager
def _mode_from_the_flag(args: list[str]):
    """Hydra composes the whole configuration once before the campaign's own composition only to read
    ``hydra.mode`` (``Hydra.get_mode``: the README's 56 dry runs took 77 CPU-s with it, 61 without). With
    ``-m`` given the mode is MULTIRUN whatever that says (Hydra's ``_run_app``: a configured RUN is
    overridden, with a warning, and none means the flag's), so the flag answers instead, for this command
    only; a composition that fails still fails in the next. Without ``-m``, where no argument could set the
    mode (``MODE_SETTERS``), the configuration has none, as Hydra's composition would find (a single run)."""
    from hydra._internal.hydra import Hydra
    from hydra.types import RunMode

    if "-m" in args or "--multirun" in args:
        known = RunMode.MULTIRUN
    elif any(a.lstrip("+~").startswith(MODE_SETTERS) for a in args):
        yield  # composed to find out
        return
    else:
        known = None
    composing = Hydra.get_mode
    Hydra.get_mode = lambda self, config_name, overrides: known
    try:
        yield
    finally:
        Hydra.get_mode = composing


def _interrupted(name: str) -> str:
    folder = outputs.current()
    if folder is None:
        return f"campaign: interrupted by {name} before any cell started; nothing was kept"
    if "-m" in sys.argv[1:] or "--multirun" in sys.argv[1:]:
        return (
            f"campaign: interrupted by {name}; the records of finished cells are kept in {folder}; "
            "resume with "
            f"the same command and hydra.sweep.dir={folder} (finished cells are skipped)"
        )
    if _completed(folder):
        return (
            f"campaign: interrupted by {name} after its cell completed; its record is kept in {folder}; "
            f"python -m analysis {folder} writes its tables and figures"
        )
    return f"campaign: interrupted by {name}; the run in {folder} wrote no record; run the command again"


def _completed(folder) -> bool:
    """Whether a single run's folder holds its cell's completed record (a signal during the analysis)."""
    from jobs import records

    try:
        return records.read(folder / records.FILENAME).status == records.COMPLETED
    except (OSError, records.RecordError):
        return False


def run() -> int:
    """The whole invocation; returns the exit status."""
    from jobs import interrupts

    interrupts.install()  # SIGINT and SIGTERM unwind the cell, never from inside TensorFlow's iterator
    from jobs import lifeline

    if lifeline.bind():  # a grid of the paper study: SIGTERM (and its clean-up) when the study's process dies
        # Ctrl-C reaches the study and its grid at once, and the study passes it on: one signal unwinds the
        # cell, a second would cut its unwinding short
        interrupts.install(repeat=False)
    try:
        # an error raised after a signal came (a library's, in place of the interrupt; a refusal made of one)
        # is that signal's interrupt, here as under Hydra
        with interrupts.surfaced():
            return _checked_run(sys.argv[1:])
    except errors.ConfigError as e:  # before Hydra runs: its own handler is not there yet
        print(f"campaign: {e}", file=sys.stderr)
        return 2
    except errors.Stop as stop:
        if stop.message:
            print(stop.message, file=sys.stderr)
        return stop.status
    except (KeyboardInterrupt, errors.Interrupted) as e:
        print(_interrupted(interrupts.name_of(e)), file=sys.stderr)
        return 128 + interrupts.signum_of(e)


def _checked_run(args: list[str]) -> int:
    """The invocation's checks, then the study or the campaign; its exit status (a refusal raises
    ConfigError)."""
    from jobs import interrupts

    # the schemas of every workload, framework and kind of storage, a user's own among them: one that
    # declares nothing is this command's one line
    schema.register()
    helptext.register()  # the resolvers of --help's template (conf/hydra/help/campaign.yaml)
    chosen = choices.study(args)
    problem = keys.unknown_key([a for a in args if a != chosen])  # the study's extra overrides too
    if problem:
        raise errors.ConfigError(problem)
    if chosen:
        from campaign import paper

        status = paper.main([a for a in args if a != chosen])
        interrupts.settle()  # a signal that landed inside a finalizer is raised here, not lost
        return status
    problem = (
        choices.unknown_choice(args)
        or choices.missing_field(args)
        or choices.null_parent(args)
        or choices.bad_value(args)  # a value -m would refuse too, named first
        or choices.sweep_without_flag(args)
    )
    if problem:
        raise errors.ConfigError(problem)
    outputs.check_owned(*outputs.from_args(args))
    with _mode_from_the_flag(args):
        main()
    interrupts.settle()  # a signal that landed inside a finalizer is raised here, not lost
    return 0


def exit_with(status: int) -> None:
    """End the process: at once where a signal left a step or a fetch inside TensorFlow or PyTorch (the
    interpreter's shutdown would tear their objects down under it), by SystemExit otherwise (``__main__``
    then ends as Python would, without tearing its modules down: ``lifeline.exit_as_python``)."""
    from jobs import interrupts

    interrupts.hold()  # from here a signal is only noted: the clean-up below finishes
    interrupts.run_hard_exit()  # the embedded servers stopped and their folders removed, here in every case
    late = interrupts.late()
    if late is not None:
        name = signal.Signals(late).name
        print(f"campaign: {name} came as the campaign ended; its clean-up was finished", file=sys.stderr)
    if interrupts.abandoned():  # the interpreter's shutdown would tear TensorFlow's objects down under it
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    from jobs.execution import warm
    from jobs.lifeline import exit_as_python

    warm.zygote()  # where this process was started warm: a copy of it, now, serves its warm children
    exit_as_python(lambda: exit_with(run()))
