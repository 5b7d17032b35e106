"""Every file, folder and module of the repository that the prose names exists: Python comments and
docstrings, the presets under conf/, the docs and the README.

A pointer is a path that starts with one of the repository's top folders (``jobs/runner/runs.py``,
``conf/storage/``), that climbs out of its folder (``../conftest.py``), that starts with the name of one
of the repository's folders (``tensorflow/training.py``), or a bare module or doc name (``runs.py``,
``storage.md``); or a dotted module (``jobs.observe.provenance``, ``campaign.errors.ConfigError``). It
exists relative to the root or to a folder above the file that names it (a Markdown link, a sub-tree
with a ``conf/`` of its own as tests/toy); a bare name anywhere in the tree. ``<name>``, ``{name}`` and
``*`` match as globs; ``<file>.py::<name>`` also needs the name defined in that file. Nothing may point
outside the repository: a committed file cannot count on what lies beside its clone.

Not pointers: bare ``.yaml`` names (Hydra's ``multirun.yaml``, other projects' configs), a name the code
writes or reads (a quoted literal in its Python), and the file a Markdown code block shows, named in the
comment on its first line (the reader writes it).
"""

from __future__ import annotations

import fnmatch
import io
import os
import re
import subprocess
import tokenize
from collections.abc import Callable
from functools import cache

import pytest

from support.paths import ROOT

TOPS = ("analysis", "benchmarks", "campaign", "conf", "docs", "hydra_plugins", "jobs", "tests")
PACKAGES = ("analysis", "benchmarks", "campaign", "hydra_plugins", "jobs")
SCANNED = (".py", ".yaml", ".md")
EXTENSIONS = (".py", ".yaml", ".md")  # of the files a path without a top folder may name
ROOTED = (*(f"{t}/" for t in TOPS), "../")  # paths relative to the root, or to the file that names them
NOT_MODULES = {"py", "yaml", "md", "json", "csv", "txt", "html", "png", "log", "sh", "toml"}  # file names
_PART = r"(?:[\w.*-]|<[^<>\s]+>|\{[^{}\s,]+\})"  # a name, or a placeholder: <name>, {name}, *
_BEFORE = r"(?<![\w./<>{}*~$:-])"  # not inside a longer path, a URL, ~/... or $VAR/...
_EXT = "|".join(e[1:] for e in EXTENSIONS)
PATH = re.compile(
    _BEFORE
    + rf"(?:\.\./)*(?:(?:{'|'.join(TOPS)})/(?:{_PART}|/)*|(?:{_PART}|/)*{_PART}\.(?:{_EXT})\b)(?:::\w+)?"
)
DOTTED = re.compile(_BEFORE + rf"(?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+")


@cache
def _files() -> tuple[str, ...]:
    """The repository's files: tracked, and new ones git does not ignore (a pointer to a file just added)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the scanned files are the repository's tracked ones")
    return tuple(sorted({f for f in out.split("\0") if f and (ROOT / f).is_file()}))


@cache
def _tree() -> frozenset[str]:
    """Every file and folder of the repository, relative to its root."""
    out = set()
    for f in _files():
        parts = f.split("/")
        out.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(out)


@cache
def _folder_names() -> frozenset[str]:
    return frozenset(os.path.basename(os.path.dirname(f)) for f in _files()) - {""}


@cache
def _text(f: str) -> str:
    return (ROOT / f).read_text(errors="replace")


@cache
def _python() -> str:
    """Every Python file's text, one string: where a name the code writes or reads appears quoted."""
    return "\n".join(_text(f) for f in _files() if f.endswith(".py"))


def _glob(path: str) -> str:
    """``path`` with its placeholders (``<name>``, ``{name}``) as ``*``."""
    return re.sub(r"<[^<>]*>|\{[^{}]*\}", "*", path.rstrip("/"))


def _exists(rel: str) -> bool:
    if not re.search(r"[*<{]", rel):
        return rel.rstrip("/") in _tree()
    pattern = _glob(rel)
    return any(fnmatch.fnmatchcase(p, pattern) for p in _tree())


def _find(f: str, path: str) -> str | None:
    """Where ``path``, named in ``f``, is: relative to the root or to a folder above ``f`` (``../``
    paths: to ``f``'s own); else, when it starts with no top folder, a path that ends with it."""
    folders = [os.path.dirname(f)]
    while folders[-1] and not path.startswith("../"):
        folders.append(os.path.dirname(folders[-1]))
    for d in folders:
        p = os.path.normpath(os.path.join(d, path))
        if not p.startswith("..") and _exists(p):
            return p
    if path.startswith(ROOTED):
        return None
    pattern = f"*/{_glob(path)}"
    return next((p for p in _tree() if fnmatch.fnmatchcase(p, pattern)), None)


