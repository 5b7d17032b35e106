"""Catch an unknown preset name on the command line before Hydra composes anything."""

from __future__ import annotations

import re
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("workload", "storage", "dataset", "platform")
_ARG = re.compile(r"^(?:\+{1,2}|~)?(?P<group>[a-z_]+)=(?P<value>[^\s]*)$")


def presets(group: str) -> list[str]:
    """Names of the YAML presets of a config group."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


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
            if name not in valid:
                return f"unknown {m['group']} '{name}' (in '{arg}'); valid: {', '.join(valid)}"
    return None
