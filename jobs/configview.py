"""Attribute access over a cell's resolved config as plain data (``cfg.storage.root``), as a DictConfig
offers: what checks, the runner and workloads read a cell's settings through."""

from __future__ import annotations

from typing import Any

from jobs.errors import ConfigError


class View:
    """Attribute access over a plain config dict (``cfg.storage.root``), as a DictConfig offers."""

    __slots__ = ("_d",)

    def __init__(self, d: dict) -> None:
        self._d = d

    def __getattr__(self, key: str) -> Any:
        try:
            return self._wrap(self._d[key])
        except KeyError:
            raise AttributeError(key) from None

    def __getitem__(self, key: str) -> Any:
        return self._wrap(self._d[key])

    def get(self, key: str, default: Any = None) -> Any:
        return self._wrap(self._d.get(key, default))

    @staticmethod
    def _wrap(v: Any) -> Any:
        return View(v) if isinstance(v, dict) else v

    def select(self, dotted: str) -> Any:
        v: Any = self._d
        for part in dotted.split("."):
            if not isinstance(v, dict) or part not in v:
                return None
            v = v[part]
        return self._wrap(v)


def threads_value(raw) -> int | str:
    """``threads`` as the pipeline takes it: a positive int or "autotune"."""
    if isinstance(raw, str) and raw.strip().lower() == "autotune":
        return "autotune"
    if isinstance(raw, bool):
        raise ConfigError(f"threads={raw} is not a number: give a positive integer or 'autotune'")
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"threads={raw} is not a number: give a positive integer or 'autotune'") from None
    if value < 1 or str(value) != str(raw).strip():
        raise ConfigError(f"threads={raw} must be a positive integer (num_parallel_calls) or 'autotune'")
    return value
