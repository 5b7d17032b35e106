"""The folders this invocation of ``python -m campaign`` created (its run or sweep folder and the
parents it had to make), so that a refusal or a dry run removes exactly those and never a folder
that existed before, whatever it holds.

Hydra creates the run folder after ``on_run_start`` and the sweep folder after
``on_multirun_start``; the sweep callback notes the folder in both, before it exists.
"""

from __future__ import annotations

import shutil
from pathlib import Path

HYDRA_FILES = (".hydra", "multirun.yaml")  # what Hydra writes into a folder besides *.log

_new: list[Path] = []  # folders this process will have created, deepest first
_current: list[Path] = []  # the run or sweep folder of this invocation


def note(folder: str | Path) -> None:
    """Remember ``folder`` as this invocation's, and which of it and its parents do not exist yet."""
    folder = Path(folder).absolute()
    _current[:] = [folder]
    _new.clear()
    for p in (folder, *folder.parents):
        if p.exists():
            break
        _new.append(p)


def check_owned(folder: str | Path, setting: str) -> None:
    """Raise ConfigError (one line) unless the campaign folder ``folder`` (a path Hydra will expand; only
    what comes before a ``${...}`` is fixed) is reached through folders no other user can steer and is
    the user's own (jobs.owned): run from /tmp, another user's ``/tmp/multirun`` or a link they left
    there would otherwise take the records, tables and report."""
    from jobs import owned

    fixed = str(folder).split("${", 1)[0].rstrip("/") or "."
    path = Path(fixed).absolute()
    top = path if Path(fixed).is_absolute() else Path.cwd() / Path(fixed).parts[0]
    owned.check_way(top.parent, setting)
    owned.check(path, setting, own_from=top)


def owned_problem(folder: str | Path, setting: str) -> str | None:
    """``check_owned``'s one line, or None when ``folder`` is fine (for entry points that print their own)."""
    from jobs.errors import ConfigError

    try:
        check_owned(folder, setting)
    except ConfigError as e:
        return str(e)
    return None


def from_args(args: list[str]) -> tuple[str, str]:
    """The campaign folder a ``python -m campaign`` command line will write, and its setting."""
    key = "hydra.sweep.dir" if "-m" in args or "--multirun" in args else "hydra.run.dir"
    given = [a.split("=", 1)[1] for a in args if a.lstrip("+").startswith(key + "=")]
    return (given[-1] if given else ("multirun" if key == "hydra.sweep.dir" else "outputs")), key


def current() -> Path | None:
    """This invocation's run or sweep folder, once noted."""
    return _current[0] if _current else None


def _only_hydra(folder: Path) -> bool:
    return all(e.name in HYDRA_FILES or e.suffix == ".log" for e in folder.iterdir())


def remove_new() -> list[Path]:
    """Remove what this invocation created, if it still holds only Hydra's own files; returns what
    was removed. A folder that existed before is never touched."""
    removed = []
    for p in _new:  # deepest first
        if not p.is_dir():
            continue
        if p == _new[0]:
            if not _only_hydra(p):
                break
            shutil.rmtree(p)
        else:
            try:
                p.rmdir()  # a parent it made: only while empty
            except OSError:
                break
        removed.append(p)
    _new.clear()
    return removed


LATEST = "latest"  # multirun/latest: a link to the newest campaign folder under multirun/


def link_latest(folder: Path, top: Path = Path("multirun")) -> Path | None:
    """Point ``<top>/latest`` at ``folder`` when the campaign folder lies under ``top`` (Hydra's default
    ``multirun/``); returns the link, or None. Only a link is ever replaced: a file or folder of that
    name is the user's and stays."""
    import os

    folder, top = Path(folder).absolute(), top.absolute()
    if top not in folder.parents:
        return None
    link = top / LATEST
    if link.exists() and not link.is_symlink():
        return None
    tmp = top / f".{LATEST}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(folder.relative_to(top))
    os.replace(tmp, link)  # atomic: a reader never finds it missing
    return link
