"""``python -m campaign.cache list|purge``: the disk (and RAM) the tool keeps between campaigns, and
freeing it, as ``pip cache list|purge`` does for pip's.

What it keeps lies in its own folder under each storage root (``jobs.owned.tool_folder``: ``iocampaign``,
or ``iocampaign-<user>`` in a folder every user may write): generated and converted datasets, the backing
files of emulated tiers (``storage.emulate.image_dir``) and of modelled ones (``storage.model.backing_dir``),
staged copies, kept checkpoints, the read baseline's files. The roots looked at are /var/tmp, /dev/shm and
/tmp, every storage preset's root (an emulated tier's mount holds datasets too) and each ``--root``.

``purge`` removes only entries of the user's own tool folders that the user owns; never a link (and
nothing a link points to), never a tier image that is attached to a loop device or mounted, never a file
the tool does not make (a file of the user's beside its folders stays as it is). It refuses, in one line
naming the process, an entry a live process holds: a dataset a cell reads (``jobs.data.inuse``), a set
being generated or converted, a staged copy, a checkpoint run's folder, a live embedded server's folder
or s3fs mount point, a live run's record of the keys it put in a bucket. Inside an entry it stays on the
entry's own mount and leaves another user's files where they are (``campaign.removal``), saying so.

A killed run's record (``uploads/``, ``jobs.storage.objectstore.journal``) is what lets the next run on
the host delete the objects it put and abort its uploads: purged, the tool no longer deletes them, and
list and purge say so.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from campaign import removal
from jobs.schema import EmulateConf, ModelConf

CONF = Path(__file__).resolve().parent.parent / "conf"
ROOTS = ("/var/tmp", "/dev/shm", "/tmp")
# the tool's sub-folders whose entries it lists one by one, and the kind each entry is
KINDS = {
    "datasets": "datasets",
    "datasets/converted": "converted",
    "tiers": "tiers",
    "staged": "staged",
    "checkpoints": "checkpoints",
    "baseline": "baseline",
    "s3servers": "s3servers",  # a campaign's embedded S3 server, <host>-<pid>-<n>
    "s3mounts": "s3mounts",  # a campaign's s3fs mount point, <host>-<pid>
    "uploads": "uploads",  # a run's record of the keys it put in a bucket, <name>.jsonl
}
MARKER = ".iocampaign"  # beside an emulated tier's image: the tool made it (jobs.storage.tiers)
WHAT = ("all", *sorted(set(KINDS.values())))
# the locks a live process holds in an entry's folder while it needs it: a cell reading a dataset
# (shared; jobs.data.inuse), generating or converting one, its staged copy, a checkpoint run's folder
LOCKS = (".reading.lock", ".generating.lock", ".converting.lock", ".iocampaign-staged", ".lock")


@dataclass(frozen=True)
class Entry:
    path: Path  # a folder (or a tier's image file) the tool made
    kind: str  # one of KINDS' values
    bytes: int  # the disk (or RAM, on tmpfs) it takes: allocated blocks, links not followed
    in_use: str = ""  # why it must stay (an attached or mounted tier, a live process's), or ""
    note: str = ""  # what list says of it besides (a partial dataset)


# where a tier preset's images or backing files go when it names no folder (the schema's defaults)
SCHEMA_FOLDERS = {"image_dir": EmulateConf.image_dir, "backing_dir": ModelConf.backing_dir}


def roots(extra: list[str]) -> list[str]:
    """The storage roots to look in: ``extra`` when given, else the usual ones and every storage preset's
    root and image folder."""
    from omegaconf import OmegaConf

    if extra:  # resolved: a root given as a link is compared with the mounts as the kernel names them
        return list(dict.fromkeys(os.path.realpath(r) for r in extra))
    found = list(ROOTS)
    for preset in sorted((CONF / "storage").glob("*.yaml")):
        cfg = OmegaConf.load(preset)
        found.append(str(cfg.get("root", "???")))
        for section, key in (("emulate", "image_dir"), ("model", "backing_dir")):
            if OmegaConf.select(cfg, section) is None:
                continue
            # a preset that leaves the folder out has the schema's
            where = OmegaConf.select(cfg, f"{section}.{key}") or SCHEMA_FOLDERS[key]
            if where:
                found.append(str(Path(str(where)).parent.parent))  # <root>/iocampaign/tiers
    out = []
    for r in found:
        if r != "???" and "${" not in r and os.path.realpath(r) not in out:
            out.append(os.path.realpath(r))
    return out


def _own_dir(path: Path) -> bool:
    """A real folder (not a link) that the user owns."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