def _not_a_pointer(path: str) -> bool:
    """Another project's path or a campaign's output (its first folder is none of the repository's), a
    bare ``.yaml`` name, or a name the code writes or reads."""
    if path.startswith(ROOTED):
        return False
    if "/" in path:
        return path.split("/")[0] not in _folder_names()
    return path.endswith(".yaml") or re.search(rf"[\"'/]{re.escape(path)}[\"']", _python()) is not None


def _defines(f: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^{name}\s*[:=]", _text(f), re.M) is not None


def _why_not(f: str, ref: str) -> str | None:
    """Why ``ref``, named in ``f``, points at nothing; None when it points at a file or folder."""
    path, _, name = ref.partition("::")
    path = path.rstrip(".-")
    if path.startswith("../") and os.path.normpath(os.path.join(os.path.dirname(f), path)).startswith(".."):
        return "points outside the repository"
    found = _find(f, path)
    if found is None and path.startswith("../"):
        return "points at nothing in the repository (nor may it point outside it)"
    if found is None:
        return None if _not_a_pointer(path) else "does not exist"
    if name and found.endswith(".py") and not _defines(found, name):
        return f"has no {name}"
    return None


@cache
def _modules() -> dict[str, str]:
    """Dotted name -> file of every module of the repository's packages."""
    out = {}
    for f in _files():
        if f.endswith(".py") and f.startswith(tuple(f"{p}/" for p in PACKAGES)):
            parts = f[: -len(".py")].split("/")
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _why_not_module(_: str, ref: str) -> str | None:
    """Why the dotted ``ref`` names nothing: no such module, or no such name in its module."""
    parts, modules = ref.split("."), _modules()
    if parts[-1] in NOT_MODULES:
        return None
    for k in range(len(parts), 0, -1):
        module = ".".join(parts[:k])
        if module in modules:
            if k == len(parts) or re.search(rf"\b{parts[k]}\b", _text(modules[module])):
                return None
            return f"names neither a module nor a name of {modules[module]}"
    return "is no module of the repository"


def _prose(f: str, text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the prose in ``f``: a Python file's comments and docstrings, a doc's text
    but the first line of a code block when it is a comment (the name of the file the block shows)."""
    if f.endswith(".yaml"):
        return [(0, len(text))]
    starts = [0, *(m.end() for m in re.finditer("\n", text))]
    if f.endswith(".md"):
        spans, fence, first = [], False, False
        for start, end in zip(starts, [*starts[1:], len(text)]):
            line = text[start:end].lstrip()
            if line.startswith("```"):
                fence = first = not fence
                continue
            if not (first and line.startswith(("#", "//"))):
                spans.append((start, end))
            first = False
        return spans
    spans, before = [], tokenize.NEWLINE
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        docstring = tok.type == tokenize.STRING and before in (
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
        )
        if tok.type == tokenize.COMMENT or docstring:
            spans.append((starts[tok.start[0] - 1] + tok.start[1], starts[tok.end[0] - 1] + tok.end[1]))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            before = tok.type
    return spans


def _matches(text: str, pattern: re.Pattern, needles: tuple[str, ...]) -> dict[int, str]:
    """Offset -> match of ``pattern`` at each path-like word that holds one of ``needles``: the pattern
    tries only where a needle is, not at every offset of the scanned text (1.5 MB)."""
    found = {}
    for needle in needles:
        i = text.find(needle)
        while i >= 0:
            s = i
            while s and (text[s - 1].isalnum() or text[s - 1] in "_.*<>{}/-"):
                s -= 1
            if s not in found and (m := pattern.match(text, s)) and m.end() > i:
                found[s] = m.group(0)
            i = text.find(needle, i + 1)
    return found


def _offenders(pattern: re.Pattern, needles: tuple[str, ...], why: Callable) -> list[str]:
    """``file:line: ref why`` of every match of ``pattern`` in the prose that ``why`` finds wrong."""
    found = []
    for f in _files():
        if not f.endswith(SCANNED):
            continue
        text, spans = _text(f), None
        for at, ref in sorted(_matches(text, pattern, needles).items()):
            reason = why(f, ref)
            if reason is None:
                continue
            spans = spans if spans is not None else _prose(f, text)  # only for a file that needs them
            if any(a <= at < b for a, b in spans):
                found.append(f"{f}:{text.count(chr(10), 0, at) + 1}: {ref} {reason}")
    return found


def test_every_path_the_prose_names_exists():
    offenders = _offenders(PATH, (*(f"{t}/" for t in TOPS), *EXTENSIONS), _why_not)
    assert not offenders, f"{len(offenders)} path(s) named in comments, docs or presets:\n" + "\n".join(
        offenders
    )


def test_every_module_the_prose_names_exists():
    offenders = _offenders(DOTTED, tuple(f"{p}." for p in PACKAGES), _why_not_module)
    assert not offenders, f"{len(offenders)} module(s) named in comments, docs or presets:\n" + "\n".join(
        offenders
    )
