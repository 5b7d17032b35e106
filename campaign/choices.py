"""Catch an unknown preset name on the command line before Hydra composes anything."""

from __future__ import annotations

import re
from pathlib import Path

from jobs import schema

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
# the config groups: the schema's, and the experiments (presets of a whole study)
GROUPS = (*schema.GROUPS, "experiment")
# optional defaults (conf/config.yaml) whose value none names no preset: the setting is left out
OPTIONAL = ("storage@stage",)
ALIAS_PREFIX = "default_for_"  # dataset/default_for_<workload>: the dataset a workload uses by default
_ARG = re.compile(r"^(?:\+{1,2}|~)?(?P<group>[a-z_]+)(?:@[\w.]+)?=(?P<value>[^\s]*)$")


def study(args: list[str]) -> str | None:
    """The argument that chooses the paper's whole study (``+experiment=paper``, also written
    ``experiment=paper`` or ``++experiment=paper``), or None: that study is several grids, run by
    ``campaign.paper`` rather than by one Hydra multirun."""
    for arg in args:
        m = _ARG.match(arg)
        if m and m["group"] == "experiment" and "@" not in arg.split("=", 1)[0] and m["value"] == "paper":
            return arg
    return None


def searchpath(args: list[str]) -> list[Path]:
    """Config folders added on the command line with ``hydra.searchpath=[file://...]``."""
    out = []
    for arg in args:
        if arg.startswith("hydra.searchpath="):
            for item in re.findall(r"file://([^,\]\s'\"]+)", arg):
                out.append(Path(item))
    return out


def presets(group: str, aliases: bool = False, extra: list[Path] | None = None) -> list[str]:
    """Names of the YAML presets of a config group (the per-workload default aliases only if asked),
    in ``conf/`` and in the folders of ``extra``."""
    names = sorted({p.stem for d in [CONF_DIR, *(extra or [])] for p in (d / group).glob("*.yaml")})
    return names if aliases else [n for n in names if not n.startswith(ALIAS_PREFIX)]


def unknown_choice(args: list[str]) -> str | None:
    """One line naming the first unknown group choice in ``args`` and the valid ones, or None."""
    extra = searchpath(args)
    for arg in args:
        m = _ARG.match(arg)
        if not m or m["group"] not in GROUPS:
            continue
        value = m["value"]
        if not re.fullmatch(r"[\w.-]+(,[\w.-]+)*", value):
            continue  # sweep functions such as choice(...) are Hydra's to parse
        valid = presets(m["group"], extra=extra)
        optional = arg.split("=", 1)[0].lstrip("+~") in OPTIONAL
        for name in value.split(","):
            if name not in presets(m["group"], aliases=True, extra=extra) and not (
                optional and name == "none"
            ):
                guess = closest(name, valid)
                guessed = f"; did you mean {arg.split('=', 1)[0]}={guess}?" if guess else ""  # +experiment=
                return f"unknown {m['group']} '{name}' (in '{arg}'{guessed}); valid: {', '.join(valid)}"
    return None


def closest(name: str, valid: list[str]) -> str | None:
    """The valid choice a typo most likely meant: the same name in another case (``SSD``), else the
    closest spelling (``alexnetz``), else None."""
    import difflib

    same = [v for v in valid if v.lower() == name.lower()]
    if same:
        return same[0]
    close = difflib.get_close_matches(name.lower(), valid, n=1, cutoff=0.6)
    return close[0] if close else None


def _preset(group: str, name: str, extra: list[Path]):
    """The preset ``group/name.yaml`` as loaded, from conf/ or the first search-path folder that has it
    (None when none has it)."""
    from omegaconf import OmegaConf

    path = next((p for d in [CONF_DIR, *extra] if (p := d / group / f"{name}.yaml").is_file()), None)
    return None if path is None else OmegaConf.load(path)


def preset_kind(name: str, extra: list[Path]) -> str | None:
    """The ``kind`` a workload preset names (None when the preset cannot be read here)."""
    preset = _preset("workload", name, extra)
    kind = preset.get("kind") if preset is not None else None
    return str(kind) if kind else None


def default(group: str) -> str | None:
    """The preset ``conf/config.yaml``'s defaults list chooses for ``group`` (None: it chooses none)."""
    import yaml

    defaults = yaml.safe_load((CONF_DIR / "config.yaml").read_text())["defaults"]
    return next((e[group] for e in defaults if isinstance(e, dict) and group in e), None)


