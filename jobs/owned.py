"""The tool's own folders: made and checked so that no other user of the machine can steer them.

The tool runs as root and keeps files in folders that every user can write (/tmp, /var/tmp,
/dev/shm). A name alone proves nothing there: another user may have made the folder first, or left a
link in its place. So every folder the tool writes in is reached through ``ensure`` (and checked at
planning by ``check``), which holds it to the rule of a secure directory:

- every folder on the way is owned by root or by the user running the tool, and one that others may
  write is sticky (like /tmp: nobody renames or removes what is not theirs);
- a link on the way is followed only when root or the user made it (the kernel's own
  ``fs.protected_symlinks`` rule);
- the tool's own folders (``iocampaign`` and below) belong to the user running the tool and nobody
  else may write in them.

Once that holds, nobody but root and the user can change any name on the path, so the files the
tool then makes below it by name cannot be redirected. In a folder that others may write, each user
gets a folder of their own (``iocampaign-<user>``; root keeps ``iocampaign``), as tmux keeps
``/tmp/tmux-<uid>``: a second user neither fails on root's files nor can plant anything in them.

The device lock folder is the one folder shared by every user on purpose; ``shared_dir`` makes it.
"""

from __future__ import annotations

import os
import pwd
import stat
import time
from pathlib import Path

from jobs.errors import ConfigError

NAME = "iocampaign"
_MAX_LINKS = 40  # as the kernel's ELOOP limit


class NotOurs(ConfigError):
    """A folder on the tool's path that another user could steer; the message names it and the setting."""


