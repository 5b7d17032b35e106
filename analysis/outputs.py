"""Which files in a campaign folder the tool wrote, so that it never writes over one it did not.

Every table, figure and report the analysis writes is first claimed here: the file's name goes into
the folder's ``.iocampaign-outputs.json`` (schema-versioned; this module is its only reader and
writer) before the file is written. A file that already exists under a name the folder's manifest
does not list is a user's: writing it raises ``OutputExists`` and nothing is written over it.

A folder without a manifest (analysed before manifests existed, or a campaign killed before its
analysis) lists nothing, so each table found there is taken for the user's and refused by name: the
only way to be sure of never writing over a file someone else put there. Telling the tool's files
apart by age (newer than ``plan.json``) took a user's ``results.csv`` in an unfinished campaign for
the tool's and wrote over it.

Files are written into a new name made with ``O_EXCL`` beside the target, then renamed onto it, and
the manifest is read without following a link or blocking on a FIFO: a link planted under an
output's name is replaced, never followed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
from pathlib import Path

from jobs import jsonfiles

MANIFEST = ".iocampaign-outputs.json"
SCHEMA = 1
# every output this process wrote, in order: a refusal half-way names what came before
PLACED: list[Path] = []


class OutputExists(FileExistsError):
    """A file the analysis would write exists and was not written by it."""


def _read(folder: Path) -> set[str]:
    """The names the folder's manifest lists (none without one; none when it is damaged)."""
    try:
        data = jsonfiles.read_json(folder / MANIFEST)
    except (FileNotFoundError, NotADirectoryError):
        return set()
    except jsonfiles.NotAFile as e:  # a planted FIFO or link: refused, never read or written through
        raise OutputExists(str(e)) from None
    except (OSError, ValueError):
        return set()
    files = data.get("files", []) if isinstance(data, dict) else []
    return {f for f in files if isinstance(f, str)} if isinstance(files, list) else set()


def _exclusive(path: Path) -> tuple[int, Path]:
    """(descriptor, name) of a new file beside ``path``, made with O_EXCL: never an existing file or link."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
        try:
            return os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666
            ), tmp
        except FileExistsError:
            continue


@contextlib.contextmanager
def _written(path: Path, binary: bool, place):
    """A file object on a new temporary file beside ``path``; on success ``place(tmp, path)`` puts it
    there."""
    fd, tmp = _exclusive(path)
    try:
        with os.fdopen(
            fd, "wb" if binary else "w", **({} if binary else {"newline": "", "encoding": "utf-8"})
        ) as f:
            yield f
        place(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _link_new(tmp: Path, path: Path) -> None:
    """Give ``tmp``'s file the name ``path`` only if that name is free (a link never replaces)."""
    try:
        os.link(tmp, path, follow_symlinks=False)
    except FileExistsError:
        raise OutputExists(
            f"{path} exists: it appeared while it was being written, and was left as it was"
        ) from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        # a file system without hard links: the name checked once more, then renamed
        if os.path.lexists(path):
            raise OutputExists(
                f"{path} exists: it appeared while it was being written, and was left as it was"
            ) from None
        os.replace(tmp, path)


def new_file(path: str | os.PathLike, binary: bool = False):
    """A file object for the new file ``path`` (a user's --csv or --out): written aside, then given its
    name only if nothing holds it by then; OutputExists otherwise."""
    return _written(Path(path), binary, _link_new)


def _place_owned(tmp: Path, path: Path) -> None:
    if os.path.lexists(path):
        check([path])  # again: what the name holds may have changed while the file was written
        os.replace(tmp, path)  # replaces a name, never writes through a link
    else:
        _link_new(tmp, path)
    PLACED.append(path)


def create(path: str | os.PathLike, binary: bool = False):
    """A file object for the output ``path`` of the tool: claimed (listed in the manifest) first,
    written aside, then renamed onto ``path``; OutputExists when ``path`` is not the tool's."""
    path = claim(Path(path))
    return _written(path, binary, _place_owned)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write the tool's output ``path`` (see ``create``); returns it."""
    with create(path) as f:
        f.write(text)
    return Path(path)


def owned(path: Path) -> bool:
    """Whether ``path`` is free to write: absent, or a regular file the manifest lists as the tool's."""
    if not os.path.lexists(path):
        return True
    if path.is_symlink() or not path.is_file():
        return False
    return path.name in _read(path.parent)


def check(paths: list[Path]) -> None:
    """Raise OutputExists naming the first of ``paths`` that exists and is not the tool's (or the
    manifest of their folder, when something other than a file holds its name)."""
    for folder in {p.parent for p in paths}:
        _read(folder)
    for p in paths:
        if owned(p):
            continue
        what = (
            "is a symbolic link (never written through)"
            if p.is_symlink()
            else "exists and is not a regular file"
            if not p.is_file()
            else f"exists and was not written by iocampaign (its {MANIFEST} does not list it)"
        )
        raise OutputExists(f"{p} {what}: move it away or use another folder")


def _write(folder: Path, names: set[str]) -> None:
    text = json.dumps({"schema": SCHEMA, "files": sorted(names)}, indent=1)
    with _written(folder / MANIFEST, False, os.replace) as f:  # os.replace: a name, never through a link
        f.write(text)


def claim(path: Path) -> Path:
    """``path``, once checked and listed as the tool's (call right before writing it)."""
    check([path])
    names = _read(path.parent)
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


def study_folder_problem(folder: Path, mark: str, *also: str) -> str | None:
    """Why ``folder`` cannot hold a study whose own file is ``mark`` or one of ``also`` (the paper study's
    paper.txt, the capacity search's capacity.txt or, from before it, capacity.csv); None: it is new,
    empty, or that study's folder again (a resume). A mark the folder's manifest does not list is
    refused: another study's or a user's file under that name proves nothing."""
    why = folder_is_free(folder, (mark, *also))
    try:
        check([folder / m for m in (mark, *also)])
    except OutputExists as e:
        why = why or str(e)
    return why