def missing_field(args: list[str]) -> str | None:
    """One line for a ``workload.<field>=...`` override that a chosen workload's schema does not have
    (``workload=microbench workload.width=0.5``), or None. The chosen workloads are those of
    ``workload=`` (the config's default when absent; an experiment's are Hydra's to check)."""
    from dataclasses import fields

    from jobs import workloads

    extra = searchpath(args)
    chosen: list[str] = []
    for arg in args:
        m = _ARG.match(arg)
        if (
            m
            and m["group"] == "workload"
            and "@" not in arg
            and re.fullmatch(r"[\w.-]+(,[\w.-]+)*", m["value"])
        ):
            chosen += m["value"].split(",")
        elif m and m["group"] == "experiment":
            return None
    for arg in args:
        m = re.match(r"^workload\.(\w+)=", arg)
        if not m:
            continue
        for name in chosen or [default("workload")]:
            kind = preset_kind(name, extra)
            if kind not in workloads.names():
                continue
            known = [f.name for f in fields(workloads.get(kind).schema)]
            if m[1] not in known:
                return (
                    f"{arg}: workload={name} has no setting {m[1]!r} (its settings: {', '.join(known)}); "
                    "sweep workloads with different settings in separate commands"
                )
    return None


# the groups whose settings a plain override sets below them (``storage.root``), each checked against its own
# schema (``_template``)
_TEMPLATE_GROUPS = ("workload", "storage", "dataset", "stage", "platform", "checkpoint")


def _placed(key: str) -> tuple[str, str]:
    """(the group of ``_TEMPLATE_GROUPS`` that ``key`` lies below, or "" for the campaign's own settings;
    ``key``'s path in that group's template)."""
    group, dot, path = key.partition(".")
    return (group, path) if dot and group in _TEMPLATE_GROUPS else ("", key)


def _template(group: str):
    """What a plain value override in ``group`` must fit (``_placed``): that group's schema, or the
    campaign's own ("": its top-level settings, such as ``threads``). One group's schema, not the whole
    campaign's: that (five tiers' among them) took a sixth of a refused or planned command's CPU."""
    from omegaconf import OmegaConf

    def tier():
        return schema.StorageConf(emulate=schema.EmulateConf(), model=schema.ModelConf())

    made = {
        "workload": schema.WorkloadConf,
        "storage": tier,
        "dataset": schema.DatasetConf,
        "stage": tier,
        "platform": schema.PlatformConf,
        "checkpoint": lambda: schema.CheckpointConf(fast=tier(), slow=tier()),
        "": schema.CampaignConf,
    }
    return OmegaConf.structured(made[group]())


def _workload_field(key: str, value) -> str | None:
    """For ``workload.<field>`` that only some workloads' schemas have: why every one of them refuses
    ``value`` (None when one accepts it or none has the field)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ValidationError

    from jobs import workloads

    if not key.startswith("workload.") or key.count(".") != 1:
        return None
    field = key.split(".", 1)[1]
    why = None
    for name in workloads.names():
        schema = workloads.get(name).schema
        node = OmegaConf.structured(schema)
        if field not in node:
            continue
        try:
            OmegaConf.update(node, field, value, merge=True)
            return None
        except ValidationError as e:
            why = f"{key}={value}: {str(e).splitlines()[0]}"
    return why


def bad_value(args: list[str]) -> str | None:
    """One line naming the first plain ``key=value`` override (each value of a sweep) whose value
    the key's declared type refuses (``cache=lukewarm``, ``seed=abc``), or whose interpolation does not
    resolve (``unresolved``), or None. Keys the schema does not know, group choices and Hydra's own
    settings are left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException, OverrideParseException
    from omegaconf import OmegaConf
    from omegaconf.errors import ValidationError

    templates: dict[str, object] = {}  # by the group a key lies in: each made once, kept with its updates
    for arg in args:
        if arg.startswith(("-", "+", "~", "hydra.", "hydra/")) or "=" not in arg:
            continue
        key = arg.split("=", 1)[0]
        if "@" in key or key in GROUPS or key.startswith("experiment"):
            continue
        try:
            override = OverridesParser.create().parse_overrides([arg])[0]
            values = list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
        except OverrideParseException as e:  # Hydra's own report is three lines, and exit status 1
            return _unparsable(arg, key, str(e))
        except (HydraException, ValueError, TypeError):
            continue  # Hydra reports its own errors
        group, path = _placed(key)
        if group not in templates:
            templates[group] = _template(group)
        template = templates[group]
        for value in values:
            if isinstance(value, (dict, list)):
                continue
            try:
                node = OmegaConf.select(template, path, throw_on_missing=False)
            except Exception:  # noqa: BLE001 - any key Hydra should judge
                break
            if (
                node is not None
                and not isinstance(node, (str, int, float, bool))
                and not hasattr(node, "value")
            ):
                break  # a group node: not a plain value
            try:
                OmegaConf.update(template, path, value, merge=True)
            except ValidationError as e:
                why = str(e).splitlines()[0]
                return f"{key}={value}: {why}"
            except Exception:  # noqa: BLE001 - unknown keys, containers: Hydra's to report
                why = _workload_field(key, value)
                if why:
                    return why
                break
    return unresolved(args)