class PlantedLink(NotOurs):
    """A link on a path that neither root nor the user made (``link``: where, as the path names it)."""

    def __init__(self, message: str, link: str, user: str):
        super().__init__(message)
        self.link, self.user = link, user


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _trusted(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _others_write(st: os.stat_result) -> bool:
    return bool(st.st_mode & stat.S_IWOTH)


def trusted_portions(name: str) -> list[str]:
    """The folders of the namespace package ``name`` (every folder of that name on ``sys.path``, the folder a
    command runs in first) whose code only root or this user could have written, the package imported and
    narrowed to them; [] where there is none. A folder is left out, with one line on stderr, where another
    user owns it or any file or folder in it, where others may write one of them, or where the way to it
    passes a link another user made or a folder another user could change (an ``iocampaign_workloads``
    planted in /tmp, where root runs a command). A module or package of that name that is no namespace (a
    ``<name>.py`` file) is never imported: it would run before any folder was judged."""
    import importlib
    import importlib.util
    import sys

    spec = importlib.util.find_spec(name)
    if spec is None:
        return []
    if spec.origin is not None or spec.submodule_search_locations is None:
        print(
            f"iocampaign: {spec.origin} is not imported: {name} must be a folder without __init__.py",
            file=sys.stderr,
        )
        return []
    kept = []
    for folder in dict.fromkeys(spec.submodule_search_locations):
        why = _why_not_code(folder)
        if why is None and os.path.realpath(folder) not in kept:
            kept.append(os.path.realpath(folder))
        elif why is not None:
            print(f"iocampaign: {folder} is not imported: {why}", file=sys.stderr)
    package = importlib.import_module(name)  # a namespace package: importing it runs no code
    package.__path__ = kept
    package.__spec__.submodule_search_locations = kept
    return kept


def declarations(package: str, path: list[str], external: str, attr: str, kind: type, packages: bool) -> list:
    """What each of ``package``'s sub-packages (``packages``) or modules declares as ``attr``, an instance
    of ``kind``, and each of the namespace package ``external``'s whose code only root or this user could
    have written (``trusted_portions``); ``path``: ``package``'s own ``__path__``. A module that declares
    nothing is a ConfigError naming it. The interface's own module (``kind``'s) is not one of them."""
    import importlib
    import pkgutil

    out = []
    for prefix, folders in ((package, path), (external, trusted_portions(external))):
        for m in pkgutil.iter_modules(folders):
            name = f"{prefix}.{m.name}"
            if m.ispkg == packages and name != kind.__module__:
                declared = getattr(importlib.import_module(name), attr, None)
                if not isinstance(declared, kind):
                    raise ConfigError(f"{name} declares no {attr} (a {kind.__module__}.{kind.__qualname__})")
                out.append(declared)
    return out


def _why_not_code(folder: str) -> str | None:
    """Why the code in ``folder`` may not be another user's, or None."""
    try:
        way = list(_walk(Path(os.path.abspath(folder)), 1, "sys.path"))
    except PlantedLink as e:
        return f"the way to it passes {e.link}, a link {e.user} made"
    for shown, _, st, _ in way[:-1]:
        why = _why_not_on_way(shown, st)
        if why:
            return why
    for top, dirs, files in os.walk(way[-1][1] if way else folder):
        for entry in (top, *(os.path.join(top, n) for n in (*dirs, *files))):
            st = os.lstat(entry)
            if not _trusted(st.st_uid):
                return f"{entry} is {_user(st.st_uid)}'s"
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not stat.S_ISLNK(st.st_mode):
                return f"others may write {entry} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def shared(parent: str | Path) -> bool:
    """Whether other users may add files to ``parent`` (a folder like /tmp)."""
    try:
        return _others_write(os.stat(parent))
    except OSError:
        return False


def tool_folder(root: str | Path) -> Path:
    """The tool's folder under a storage root: ``iocampaign``, or ``iocampaign-<user>`` for a user other
    than root where others may write the root. Nothing is made here."""
    if os.geteuid() == 0 or not shared(root):
        return Path(root) / NAME
    return Path(root) / f"{NAME}-{_user(os.geteuid())}"


def _why_not_on_way(p: str, st: os.stat_result) -> str | None:
    """Why a folder on the way to the tool's folders cannot be trusted, or None."""
    if not _trusted(st.st_uid):
        return f"{p} belongs to {_user(st.st_uid)}, who could replace what the tool keeps below it"
    if _others_write(st) and not st.st_mode & stat.S_ISVTX:
        return f"{p} may be written by every user and is not sticky, so anyone could replace what is in it"
    return None


def _why_not_ours(p: str, st: os.stat_result) -> str | None:
    """Why an existing folder of the tool is not the user's own, or None."""
    if not stat.S_ISDIR(st.st_mode):
        return f"{p} is not a folder"
    if st.st_uid != os.geteuid():
        return (
            f"{p} belongs to {_user(st.st_uid)}, not to {_user(os.geteuid())}: the tool writes only in "
            "folders of its own"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.S_IMODE(st.st_mode)
        return f"{p} may be written by others (mode {mode:o}): the tool keeps its folders private"
    return None


def _walk(path: Path, own_last: int, setting: str):
    """Each existing component of ``path``, links resolved as the kernel would: yields (shown path, real
    path, lstat, whether it is one of the tool's own). The last ``own_last`` components are the tool's
    (a link among them stands for its target's last component). Stops at the first component that does
    not exist. Raises NotOurs for a link that neither root nor the user made. A component reached through
    a link is shown as itself, with the link named ("/tmp (reached through the link <root>/iocampaign/x)"),
    so that what a refusal names is what it judged."""
    parts = list(path.parts)
    real, i, links, via = Path(parts[0]), 1, 0, None
    while i < len(parts):
        shown = Path(*path.parts[: len(path.parts) - (len(parts) - i) + 1])
        p = real / parts[i]
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if not _trusted(st.st_uid) or links > _MAX_LINKS:
                raise PlantedLink(
                    f"{setting}: {shown} is a link made by {_user(st.st_uid)}: the tool never follows "
                    f"another user's link; remove it, or choose another {setting}",
                    str(shown),
                    _user(st.st_uid),
                )
            target = Path(os.readlink(p))
            via, after = str(shown), len(parts) - i - 1  # the components after the link are the path's again
            parts = list((target if target.is_absolute() else real / target).parts) + parts[i + 1 :]
            real, i = Path(parts[0]), 1
            continue
        label = (
            str(shown) if via is None or len(parts) - i <= after else f"{p} (reached through the link {via})"
        )
        yield label, p, st, len(parts) - i <= own_last
        real = p
        i += 1


def _check(path: Path, setting: str, own_last: int) -> None:
    for shown, _, st, own in _walk(path, own_last, setting):
        if own:
            why = _why_not_ours(shown, st)
        elif stat.S_ISDIR(st.st_mode):
            why = _why_not_on_way(shown, st)
        else:
            why = f"{shown} is not a folder"
        if why:
            raise NotOurs(f"{setting}: {why}; remove it, or choose another {setting}")


def _own_last(path: Path, own_from: str | Path | None) -> int:
    if own_from is None:
        return 1
    return len(path.parts) - len(Path(os.path.abspath(own_from)).parts) + 1


def check(path: str | Path, setting: str, own_from: str | Path | None = None) -> None:
    """Raise NotOurs (one line, naming ``setting``) unless ``path`` can be made and written safely: the
    folders on the way trusted, those from ``own_from`` on (default: ``path`` itself) the user's own.
    Folders that do not exist yet are fine: ``ensure`` makes them."""
    path = Path(os.path.abspath(path))
    _check(path, setting, _own_last(path, own_from))


def planted_link(path: str | Path) -> PlantedLink | None:
    """The first link on the way to ``path`` (an input the tool only reads: a trace, a list of files) that
    neither root nor the user made, or None. Where it points is never opened."""
    try:
        for _ in _walk(Path(os.path.abspath(path)), 0, "path"):
            pass
    except PlantedLink as e:
        return e
    return None


def check_way(path: str | Path, setting: str) -> None:
    """Raise NotOurs unless every existing folder on ``path`` (itself included) is trusted as a folder on
    the way: a storage root the user chose, the parent of a shared folder."""
    _check(Path(os.path.abspath(path)), setting, 0)


def ensure(path: str | Path, setting: str, own_from: str | Path | None = None) -> Path:
    """``path`` made (0755, its missing parents too) after ``check``, and checked again once made, so
    that a folder someone else made meanwhile is refused, not used. Returns it."""
    path = Path(os.path.abspath(path))
    own_last = _own_last(path, own_from)
    _check(path, setting, own_last)
    os.makedirs(path, 0o755, exist_ok=True)
    _check(path, setting, own_last)
    return path


def own_from_of(configured: str | Path) -> Path:
    """Where the tool's own part of a configured folder starts: its first ``iocampaign`` component (the
    defaults, /var/tmp/iocampaign/tiers), else the folder itself (a folder the user named)."""
    path = Path(os.path.abspath(configured))
    for i, part in enumerate(path.parts):
        if is_tool_folder(part):
            return Path(*path.parts[: i + 1])
    return path


def is_tool_folder(path: str | Path) -> bool:
    """Whether ``path`` is named as the user's tool folder (``iocampaign``, or ``iocampaign-<user>``)."""
    return Path(path).name in (NAME, f"{NAME}-{_user(os.geteuid())}")


def under_tool_folder(root: str | Path, *parts: str, setting: str) -> Path:
    """``<root>/<the tool's folder>/<parts...>``, made and checked (``setting`` names the root's key)."""
    base = tool_folder(root)
    return ensure(base.joinpath(*parts), setting, own_from=base)


def shared_dir(path: str | Path, setting: str) -> int:
    """The folder shared by every user (the device locks), opened as a directory without following a
    link; made like /tmp (1777) when missing. Returns its descriptor (the caller closes it). Refused: a
    link, not a folder, a folder every user may write that is not sticky, or a folder of anyone but root
    and the user (its owner may remove any lock in it)."""
    path = Path(os.path.abspath(path))
    check_way(path.parent, setting)
    try:
        os.mkdir(path, 0o700)
        made = True
    except FileExistsError:
        made = False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        raise NotOurs(
            f"{setting}={path} is a link or not a folder: the tool never follows another user's "
            "link; remove it, or choose another " + setting
        ) from None
    st = os.fstat(fd)
    if made and st.st_uid == os.geteuid():
        # every user's cells take these locks: anyone adds files, only owners remove them
        os.fchmod(fd, 0o1777)
        st = os.fstat(fd)
    if _others_write(st) and not st.st_mode & stat.S_ISVTX:
        os.close(fd)
        raise NotOurs(
            f"{setting}={path} may be written by every user and is not sticky: anyone could swap a "
            f"lock in it; remove it, or choose another {setting}"
        )
    if not _trusted(st.st_uid):  # a folder's owner may remove any file in it, sticky or not
        os.close(fd)
        raise NotOurs(
            f"{setting}={path} belongs to {_user(st.st_uid)}, who could remove a lock in it while a cell "
            f"holds it and let two cells measure at once; have root make it (mkdir -m 1777), or choose "
            f"another {setting}"
        )
    return fd


def remove_handover(folder: Path) -> None:
    """A hand-over folder of files (beats, a node's counters), gone, though a process still ending may
    write one file more into it while it goes: tried again for up to 5 s."""
    for _ in range(50):
        try:
            for f in folder.iterdir():
                f.unlink(missing_ok=True)
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
