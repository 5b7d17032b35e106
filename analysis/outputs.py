"""Which files in a campaign folder the tool wrote, so that it never writes over one it did not.

Every table, figure and report the analysis writes is first claimed here: the file's name goes into
the folder's ``.iocampaign-outputs.json`` (schema-versioned; this module is its only reader and
writer) before the file is written. A file that already exists under a name the folder's manifest
does not list is a user's: writing it raises ``OutputExists`` and nothing is written over it.

Folders written before the manifest existed: a file is taken as the tool's when the folder holds the
campaign's ``plan.json`` (or, for the paper study, its grids' plans) and the file is newer than it,
since the tool writes its tables only after the plan, and refuses to start a campaign in a folder
that held anything else.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

MANIFEST = ".iocampaign-outputs.json"
SCHEMA = 1


class OutputExists(FileExistsError):
    """A file the analysis would write exists and was not written by it."""


def _read(folder: Path) -> set[str] | None:
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return set()
    return set(data.get("files", [])) if isinstance(data, dict) else set()


def _write(folder: Path, names: set[str]) -> None:
    tmp = folder / (MANIFEST + ".part")
    tmp.write_text(json.dumps({"schema": SCHEMA, "files": sorted(names)}, indent=1))
    os.replace(tmp, folder / MANIFEST)


def _legacy_anchor(folder: Path) -> float | None:
    """mtime of the plan(s) of a folder written before manifests, or None."""
    plans = [folder / "plan.json", *folder.glob("*/plan.json")]
    times = [p.stat().st_mtime for p in plans if p.is_file()]
    return min(times) if times else None


def owned(path: Path) -> bool:
    """Whether ``path`` is free to write: absent, or written by the tool."""
    if not path.exists() and not path.is_symlink():
        return True
    if path.is_symlink() or not path.is_file():
        return False
    names = _read(path.parent)
    if names is not None:
        return path.name in names
    anchor = _legacy_anchor(path.parent)
    return anchor is not None and path.stat().st_mtime >= anchor


def check(paths: list[Path]) -> None:
    """Raise OutputExists naming the first of ``paths`` that exists and is not the tool's."""
    for p in paths:
        if not owned(p):
            raise OutputExists(f"{p} exists and was not written by iocampaign: move it away or use another folder; "
                               "nothing was written")


def claim(path: Path) -> Path:
    """``path``, once checked and listed as the tool's (call right before writing it)."""
    check([path])
    names = _read(path.parent) or set()
    if path.name not in names:
        _write(path.parent, names | {path.name})
    return path


def folder_is_free(folder: Path, own_marks: tuple[str, ...], harmless: tuple[str, ...] = ()) -> str | None:
    """Why ``folder`` cannot be a new campaign folder (None: it does not exist, is empty, holds one of
    ``own_marks``, the files a campaign of the tool leaves there (a resume), or only ``harmless`` names
    and logs (what Hydra leaves after a refusal or a dry run))."""
    if not folder.exists():
        return None
    if not folder.is_dir():
        return f"{folder} exists and is not a folder"
    entries = sorted(e.name for e in folder.iterdir())
    if not entries or any(m in entries for m in own_marks):
        return None
    if all(e in harmless or e.endswith(".log") for e in entries):
        return None
    shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
    return f"{folder} exists and is not a campaign folder of this tool (it holds {shown})"


def study_folder_problem(folder: Path, mark: str) -> str | None:
    """Why ``folder`` cannot hold a study whose own file is ``mark`` (the paper study's paper.txt, the
    capacity search's capacity.csv); None: it is new, empty, or that study's folder again (a resume)."""
    why = folder_is_free(folder, (mark,))
    try:
        check([folder / mark])
    except OutputExists as e:
        why = why or str(e)
    return why
