"""Plan a sweep: every cell's resolved config, its id and its checks, in time linear in the cells.

Hydra composes a config in 0.25-0.7 s. Cells of a grid differ mostly in plain values
(``threads=4``, ``batch_size=32``), not in config-group choices, so the planner composes once per
distinct set of group choices and applies each cell's plain values to a copy of that composition's
resolved data; the set the command line itself chooses is Hydra's primary config, already composed
(``Planner.adopt``). Each value is first type-checked and converted by the structured config itself
(``threads=4`` stays an int, ``workload.read_delay_ms=3`` becomes 3.0, ``cache=cold`` an enum name),
once per distinct (choices, key, value). A cell whose overrides Hydra must interpret itself
(``+key=``, ``~key``, ``hydra.*``, a value holding an interpolation) is composed in full, and so is a
cell that sets a value an interpolation reads (the resolved data would keep what it read before).
Tests pin that a planned cell's config and id equal those of a full composition.
"""

from __future__ import annotations

import re
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


_PARSED = object()  # _kind: the value is the parsed override's own


def _kind(raw: str, o, value: Any = _PARSED) -> tuple[str, str, Any]:
    """(how the override is planned, its key, its value) of Hydra's parsed override ``o`` of ``raw``:
    _FULL where Hydra must compose the cell itself (``+key=``, ``~key``, ``hydra.*``, an interpolated
    value, a dict, which Hydra merges into the section it names), _GROUP for a config group's choice,
    _VALUE for a plain value (``value``: one element of the sweep ``o``)."""
    key = o.key_or_group
    if o.is_add() or o.is_delete() or o.is_force_add() or key.startswith("hydra") or "${" in raw:
        return _FULL, key, None
    if _is_group(key) or o.package is not None:
        return _GROUP, key, None
    value = o.value() if value is _PARSED else value
    if isinstance(value, dict):  # loader={num_workers:2}: merged by Hydra, not set whole
        return _FULL, key, None
    return _VALUE, key, value


# The types of a sweep's elements that Hydra writes into a cell's override and parses back as they were
# (a quoted string, a list or a dict is parsed again, from the cell's override)
_PLAIN = (int, float, bool, str)


# what an interpolation reads: ${a.b}, or oc.select's key (${oc.select:a.b,1}, ${oc.select: 'a.b', 1});
# a resolver that reads no config (oc.env, now); anything else (a nested or another resolver's
# interpolation) is taken to read anything (ANY)
_KEY = r"([A-Za-z_][\w.]*)"
_PLAIN_READ = re.compile(rf"\$\{{\s*{_KEY}\s*\}}")
_SELECT_READ = re.compile(rf"\$\{{\s*oc\.select\s*:\s*(['\"]?){_KEY}\1\s*(?:,[^${{}}]*)?\}}")
_READS_NOTHING = re.compile(r"\$\{\s*(?:oc\.env|now)\s*:[^${}]*\}")
ANY = "."  # a read this cannot tell (a relative ${.x} among them): setting any value may change it


def _reads(text: str) -> set[str]:
    """The keys the interpolations in ``text`` read (``ANY`` for one this cannot tell)."""
    reads = set(_PLAIN_READ.findall(text)) | {key for _, key in _SELECT_READ.findall(text)}
    rest = _READS_NOTHING.sub("", _SELECT_READ.sub("", _PLAIN_READ.sub("", text)))
    return reads | ({ANY} if "${" in rest else set())


def interpolated_keys(cfg) -> frozenset[str]:
    """The keys the interpolations of a composition's own sections read (Hydra's node left out); ``ANY``
    where one reads what this cannot tell (a relative or nested interpolation, another resolver)."""
    from omegaconf import OmegaConf

    reads: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
        elif isinstance(node, str) and "${" in node:
            reads.update(_reads(node))

    walk(OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=False))
    return frozenset(reads)