def sweep_without_flag(args: list[str]) -> str | None:
    """One line for a sweep (``threads=1,2``, ``range(1,4)``) given without ``-m``, which Hydra would
    call an ambiguous value in three lines: each of its values is a cell of a multirun; or None."""
    import shlex

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    if "-m" in args or "--multirun" in args or _multirun_preset(args):
        return None
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        try:
            sweep = OverridesParser.create().parse_overrides([arg])[0].is_sweep_override()
        except (HydraException, ValueError, TypeError):
            continue  # Hydra reports its own errors
        if sweep:
            return (
                f"{arg} is a sweep: add -m to run each of its values as a cell "
                f"(python -m campaign -m {shlex.join(args)})"
            )
    return None


def _multirun_preset(args: list[str]) -> bool:
    """Whether an experiment preset of ``args`` makes the command a multirun itself (``hydra.mode:
    MULTIRUN``, as the paper's figure presets do): a sweep given beside it widens or narrows its grid."""
    from omegaconf import OmegaConf

    from campaign.errors import ConfigError
    from campaign.overrides import value_of

    try:
        chosen = value_of(args, "experiment")
    except ConfigError:
        return False  # an override Hydra cannot parse: its own line says so
    presets = [_preset("experiment", name, searchpath(args)) for name in (chosen or "").split(",")]
    return any(p is not None and OmegaConf.select(p, "hydra.mode") == "MULTIRUN" for p in presets)


def _unparsable(arg: str, key: str, error: str) -> str:
    """One line for an override Hydra's grammar cannot read (an unquoted ``[``, ``=``, ``${`` or letter
    outside ASCII)."""
    lines = [x for x in error.splitlines() if x.strip() and not x.startswith(("Error parsing", "See "))]
    why = f" ({lines[0].strip()})" if lines else ""
    value = arg.partition("=")[2]
    held = "letters outside ASCII" if not value.isascii() else "brackets or '='"
    return f"{arg}: not an override Hydra can read{why}; quote a value with {held} in it: {key}='...'"


