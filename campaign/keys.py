"""Catch an override whose key the campaign does not have (``thread=4``, ``+thread=4``) before Hydra
composes anything: under ``-m`` Hydra's sweep would plan cells without it, and ``+`` would add a key no
code reads. The known keys are the schema's (jobs/schema.py, every workload's own) and the config
groups' (the folders of ``conf/`` and of ``hydra.searchpath``)."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import typing
from enum import Enum

from campaign import choices

OPEN = "*"  # a field whose value is a list, a dict or anything: keys below it are the value's own


def _dataclass_of(tp) -> type | None:
    """The dataclass ``tp`` is, or holds as Optional[...]; None otherwise."""
    if dataclasses.is_dataclass(tp):
        return tp
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if len(args) == 1 and dataclasses.is_dataclass(args[0]) else None


def _leaf(tp) -> str:
    """ "" for a plain value (a number, text, an enum), OPEN for a container or Any."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    tp = args[0] if typing.get_origin(tp) is typing.Union and len(args) == 1 else tp
    if tp in (str, int, float, bool) or (isinstance(tp, type) and issubclass(tp, Enum)):
        return ""
    return OPEN


def schema_keys(cls: type, prefix: str = "") -> dict[str, str]:
    """Every dotted key of the dataclass ``cls`` (its nested dataclasses' too): "" for a plain value or a
    section, OPEN for a field whose value is a container. A new dict, the caller's to change."""
    return dict(_schema_keys(cls, prefix))


@functools.cache
def _schema_keys(cls: type, prefix: str) -> dict[str, str]:
    """``schema_keys``, made once per schema and prefix (``typing.get_type_hints`` evaluates every
    annotation of the class each time it is asked; every command asks, the planner once per cell)."""
    out: dict[str, str] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        inner = _dataclass_of(hints[f.name])
        if inner is not None:
            out[key] = ""
            out.update(_schema_keys(inner, key + "."))
        else:
            out[key] = _leaf(hints[f.name])
    return out


def known(args: list[str]) -> tuple[dict[str, str], set[str]]:
    """(every key a cell's config can have, the config groups) for the command line ``args``."""
    from jobs import schema, workloads

    keys = schema_keys(schema.CampaignConf)
    for name in workloads.names():  # each workload's schema adds its own settings under workload.
        keys.update(schema_keys(workloads.get(name).schema, "workload."))
    for node in ("accelerator", "checkpoint.model"):  # null by default: the group's preset fills them
        keys[node] = ""
    keys.update(schema_keys(schema.AcceleratorConf, "accelerator."))
    keys.update(schema_keys(schema.CheckpointModelConf, "checkpoint.model."))
    groups = {
        p.name
        for d in [choices.CONF_DIR, *choices.searchpath(args)]
        if d.is_dir()
        for p in d.iterdir()
        if p.is_dir() and any(p.glob("*.yaml"))
    }
    return keys, groups


def _suggest(key: str, keys: dict[str, str], groups: set[str]) -> str:
    """ " (did you mean X?)" from the key's own section (the top level for a key without one), or that
    section's settings, or where to list them."""
    parent = key.rsplit(".", 1)[0] if "." in key else ""
    if parent in keys:  # the last part, among its section's settings
        names = [
            k[len(parent) + 1 :]
            for k in keys
            if k.startswith(parent + ".") and "." not in k[len(parent) + 1 :]
        ]
        close = difflib.get_close_matches(key[len(parent) + 1 :], names, n=1, cutoff=0.6)
        if close:
            return f" (did you mean {parent}.{close[0]}?)"
        return f" ({parent}'s settings: {', '.join(names)})"
    close = difflib.get_close_matches(key, [*keys, *groups], n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]}?)"
    return " (python -m campaign --cfg job shows every setting)"


def _under_open(key: str, keys: dict[str, str]) -> bool:
    parts = key.split(".")
    return any(keys.get(".".join(parts[:i])) == OPEN for i in range(1, len(parts)))


def unknown_key(args: list[str]) -> str | None:
    """One line naming the first override whose key the campaign does not have, with the nearest known
    key (``unknown setting 'thread' (did you mean threads?)``), or a ``+`` on a setting the config has
    already (``+threads=4``: write ``threads=4``), or None. Hydra's own keys (``hydra.*``) are Hydra's."""
    keys = groups = None
    for arg in args:
        if arg.startswith("-") or "=" not in arg and not arg.startswith("~"):
            continue
        written = arg.split("=", 1)[0]
        key = written.lstrip("+~")
        if not key or key.startswith(("hydra.", "hydra/")) or key == "hydra":
            continue
        if keys is None:
            keys, groups = known(args)
        group = key.split("@", 1)[0].split("/", 1)[0]
        if "@" in key or "/" in key or key in groups:
            if group not in groups:
                return f"unknown setting '{group}' (in '{arg}'){_suggest(group, keys, groups)}"
            continue  # a group's choice: its value is unknown_choice's
        if key not in keys and not _under_open(key, keys):
            return f"unknown setting '{key}'{_suggest(key, keys, groups)}"
        if written.startswith("+") and not written.startswith("++"):
            return (
                f"{arg}: {key} is a setting already: write {arg.lstrip('+')} "
                "(+ adds a setting the config lacks)"
            )
    return None
