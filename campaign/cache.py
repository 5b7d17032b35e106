"""``python -m campaign.cache list|purge``: the disk (and RAM) the tool keeps between campaigns, and
freeing it, as ``pip cache list|purge`` does for pip's.

What it keeps lies in its own folder under each storage root (``jobs.owned.tool_folder``: ``iocampaign``,
or ``iocampaign-<user>`` in a folder every user may write): generated and converted datasets, the backing
files of emulated tiers (``storage.emulate.image_dir``) and of modelled ones (``storage.model.backing_dir``),
staged copies, kept checkpoints, the read baseline's files. The roots looked at are /var/tmp, /dev/shm and
/tmp, every storage preset's root (an emulated tier's mount holds datasets too) and each ``--root``.

``purge`` removes only entries of the user's own tool folders that the user owns; never a link (and
nothing a link points to), never a tier image that is attached to a loop device or mounted, never a file
the tool does not make (a file of the user's beside its folders stays as it is).
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

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
}
MARKER = ".iocampaign"  # beside an emulated tier's image: the tool made it (jobs.storage.tiers)
WHAT = ("all", *sorted(set(KINDS.values())))


@dataclass(frozen=True)
class Entry:
    path: Path  # a folder (or a tier's image file) the tool made
    kind: str  # one of KINDS' values
    bytes: int  # the disk (or RAM, on tmpfs) it takes: allocated blocks, links not followed
    in_use: str = ""  # why it must stay (an attached or mounted tier), or ""


# where a tier preset's images or backing files go when it names no folder (the schema's defaults)
SCHEMA_FOLDERS = {"image_dir": EmulateConf.image_dir, "backing_dir": ModelConf.backing_dir}


def roots(extra: list[str]) -> list[str]:
    """The storage roots to look in: ``extra`` when given, else the usual ones and every storage preset's
    root and image folder."""
    from omegaconf import OmegaConf

    if extra:
        return list(dict.fromkeys(os.path.abspath(r) for r in extra))
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
        if r != "???" and "${" not in r and os.path.abspath(r) not in out:
            out.append(os.path.abspath(r))
    return out


def _own_dir(path: Path) -> bool:
    """A real folder (not a link) that the user owns."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def size(path: Path) -> int:
    """Bytes allocated below ``path`` (as du: blocks, so a sparse image counts what it holds), no link
    followed."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    total = st.st_blocks * 512
    if stat.S_ISDIR(st.st_mode):
        for dirpath, dirs, files in os.walk(path):  # os.walk never descends into a link to a folder
            for name in dirs + files:
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
                except OSError:
                    pass
    return total


def _busy() -> tuple[list[str], list[str]]:
    """(every mount's source and mount point, every loop device's backing file)."""
    mounts, loops = [], []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.rstrip("\n").split(" - ", 1)
            mounts += [left.split()[4].replace("\\040", " "), right.split()[1]]
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            loops.append(backing.read_text().strip().removesuffix(" (deleted)"))
        except OSError:
            pass
    return mounts, loops


def _in_use(path: Path, kind: str, busy: tuple[list[str], list[str]]) -> str:
    mounts, loops = busy
    p = str(path)
    if any(x == p or x.startswith(p + "/") for x in loops):
        return "attached to a loop device"
    if any(x == p or x.startswith(p + "/") for x in mounts):
        return "mounted"
    if kind == "tiers" and any(
        os.path.basename(x.rstrip("/")) == path.stem or x.endswith(path.stem) for x in mounts
    ):
        return f"its tier {path.stem} is mounted"
    return ""


def _marked(image: Path) -> bool:
    """An emulated tier's image the tool made: ``<tier>.img`` beside its marker ``<tier>.img.iocampaign``."""
    marker = image.with_name(image.name + MARKER)
    return image.suffix == ".img" and marker.is_file() and not marker.is_symlink()


def entries(root_list: list[str]) -> list[Entry]:
    """What the tool keeps under each root's tool folder, entry by entry."""
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
                st = os.lstat(child)
                image = kind == "tiers" and stat.S_ISREG(st.st_mode) and _marked(child)
                if st.st_uid != os.geteuid() or not (stat.S_ISDIR(st.st_mode) or image):
                    continue  # a link, another user's, or a file the tool did not make
                out.append(Entry(child, kind, size(child), _in_use(child, kind, busy)))
    return out


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


def show(found: list[Entry]) -> None:
    """One line per entry, grouped by tool folder, with the total and how to free it."""
    if not found:
        print("campaign.cache: the tool keeps nothing on this machine's storage roots (--root adds one)")
        return
    base = None
    for e in found:
        here = next(p for p in e.path.parents if p.name.startswith("iocampaign"))
        if here != base:
            base = here
            print(f"{base} ({_fs(base)})")
        note = f"  [{e.in_use}: kept]" if e.in_use else ""
        print(f"  {_human(e.bytes):>9}  {e.kind:<11} {e.path.relative_to(base)}{note}")
    print(
        f"{_human(sum(e.bytes for e in found))} in all; free it: python -m campaign.cache purge "
        f"{{{'|'.join(WHAT)}|<path>}}"
    )


def purge(found: list[Entry], what: list[str]) -> int:
    """Remove the entries ``what`` names (kinds, ``all``, or paths listed); returns bytes freed."""
    freed = 0
    for e in found:
        if not (
            "all" in what or e.kind in what or str(e.path) in what or os.path.abspath(str(e.path)) in what
        ):
            continue
        if e.in_use:
            print(f"  kept {e.path}: {e.in_use}")
            continue
        if e.path.is_symlink():  # replaced by a link since it was listed
            continue
        if e.path.is_dir():
            shutil.rmtree(e.path)  # removes links inside, never what they point to
        else:  # a tier's image, then its marker
            e.path.unlink()
            e.path.with_name(e.path.name + MARKER).unlink(missing_ok=True)
        freed += e.bytes
        print(f"  removed {e.path} ({_human(e.bytes)})")
    return freed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m campaign.cache", description=__doc__.split("\n")[0])
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
    found = entries(roots(args.root))
    if args.command == "list":
        show(found)
        return 0
    if not args.what:
        print(f"campaign.cache: purge what? {', '.join(WHAT)}, or a path that list shows", file=sys.stderr)
        return 2
    known = {str(e.path) for e in found}
    unknown = [w for w in args.what if w not in WHAT and os.path.abspath(w) not in known]
    if unknown:
        print(
            f"campaign.cache: {unknown[0]} is neither one of {', '.join(WHAT)} nor a folder the tool keeps "
            "(python -m campaign.cache list shows them)",
            file=sys.stderr,
        )
        return 2
    freed = purge(found, args.what)
    print(f"campaign.cache: freed {_human(freed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