@dataclass(frozen=True)
class _Busy:
    """What keeps an entry, looked at once for a whole listing."""

    points: frozenset[str]  # every mount's mount point and source, decoded
    loops: tuple[str, ...]  # every loop device's backing file
    locks: dict  # locked files and their holders (jobs.data.inuse.lock_table)


def _busy() -> _Busy:
    from jobs.data import inuse
    from jobs.storage import mounts

    points: set[str] = set()
    for point, _, source in mounts.mounts():
        points.update((point, source))
    loops = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            loops.append(backing.read_text().strip().removesuffix(" (deleted)"))
        except OSError:
            pass
    return _Busy(frozenset(points), tuple(loops), inuse.lock_table())


def _in_use(path: Path, kind: str, busy: _Busy) -> str:
    """Why the entry must stay, or "": a loop device or a mount in it, a live process's lock or name."""
    p = str(path)
    if any(x == p or x.startswith(p + "/") for x in busy.loops):
        return "attached to a loop device"
    if any(x == p or x.startswith(p + "/") for x in busy.points):
        return "mounted"
    if kind == "tiers" and any(
        os.path.basename(x.rstrip("/")) == path.stem or x.endswith(path.stem) for x in busy.points
    ):
        return f"its tier {path.stem} is mounted"
    return _held(path, busy) or _live(path, kind)


def _held(path: Path, busy: _Busy) -> str:
    """Who holds one of the entry's locks, or ""."""
    from jobs.data import inuse

    for name in LOCKS:
        pids = inuse.holders(path / name, busy.locks)
        if pids:
            return f"in use by {inuse.describe(pids)}"
    return ""


def _live(path: Path, kind: str) -> str:
    """A server's folder, a mount point or a baseline's folder whose process (named in it) still runs, or
    runs on another host (which cannot be asked): ""."""
    from jobs import lifeline

    name = path.name
    if kind == "s3servers":
        name = name.rpartition("-")[0]  # <host>-<pid>-<n>
    elif kind == "baseline":  # <tag>-<pid>, on this host
        name = f"{socket.gethostname()}-{name.rpartition('-')[2]}"
    elif kind != "s3mounts":  # <host>-<pid>
        return ""
    host, _, pid = name.rpartition("-")
    if not pid.isdigit():
        return ""
    if host != socket.gethostname():
        return f"made by a campaign on {host}, which this host cannot see"
    if not lifeline.alive(int(pid)):
        return ""
    from jobs.data import inuse

    return f"in use by {inuse.describe([int(pid)])}"


def _marked(image: Path) -> bool:
    """An emulated tier's image the tool made: ``<tier>.img`` beside its marker ``<tier>.img.iocampaign``."""
    marker = image.with_name(image.name + MARKER)
    return image.suffix == ".img" and marker.is_file() and not marker.is_symlink()


def entries(root_list: list[str]) -> list[Entry]:
    """What the tool keeps under each root's tool folder, entry by entry; another user's entry is listed
    as kept."""
    from jobs import owned

    busy, out, seen = _busy(), [], set()
    for root in root_list:
        base = owned.tool_folder(root)
        if not owned.is_tool_folder(base) or not _own_dir(base) or os.path.realpath(base) in seen:
            continue
        seen.add(os.path.realpath(base))
        for sub, kind in KINDS.items():
            folder = base / sub
            if not _own_dir(folder):
                continue
            for child in sorted(folder.iterdir()):
                if f"{sub}/{child.name}" in KINDS or child.name.startswith("."):
                    continue  # a sub-folder listed on its own; a lock file
                entry = _entry(child, kind, busy)
                if entry is not None:
                    out.append(entry)
    return out


