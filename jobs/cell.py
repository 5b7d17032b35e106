"""A cell: one point of a campaign's grid, built once at planning and carried to its record.

Planning composes a cell's config with Hydra, checks it once and builds its ``Cell``: the resolved
config as the schema's dataclasses (``config``, what every reader reads), the same as plain data
(``data``, what ``plan.json`` and the record keep), its id and its overrides. The launch, the Hydra
task, the Slurm job, the run loop and the processes a run starts receive this object; where it
crosses a process boundary it travels as ``data`` and is rebuilt with ``Cell.from_data``, never
composed or checked again.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from jobs import plan, records
from jobs.schema import SEALED, CampaignConf, RecordedWorkload, WorkloadConf


@dataclass(frozen=True)
class Cell:
    """One cell of a campaign: its typed config, the same as plain data, its id and its overrides."""

    config: CampaignConf  # the resolved config, typed (enums as StrEnum members)
    data: dict  # the same as plain JSON-able data: what plan.json and record.json keep
    cell_id: str  # a hash of what the cell measures (jobs.plan.cell_id)
    overrides: tuple[str, ...] = ()  # the command-line overrides that made it
    num: int | None = None  # its number in the sweep, which names its folder (None outside a sweep)

    @classmethod
    def from_data(
        cls,
        data: dict,
        overrides: typing.Iterable[str] = (),
        num: int | None = None,
        cell_id: str | None = None,
    ) -> Cell:
        """The cell whose resolved config is ``data`` (as planning resolved it, or read back from a file
        with the id planning gave it)."""
        return cls(typed(CampaignConf, data), data, cell_id or plan.cell_id(data), tuple(overrides), num)

    @classmethod
    def from_composed(cls, cfg: Any, overrides: typing.Iterable[str] = ()) -> Cell:
        """The cell of a config Hydra composed (a DictConfig, with or without Hydra's own node)."""
        return cls.from_data(plan.resolved(cfg), overrides)


def typed(cls: Any, data: Any) -> Any:
    """``data`` (plain, as ``jobs.plan.resolved`` gives it) as an instance of the schema type ``cls``:
    dataclasses field by field, enums by name, a workload's section as its own workload's schema."""
    return _converter(cls)(data)


@functools.cache
def _converter(cls: Any) -> typing.Callable[[Any], Any]:
    """A function that builds ``cls`` from plain data (made once per type: planning builds many cells)."""
    origin = typing.get_origin(cls)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(cls) if a is not type(None)]
        if len(inner) != 1:
            return _same
        one = _converter(inner[0])
        return lambda data: None if data is None else one(data)
    if origin is list:
        item = _converter((typing.get_args(cls) or (Any,))[0])
        return lambda data: None if data is None else [item(x) for x in data]
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        return lambda data: data if data is None or isinstance(data, cls) else cls[data]
    if dataclasses.is_dataclass(cls):
        if issubclass(cls, WorkloadConf):
            return _workload
        hints = typing.get_type_hints(cls)
        fields = [(f.name, _converter(hints[f.name])) for f in dataclasses.fields(cls)]

        def build(data: Any) -> Any:
            if not isinstance(data, dict):
                return _unset(data)
            return _sealed(cls(**{name: conv(data[name]) for name, conv in fields if name in data}))

        return build
    return _same


# what a record written before a setting existed did, where the schema's default for it says otherwise: a
# workload section without ``kind`` is the micro-benchmark's, the one workload module there was
WRITTEN_BEFORE = {"workload": {"kind": "microbench"}}


def recorded(rec: records.CellRecord) -> CampaignConf:
    """The config a cell's record keeps as the schema's dataclasses, whichever version of the tool wrote
    it: a setting added since takes its schema default, which is what the cell did (``WRITTEN_BEFORE``
    where it is not); the workload's section is a ``RecordedWorkload``, the fields every workload has typed
    and its own settings as written (their schema lives with the workload, which a reader of records, the
    analysis, does not import). Raises ``records.RecordError`` for a value this version cannot type."""
    config = dict(rec.config)
    for name, was in WRITTEN_BEFORE.items():
        if isinstance(config.get(name), dict):
            config[name] = {**was, **config[name]}
    missing = [name for name in ("workload", "storage", "platform") if not isinstance(config.get(name), dict)]
    if missing:
        raise records.RecordError(
            f"the record of cell {rec.cell_id} holds no {' and no '.join(missing)} section"
        )
    try:
        return _recorded(config)
    except (KeyError, TypeError, ValueError):
        where = untypable(CampaignConf, {**config, "workload": None})  # its own settings are never typed
        raise records.RecordError(
            f"the record of cell {rec.cell_id} holds {where or 'a config'}, which this version cannot read"
        ) from None


