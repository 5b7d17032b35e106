"""What defines a cell, as compared across campaigns (``python -m analysis compare``) and between a
staged cell and the same cell read in place: its resolved config as flat, normalised keys."""

from __future__ import annotations

# Config keys that say where things live or how a cell was launched, not what it measured: two cells
# that differ only there are the same cell (a campaign rerun on another mount, queue or account).
_WHERE = (".root", ".image_dir", ".lock_dir", ".description", ".label", "dataset.path")
_LAUNCH_KEPT = ("platform.nodes", "platform.tasks_per_node")  # of the platform, what changes the measurement


def identity(config: dict, ignore: tuple[str, ...] = ()) -> dict[str, str]:
    """What defines a cell: its resolved config as flat dotted keys with normalised values (224 and
    224.0 are one value), without where things live and how it was launched; keys under ``ignore``
    (dotted prefixes: the setting being compared) left out."""
    return {
        k: v
        for k, v in flatten(config).items()
        if not k.endswith(_WHERE)
        and (not k.startswith("platform.") or k in _LAUNCH_KEPT)
        and not any(k == i or k.startswith(i + ".") for i in ignore)
    }


def flatten(config: dict) -> dict[str, str]:
    """A resolved config as flat dotted keys with normalised values (224 and 224.0 are one value), every
    key but Hydra's node."""
    import json
    import math

    def norm(v) -> str:
        if isinstance(v, bool) or v is None:
            return json.dumps(v)
        if isinstance(v, (int, float)):
            if isinstance(v, float) and math.isnan(v):
                return "nan"
            return str(int(v)) if float(v).is_integer() else repr(float(v))  # 224 and 224.0: "224"
        if isinstance(v, (list, tuple)):
            return "[" + ",".join(norm(x) for x in v) + "]"
        return str(v)

    flat: dict[str, str] = {}

    def walk(prefix: str, v) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{prefix}.{k}" if prefix else str(k), x)
        else:
            flat[prefix] = norm(v)

    walk("", {k: v for k, v in config.items() if k != "hydra"})
    return flat
