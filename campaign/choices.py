"""Catch an unknown preset name on the command line before Hydra composes anything."""

from __future__ import annotations

import re
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("workload", "storage", "dataset", "platform", "experiment")
ALIAS_PREFIX = "default_for_"  # dataset/default_for_<workload>: the dataset a workload uses by default
_ARG = re.compile(r"^(?:\+{1,2}|~)?(?P<group>[a-z_]+)(?:@[\w.]+)?=(?P<value>[^\s]*)$")


def presets(group: str, aliases: bool = False) -> list[str]:
    """Names of the YAML presets of a config group (the per-workload default aliases only if asked)."""
    names = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
    return names if aliases else [n for n in names if not n.startswith(ALIAS_PREFIX)]


def unknown_choice(args: list[str]) -> str | None:
    """One line naming the first unknown group choice in ``args`` and the valid ones, or None."""
    for arg in args:
        m = _ARG.match(arg)
        if not m or m["group"] not in GROUPS:
            continue
        value = m["value"]
        if not re.fullmatch(r"[\w.-]+(,[\w.-]+)*", value):
            continue  # sweep functions such as choice(...) are Hydra's to parse
        valid = presets(m["group"])
        for name in value.split(","):
            if name not in presets(m["group"], aliases=True):
                return f"unknown {m['group']} '{name}' (in '{arg}'); valid: {', '.join(valid)}"
    return None