_COMMON = tuple(f.name for f in dataclasses.fields(WorkloadConf))  # the fields every workload has


def _recorded(data: dict) -> CampaignConf:
    """``data`` as ``typed`` builds it, with the workload's section a ``RecordedWorkload``."""
    workload = data.get("workload")
    config = typed(CampaignConf, {**data, "workload": None})
    if isinstance(workload, dict):
        own = {k: v for k, v in workload.items() if k not in _COMMON}
        section = RecordedWorkload(**{k: workload[k] for k in _COMMON if k in workload}, own=own)
        object.__setattr__(config, "workload", _sealed(section))  # the section it was built without
    return config


def untypable(cls: Any, data: Any, at: str = "") -> str:
    """Where ``typed(cls, data)`` fails: ``setting=value`` of the first value the schema type ``cls``
    cannot take (a choice this version does not know), or ``at`` itself."""
    if dataclasses.is_dataclass(cls) and isinstance(data, dict) and not issubclass(cls, WorkloadConf):
        hints = _hints(cls)
        for f in dataclasses.fields(cls):
            if f.name in data:
                try:
                    _converter(hints[f.name])(data[f.name])
                except (KeyError, TypeError, ValueError):
                    inner = [a for a in typing.get_args(hints[f.name]) if a is not type(None)]
                    kind = inner[0] if len(inner) == 1 else hints[f.name]
                    return untypable(kind, data[f.name], f"{at}.{f.name}".lstrip("."))
    return f"{at}={data!r}" if not isinstance(data, dict) else at


def _sealed(section: Any) -> Any:
    """``section`` made read-only (``jobs.schema.Sealed``): a planned cell's config is never changed."""
    object.__setattr__(section, SEALED, True)
    return section


def _unset(data: Any) -> Any:
    """A section left unset (OmegaConf's ``???``, e.g. the dataset of a workload that reads none) is None."""
    return None if data == MISSING else data


def _same(data: Any) -> Any:
    return data


def _workload(data: Any) -> Any:
    """A workload's section, as its own workload's schema (the base schema for an unknown kind)."""
    if not isinstance(data, dict):
        return _unset(data)
    from jobs import workloads

    try:
        schema = workloads.get(str(data.get("kind"))).schema
    except KeyError:
        schema = WorkloadConf
    return _fields(schema)(data)


@functools.cache
def _fields(cls: type) -> typing.Callable[[Any], Any]:
    """The builder of the workload schema ``cls`` field by field (not through ``_workload`` again)."""
    hints = typing.get_type_hints(cls)
    fields = [(f.name, _converter(hints[f.name])) for f in dataclasses.fields(cls)]
    return lambda data: _sealed(cls(**{name: conv(data[name]) for name, conv in fields if name in data}))


def updated(config: Any, dotted: str, value: Any) -> Any:
    """A copy of the typed ``config`` with the plain ``value`` at ``dotted`` (typed as its field is); the
    sections it does not change are shared, which their being sealed makes safe."""
    head, _, rest = dotted.partition(".")
    if rest:
        new = updated(getattr(config, head), rest, value)
    else:
        new = _converter(_hints(type(config))[head])(value)
    copy = object.__new__(type(config))  # a sealed section's fields, one of them new (planning: per cell)
    copy.__dict__.update(config.__dict__, **{head: new, SEALED: True})
    return copy


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def select(config: Any, dotted: str) -> Any:
    """The setting at ``dotted`` (``"workload.batches"``) of a typed config, or None where a section on
    the way is unset or its schema has no such field (a workload's own settings differ)."""
    value = config
    for part in dotted.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value