def _entry(child: Path, kind: str, busy: _Busy) -> Entry | None:
    """The entry ``child`` of a tool's sub-folder, or None for a link or a file the tool did not make."""
    from jobs.storage.objectstore import server

    st = os.lstat(child)
    if stat.S_ISLNK(st.st_mode):
        return None
    if st.st_uid != os.geteuid():  # never removed, never entered: said
        return Entry(child, kind, 0, f"belongs to {removal.user(st.st_uid)}")
    if kind == "uploads":
        return _record(child, st, busy)
    image = kind == "tiers" and stat.S_ISREG(st.st_mode) and _marked(child)
    if not (stat.S_ISDIR(st.st_mode) or image):
        return None  # a file the tool did not make
    if kind == "s3servers" and not (child / server.MARKER).is_file():
        return None  # not a server's folder
    note = ""
    if kind == "datasets" and not (child / "dataset.json").is_file():
        note = "partial: its generation did not finish"
    return Entry(child, kind, removal.size(str(child), busy.points), _in_use(child, kind, busy), note)


def _record(child: Path, st: os.stat_result, busy: _Busy) -> Entry | None:
    """A run's record of what it put in a bucket: kept while its writer runs (or runs on another host),
    else listed with the objects it names, which nothing deletes once it is purged."""
    from jobs.data import inuse
    from jobs.storage.objectstore import journal

    if not stat.S_ISREG(st.st_mode) or child.suffix != journal.SUFFIX:
        return None
    rec = journal.Journal(child).read()
    if rec is None:
        return None  # not a record (an empty file a run made as it was killed names nothing)
    host, pid = rec.header.get("host"), rec.header.get("pid")
    if host != socket.gethostname():
        in_use = f"made by a campaign on {host}, which this host cannot see"
    elif rec.writer_alive():
        in_use = f"in use by {inuse.describe([pid])}"
    else:
        in_use = ""
    keys = f"{len(rec.keys)} key{'s' * (len(rec.keys) != 1)}"
    note = (
        f"a killed run's record of objects put in bucket {rec.header.get('bucket')} at "
        f"{rec.header.get('endpoint')} ({keys}): purged, the tool no longer deletes them"
    )
    return Entry(child, "uploads", removal.size(str(child), busy.points), in_use, "" if in_use else note)


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def _fs(path: Path) -> str:
    from jobs.observe import provenance

    fs = provenance.mount_of(path).fs_type
    return f"{fs}: in RAM" if fs in ("tmpfs", "ramfs") else fs


def show(found: list[Entry], given: list[str] = ()) -> None:
    """One line per entry, grouped by tool folder, with the total and how to free it (with the roots
    ``given`` as --root, as listed)."""
    import shlex

    if not found:
        where = "under " + ", ".join(given) if given else "on this machine's storage roots (--root adds one)"
        print(f"campaign.cache: the tool keeps nothing {where}")
        return
    base = None
    for e in found:
        here = next(p for p in e.path.parents if p.name.startswith("iocampaign"))
        if here != base:
            base = here
            print(f"{base} ({_fs(base)})")
        note = (f"  [{e.note}]" if e.note else "") + (f"  [{e.in_use}: kept]" if e.in_use else "")
        print(f"  {_human(e.bytes):>9}  {e.kind:<11} {e.path.relative_to(base)}{note}")
    roots_given = "".join(f" --root {shlex.quote(r)}" for r in given)
    print(
        f"{_human(sum(e.bytes for e in found))} in all; free it: python -m campaign.cache purge "
        f"{{{'|'.join(WHAT)}|<path>}}{roots_given}"
    )


def _roots_of(paths: list[str]) -> list[str]:
    """The storage root of each path that lies in one of the user's tool folders (``<root>/iocampaign/
    datasets/<set>``: ``<root>``), so that a path list showed under a --root is purged without it."""
    from jobs import owned

    out = []
    for p in paths:
        for parent in Path(os.path.realpath(p)).parents:
            if owned.is_tool_folder(parent):
                out.append(str(parent.parent))
                break
    return out


