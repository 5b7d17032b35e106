"""Plan a sweep: every cell's resolved config, its id and its checks, in time linear in the cells.

Hydra composes a config in 0.25-0.7 s. Cells of a grid differ mostly in plain values
(``threads=4``, ``batch_size=32``), not in config-group choices, so the planner composes once per
distinct set of group choices and applies each cell's plain values to a copy of that composition's
resolved data. Each value is first type-checked and converted by the structured config itself
(``threads=4`` stays an int, ``workload.read_delay_ms=3`` becomes 3.0, ``cache=cold`` an enum name),
once per distinct (choices, key, value). A cell whose overrides Hydra must interpret itself
(``+key=``, ``~key``, ``hydra.*``, a value holding an interpolation) is composed in full.
Tests pin that a planned cell's config and id equal those of a full composition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from campaign.choices import GROUPS
from campaign.errors import ConfigError
from jobs.cell import Cell, typed, updated
from jobs.plan import cell_id, resolved, with_values
from jobs.schema import CampaignConf


def _is_group(key: str) -> bool:
    """A key that names a config group chooses a preset: composed, not set."""
    return key in GROUPS or "@" in key or "/" in key


_FULL, _GROUP, _VALUE = "full", "group", "value"  # how a cell's override is planned (_kind)


def _kind(raw: str, o) -> tuple[str, str, Any]:
    """(how the override is planned, its key, its value) of Hydra's parsed override ``o`` of ``raw``:
    _FULL where Hydra must compose the cell itself (``+key=``, ``~key``, ``hydra.*``, an interpolated
    value), _GROUP for a config group's choice, _VALUE for a plain value."""
    key = o.key_or_group
    if o.is_add() or o.is_delete() or o.is_force_add() or key.startswith("hydra") or "${" in raw:
        return _FULL, key, None
    if _is_group(key) or o.package is not None:
        return _GROUP, key, None
    return _VALUE, key, o.value()


class Planner:
    """Resolved configs of cells, composing once per distinct set of config-group choices."""

    def __init__(self, compose) -> None:
        # compose(overrides) -> the composed DictConfig of those overrides (its hydra node, if any, is left
        # out of the resolved data); a typed one, so that an interpolated value is checked against its
        # field's type
        self._compose = compose
        self._bases: dict[tuple, tuple[Any, dict]] = {}
        self._values: dict[tuple, Any] = {}
        self._typed: dict[tuple, Any] = {}  # the typed config of each composition
        # each override's kind, key and value (_kind): Hydra's parser costs ~1 ms an override: each once
        self._parsed: dict[str, tuple] = {}
        self._parser = None  # Hydra's override parser, made once (making one costs about as much again)
        self.compositions = 0

    def _base(self, groups: tuple) -> tuple[Any, dict]:
        if groups not in self._bases:
            cfg = self._compose(list(groups))
            self.compositions += 1
            self._bases[groups] = (cfg, resolved(cfg))
        return self._bases[groups]

    def _value(self, groups: tuple, key: str, raw: str, value: Any) -> Any:
        """``value`` for ``key`` as the structured config types it, as plain data."""
        memo = (groups, key, raw)
        if memo not in self._values:
            from omegaconf import OmegaConf
            from omegaconf.errors import OmegaConfBaseException

            cfg, _ = self._base(groups)
            try:
                OmegaConf.update(cfg, key, value, merge=False)
                node = OmegaConf.select(cfg, key, throw_on_missing=False)
            except OmegaConfBaseException as e:
                raise ConfigError(f"{raw}: {str(e).splitlines()[0]}") from None
            if OmegaConf.is_config(node):
                node = OmegaConf.to_container(node, resolve=True, enum_to_str=True)
            elif hasattr(node, "name") and hasattr(node, "value"):  # an enum member
                node = node.name
            self._values[memo] = node
        return self._values[memo]

    def _composed(self, overrides: Sequence[str]) -> dict:
        """The resolved config of a full composition; an interpolated value resolved and type-checked
        (``OmegaConf.to_container`` would resolve ``batch_size=${dataset.name}`` to a string unchecked)."""
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        cfg = self._compose(list(overrides))
        held = [raw for raw in overrides if "${" in raw]
        try:
            for raw in held:
                key = raw.split("=", 1)[0].lstrip("+~")
                if not key.startswith("hydra"):
                    OmegaConf.select(cfg, key)
            return resolved(cfg)
        except OmegaConfBaseException as e:
            raise ConfigError(
                f"{held[0] if held else ' '.join(overrides)}: {str(e).splitlines()[0]}"
            ) from None

    def _split(self, overrides: Sequence[str]) -> tuple[tuple, list] | None:
        """(the group choices, the plain values as (raw, key, value)) of ``overrides``; None for a cell
        Hydra must compose in full (``+key=``, ``~key``, ``hydra.*``, an interpolated value)."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        new = [raw for raw in overrides if raw not in self._parsed]
        if new:
            self._parser = self._parser or OverridesParser.create()
            self._parsed.update(
                (raw, _kind(raw, o)) for raw, o in zip(new, self._parser.parse_overrides(new))
            )
        groups, values = [], []
        for raw in overrides:
            kind, key, value = self._parsed[raw]
            if kind is _FULL:
                return None
            if kind is _GROUP:
                groups.append(raw)
            else:
                values.append((raw, key, value))
        return tuple(groups), values

    def config(self, overrides: Sequence[str]) -> dict:
        """The resolved config of the cell made by ``overrides``."""
        split = self._split(overrides)
        return self._composed(overrides) if split is None else self._data(*split)

    def _data(self, groups: tuple, values: list) -> dict:
        """The resolved config of the composition ``groups`` with ``values`` set, as plain data."""
        _, base = self._base(groups)
        # the sections a value changes are copied, the rest shared with the composition's (read-only)
        return with_values(base, [(key, self._value(groups, key, raw, value)) for raw, key, value in values])

    def cell(self, overrides: Sequence[str]) -> Cell:
        """The cell made by ``overrides``, built once: its typed config, its data and its id. A cell of a
        composition planned before shares that composition's typed sections, but for the values it sets
        (a planned cell's config is read-only, so sharing is safe)."""
        split = self._split(overrides)
        if split is None:  # Hydra's own semantics, in full
            return Cell.from_data(self._composed(overrides), overrides)
        groups, values = split
        data = self._data(groups, values)
        if groups not in self._typed:
            self._typed[groups] = typed(CampaignConf, self._base(groups)[1])
        config = self._typed[groups]
        try:
            for raw, key, value in values:
                config = updated(config, key, self._value(groups, key, raw, value))
        except (AttributeError, KeyError, TypeError):  # a value under a section left unset: built in full
            return Cell.from_data(data, overrides)
        return Cell(config, data, cell_id(data), tuple(overrides))