def _overlaps(key: str, read: str) -> bool:
    """Whether setting ``key`` changes what reading ``read`` gives (``ANY``: assumed so)."""
    return read == ANY or key == read or read.startswith(f"{key}.") or key.startswith(f"{read}.")


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
        # (typed config, data) of a composition with values set inside its sections (_with)
        self._set: dict[tuple, tuple[Any, dict]] = {}
        self._ids: dict = {}  # each section's part of a cell id (jobs.plan.cell_id's memo)
        self._reads: dict[tuple, frozenset] = {}  # the keys each composition's interpolations read
        self.compositions = 0

    def learn(self, sweep: Sequence) -> None:
        """Take the kind of each cell's override from Hydra's parse of the sweep itself (``sweep``: its
        ``Override`` objects), so that the cells' ``key=value`` strings, as the basic sweeper writes them,
        are not parsed again: about 1 ms an override, a second for a grid of 1,000 values."""
        from hydra.core.override_parser.types import Transformer, ValueType

        for o in sweep:
            key = o.get_key_element()
            if not o.is_sweep_override():
                raw = f"{key}={o.get_value_element_as_str()}"
                self._parsed.setdefault(raw, _kind(raw, o))
            elif o.is_discrete_sweep() and o.value_type is not ValueType.GLOB_CHOICE_SWEEP:
                for element in o.sweep_iterator():
                    if type(element) in _PLAIN:
                        raw = f"{key}={Transformer.str(element)}"
                        self._parsed.setdefault(raw, _kind(raw, o, element))

    def adopt(self, overrides: Sequence[str], cfg) -> None:
        """Take ``cfg``, the composition Hydra already made of a multirun's command line ``overrides``
        (Hydra's primary config: the sweeps left out, every other override applied), as the composition
        of the cells whose group choices are the command line's own: a composition fewer per command.
        Each cell's values are set over it as over any composition (a value the command line set is set
        again, to the same). Adopts nothing where the command line sweeps a group (the primary config
        then holds a choice no cell has) or where Hydra composes the cells in full."""
        import copy

        from hydra.core.override_parser.overrides_parser import OverridesParser

        groups = []
        for o in OverridesParser.create().parse_overrides(list(overrides)):
            if o.is_sweep_override():
                if _is_group(o.key_or_group) or o.package is not None:
                    return
                continue
            raw = f"{o.get_key_element()}={o.get_value_element_as_str()}"  # as the sweeper writes it
            kind = _kind(raw, o)[0]
            if kind is _FULL:
                return
            if kind is _GROUP:
                groups.append(raw)
        # the caller's config is left as it was: the cells' values are set on a copy
        cfg = copy.deepcopy(cfg)
        self._bases.setdefault(tuple(groups), (cfg, resolved(cfg)))

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
        if values and self._read_by_interpolation(tuple(groups), values):
            return None
        return tuple(groups), values

    def _read_by_interpolation(self, groups: tuple, values: list) -> bool:
        """Whether a value sets what an interpolation of the composition reads (``dataset.median_kb:
        ${oc.select:accelerator.sample_kb,112}`` with ``accelerator.sample_kb=50``): set over the resolved
        data, it would leave the interpolated value as composed, so such a cell is composed in full."""
        if groups not in self._reads:
            self._reads[groups] = interpolated_keys(self._base(groups)[0])
        reads = self._reads[groups]
        return any(_overlaps(key, read) for _, key, _ in values for read in reads)

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
        try:
            config, data = self._with(groups, values)
        except (AttributeError, KeyError, TypeError):  # a value under a section left unset: built in full
            return Cell.from_data(self._data(groups, values), overrides)
        return Cell(config, data, cell_id(data, self._ids), tuple(overrides))

    def _with(self, groups: tuple, values: list) -> tuple[Any, dict]:
        """(typed config, data) of the composition ``groups`` with ``values`` set. The values set inside a
        section (``dataset.num_images=``) are set once per distinct set of them, so that the cells of a
        grid share those sections, and each cell sets its top-level values on a copy of the top level
        alone: a section shared is checked (validate) and hashed (cell_id) once for all the cells."""
        inner = [v for v in values if "." in v[1]]
        outer = [v for v in values if "." not in v[1]]
        if {key for _, key, _ in outer} & {key.split(".", 1)[0] for _, key, _ in inner}:
            inner, outer = [], values  # a section set whole and inside: in the order given
        memo = (groups, tuple(raw for raw, _, _ in inner))
        if memo not in self._set:
            self._set[memo] = self._setting(groups, inner, *self._typed_base(groups))
        return self._setting(groups, outer, *self._set[memo])

    def _typed_base(self, groups: tuple) -> tuple[Any, dict]:
        if groups not in self._typed:
            self._typed[groups] = typed(CampaignConf, self._base(groups)[1])
        return self._typed[groups], self._base(groups)[1]

    def _setting(self, groups: tuple, values: list, config: Any, data: dict) -> tuple[Any, dict]:
        """``config`` and ``data`` with ``values`` (raw, key, value) set."""
        typed_values = [(key, self._value(groups, key, raw, value)) for raw, key, value in values]
        for key, value in typed_values:
            config = updated(config, key, value)
        return config, with_values(data, typed_values)