@contextlib.contextmanager
def _claimed(e: Entry) -> Iterator[str]:
    """Each lock of the entry's folder taken exclusive without waiting and held while it is removed (a
    dataset's reading lock made first, so a cell that comes meanwhile waits for it); yields "" or, when
    a live process holds one, who."""
    import fcntl

    from jobs.data import inuse

    fds = []
    try:
        for name in LOCKS if e.path.is_dir() and not e.path.is_symlink() else ():
            make = os.O_CREAT if name == inuse.READING and e.kind in ("datasets", "converted") else 0
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | make
            try:
                fds.append(os.open(e.path / name, flags, 0o644))
            except OSError:  # none there (or a link: no lock of the tool's)
                continue
            try:
                fcntl.flock(fds[-1], fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                who = inuse.describe(inuse.holders(e.path / name))
                yield f"in use by {who}" if who else f"in use (its {name} is locked)"
                return
        yield ""
    finally:
        for fd in fds:
            os.close(fd)


def _chosen(e: Entry, what: list[str]) -> bool:
    return "all" in what or e.kind in what or str(e.path) in {os.path.realpath(w) for w in what}


def purge(found: list[Entry], what: list[str]) -> tuple[int, list[Entry]]:
    """Remove the entries ``what`` names (kinds, ``all``, or paths listed); returns the bytes freed and
    the entries kept whole (in use, another user's)."""
    points, freed, refused = _busy().points, 0, []
    for e in (e for e in found if _chosen(e, what)):
        if e.in_use:
            print(f"  kept {e.path}: {e.in_use}")
            refused.append(e)
            continue
        with _claimed(e) as why:
            if why:
                print(f"  kept {e.path}: {why}")
                refused.append(e)
                continue
            gone = removal.remove(str(e.path), points)
        if e.kind == "tiers" and not os.path.lexists(e.path):  # a tier's image, then its marker
            e.path.with_name(e.path.name + MARKER).unlink(missing_ok=True)
        freed += gone.bytes
        for kept in gone.kept[:5]:
            print(f"  kept {kept}")
        if len(gone.kept) > 5:
            print(f"  kept {len(gone.kept) - 5} more items of {e.path} (neither the user's nor on its mount)")
        done = "removed" if not gone.kept else "removed all but the items kept above of"
        print(f"  {done} {e.path} ({_human(gone.bytes)})" + (f": {e.note}" if e.kind == "uploads" else ""))
    return freed, refused


def main(argv: list[str] | None = None) -> int:
    """The command; a reader that stops reading (``| head``) ends it quietly."""
    try:
        return _main(argv)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)  # Python's own advice: no second error at exit
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _main(argv: list[str] | None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m campaign.cache",
        description="the disk (and RAM) the tool keeps between campaigns, and freeing it, as pip cache "
        "list|purge does for pip's",
    )
    p.add_argument("command", choices=["list", "purge"], help="list: what the tool keeps; purge: remove it")
    p.add_argument("what", nargs="*", help=f"with purge: {', '.join(WHAT)}, or paths that list showed")
    p.add_argument(
        "--root",
        action="append",
        default=[],
        help=(
            "look only in this storage root "
            "(repeatable; default: /var/tmp, /dev/shm, /tmp, each preset's root)"
        ),
    )
    args = p.parse_intermixed_args(argv)  # purge --root R all, as purge all --root R
    missing = [r for r in args.root if not os.path.isdir(r)]
    if missing:
        print(f"campaign.cache: --root {missing[0]} is not a folder", file=sys.stderr)
        return 2
    looked = roots(args.root)
    named = [w for w in args.what if w not in WHAT] if args.command == "purge" else []
    linked = [w for w in named if os.path.realpath(w) != os.path.abspath(w)]
    if linked:  # a path is named as list shows it: one through a link (anyone's) is not followed
        print(
            f"campaign.cache: {linked[0]} is or passes through a symbolic link; name the path list shows",
            file=sys.stderr,
        )
        return 2
    found = entries([*looked, *(r for r in _roots_of(named) if r not in looked)])
    if args.command == "list":
        show(found, args.root)
        return 0
    if not args.what:
        print(f"campaign.cache: purge what? {', '.join(WHAT)}, or a path that list shows", file=sys.stderr)
        return 2
    known = {str(e.path) for e in found}
    unknown = [w for w in args.what if w not in WHAT and os.path.realpath(w) not in known]
    if unknown:
        print(
            f"campaign.cache: {unknown[0]} is neither one of {', '.join(WHAT)} nor a folder the tool keeps "
            "(python -m campaign.cache list shows them)",
            file=sys.stderr,
        )
        return 2
    freed, refused = purge(found, args.what)
    print(f"campaign.cache: freed {_human(freed)}")
    named = {os.path.realpath(w) for w in args.what if w not in WHAT}
    return 1 if any(str(e.path) in named for e in refused) else 0  # a path asked for by name is still there


if __name__ == "__main__":
    from jobs.lifeline import exit_as_python

    exit_as_python(lambda: sys.exit(main()))