def compose(overrides: list[str], return_hydra_config: bool = False):
    """The campaign's config of ``overrides`` (a DictConfig, without Hydra's node unless
    ``return_hydra_config``), composed in this process outside a Hydra application, as ``python -m
    campaign`` would compose it; nothing is written."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from campaign import schema

    schema.register()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose("config", overrides=overrides, return_hydra_config=return_hydra_config)


def chosen(overrides: list[str], group: str) -> str:
    """The preset of config group ``group`` that the campaign's config of ``overrides`` composes with (what
    Hydra records as its choice; "" for none)."""
    choices = compose(overrides, return_hydra_config=True).hydra.runtime.choices
    return str(choices.get(group) or "")


def unresolved(args: list[str]) -> str | None:
    """One line for an override of a single run whose value holds an interpolation that does not resolve
    in the composed config (``threads=${oops}``), which Hydra would report as a traceback, or None. A
    sweep (``-m``) plans every cell and names the bad one itself; only a value with ``${`` costs a
    composition."""
    held = [a for a in args if "${" in a and "=" in a and not a.startswith(("-", "hydra.", "hydra/"))]
    if not held or "-m" in args or "--multirun" in args:
        return None
    from omegaconf import OmegaConf

    try:
        cfg = compose([a for a in args if not a.startswith("-")])
    except Exception:  # noqa: BLE001 - what does not compose is Hydra's to report, as it would have
        return None
    for arg in held:
        key = arg.split("=", 1)[0].lstrip("+~")
        try:
            node = OmegaConf.select(cfg, key, throw_on_missing=False)
            if OmegaConf.is_config(node):
                OmegaConf.to_container(node, resolve=True)
        except Exception as e:  # noqa: BLE001 - any resolution error (a missing key, a resolver's own) is the value's
            return f"{arg}: the interpolation does not resolve: {str(e).splitlines()[0]}"
    return None


# a node that a storage preset fills (its default preset in conf/config.yaml; none: the node is null)
_TIER_NODES = {
    "stage": ("storage@stage", "none"),
    "storage": ("storage", "local"),
    "checkpoint.fast": ("storage@checkpoint.fast", "tmpfs"),
    "checkpoint.slow": ("storage@checkpoint.slow", "local"),
}


def _has(preset: str, section: str, extra: list[Path]) -> bool:
    """Whether storage preset ``preset`` fills ``section`` (emulate, model)."""
    loaded = _preset("storage", preset, extra)
    return loaded is None or loaded.get(section) is not None  # one this check cannot read: Hydra judges


# the sections of a storage preset that only some tiers have, and the presets that have them
_SECTIONS = {
    "emulate": ("an emulated", "emulated_hdd|emulated_ssd|emulated_optane"),
    "model": ("a modelled", "modeled_hdd|modeled_lustre"),
}


# groups a workload fills with its own preset (``optional <group>: default_for_${workload}`` in
# conf/config.yaml), and the node each fills: a workload without such a preset has none of it
_PER_WORKLOAD = {"dataset": "dataset", "checkpoint_model": "checkpoint.model"}


def _given(args: list[str], key: str) -> list[str] | None:
    """The values the last ``key=a,b`` of ``args`` sweeps, None where it is not given."""
    given = [a.split("=", 1)[1] if "=" in a else "" for a in args if a.split("=", 1)[0].lstrip("+~") == key]
    return (given[-1].split(",") if given[-1] else []) if given else None  # ~key: given, as nothing


def _default(group: str) -> str:
    """The preset conf/config.yaml's defaults list chooses for ``group``."""
    from omegaconf import OmegaConf

    for entry in OmegaConf.load(CONF_DIR / "config.yaml").defaults:
        if isinstance(entry, dict | type(OmegaConf.create())) and group in entry:
            return str(entry[group])
    raise KeyError(group)


def _unset_by_workload(args: list[str], extra: list[Path]) -> str | None:
    """One line for ``dataset.X=`` or ``checkpoint.model.X=`` in a cell whose workload has no such preset
    and where none is chosen (``workload=sharded_checkpoint`` reads no dataset; only it writes a model's
    shards), which Hydra reports as a traceback; None otherwise."""
    workloads = _given(args, "workload") or [_default("workload")]
    for group, node in _PER_WORKLOAD.items():
        if _given(args, group) is not None:
            continue
        for arg in args:
            key = arg.split("=", 1)[0].lstrip("+~")
            if "=" not in arg or not key.startswith(node + "."):
                continue
            for w in workloads:
                if not any((d / group / f"default_for_{w}.yaml").is_file() for d in [CONF_DIR, *extra]):
                    return (
                        f"{arg}: workload={w} has no {node} (no conf/{group}/default_for_{w}.yaml), so "
                        f"its {key[len(node) + 1 :]} cannot be set; choose one with {group}=<preset> "
                        f"or leave {node}.* out"
                    )
    return None


def null_parent(args: list[str]) -> str | None:
    """One line for an override that sets a field of a setting that is null in a cell (``stage.root=X``
    with ``storage@stage=none``, ``storage.emulate.read_iops=N`` on a tier that is not emulated,
    ``storage.model.backing_dir=X`` on one that is not modelled), which
    Hydra reports as a traceback, or None. An experiment's own choices are Hydra's to check."""
    if any((m := _ARG.match(a)) and m["group"] == "experiment" for a in args):
        return None
    extra = searchpath(args)
    unset = _unset_by_workload(args, extra)
    if unset:
        return unset
    chosen = {}
    for node, (arg_key, default) in _TIER_NODES.items():
        given = [a.split("=", 1)[1] for a in args if a.split("=", 1)[0].lstrip("+~") == arg_key]
        chosen[node] = (
            given[-1].split(",") if given and re.fullmatch(r"[\w.-]+(,[\w.-]+)*", given[-1]) else [default]
        )
    for arg in args:
        key = arg.split("=", 1)[0].lstrip("+~")
        if "=" not in arg or "@" in key:
            continue
        for node, presets_ in chosen.items():
            if not key.startswith(node + "."):
                continue
            if node == "stage" and "none" in presets_:
                return (
                    f"{arg}: stage is null where storage@stage=none (the default), so it has no "
                    f"{key.split('.', 1)[1]}; choose the stage tier first: storage@stage=<preset>"
                )
            for section, (kind, which) in _SECTIONS.items():
                if not key.startswith(f"{node}.{section}."):
                    continue
                plain = [p for p in presets_ if p != "none" and not _has(p, section, extra)]
                if plain:
                    return (
                        f"{arg}: {_TIER_NODES[node][0]}={plain[0]} is not {kind} tier, "
                        f"so {node}.{section} is "
                        f"null; choose one first ({_TIER_NODES[node][0]}={which})"
                    )
    return None
