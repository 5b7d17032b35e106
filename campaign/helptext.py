"""``python -m campaign --help``: Hydra's own help (``conf/hydra/help/campaign.yaml``) with two
OmegaConf resolvers that fill in what would drift if written by hand: the presets of each group (the
files of ``conf/<group>/``, without the schemas Hydra's ConfigStore adds and the workloads' default
sets) and the campaign's own settings (the fields of ``jobs.schema.CampaignConf``, with their
comments)."""

from __future__ import annotations

import inspect
import re
import textwrap
from pathlib import Path

CONF = Path(__file__).resolve().parent.parent / "conf"
GROUPS = (
    "workload",
    "framework",
    "storage",
    "dataset",
    "platform",
    "accelerator",
    "checkpoint_model",
    "experiment",
)
INTERNAL = re.compile(r"^default_for_|_schema$")  # a workload's own dataset; a ConfigStore schema
_FIELD = re.compile(r"^\s+(\w+): [^=]+=.+?\s# (.+)$")  # a field, its comment


def presets() -> str:
    """One line per group: ``group: preset, preset, ...`` (wrapped), from the files in conf/."""
    lines = []
    for group in GROUPS:
        names = sorted(p.stem for p in (CONF / group).glob("*.yaml") if not INTERNAL.search(p.stem))
        lines += textwrap.wrap(
            ", ".join(names), 100, initial_indent=f"  {group + ':':<18}", subsequent_indent=" " * 20
        )
    return "\n".join(lines)


def settings() -> str:
    """The campaign's own settings with their defaults and meaning: the schema's fields and comments."""
    import dataclasses
    import enum

    from jobs import schema

    comments = dict(
        m.groups() for m in map(_FIELD.match, inspect.getsource(schema.CampaignConf).splitlines()) if m
    )
    lines = []
    for f in dataclasses.fields(schema.CampaignConf):
        # groups: above
        if f.name not in comments or f.name in GROUPS or f.name == "stage" or f.default == "???":
            continue
        if f.default is not dataclasses.MISSING:
            value = f.default.name if isinstance(f.default, enum.Enum) else f.default
            text = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
            shown = f"{f.name}={text}"
        else:  # a section of its own (input, trace)
            shown = f"{f.name}.<key>"
        lines.append(f"  {shown:<20} {comments[f.name]}")
    return "\n".join(lines)


def register() -> None:
    """The resolvers the help's template uses (idempotent)."""
    from omegaconf import OmegaConf

    for name, fn in (("iocampaign_presets", presets), ("iocampaign_settings", settings)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
