"""A setting's value as given on the command line, read with Hydra's own override parser."""

from __future__ import annotations

from campaign.errors import ConfigError


def value_of(overrides: list[str], key: str) -> str | None:
    """The value of the last override of ``key`` in ``overrides``, as typed (the text after its ``=``); None
    when none sets it. ``key=v``, ``+key=v`` and ``++key=v`` set it, ``~key`` does not; a group's choice for
    a package is keyed ``group@package``. Raises ConfigError naming the first override Hydra cannot parse."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    parsed = []
    for raw in overrides:
        try:
            parsed += parser.parse_overrides([raw])
        except HydraException as e:
            raise ConfigError(f"{raw}: {str(e).strip().splitlines()[0]}") from None
    for o in reversed(parsed):
        name = o.key_or_group if o.package is None else f"{o.key_or_group}@{o.package}"
        if name == key and not o.is_delete():
            return o.get_value_string()
    return None


def flag_of(overrides: list[str], key: str) -> bool | None:
    """The last override of ``key`` read as the config's boolean settings read it (``true``, ``yes``,
    ``on``, ``1`` ... in any case); None when none sets it, or when its text is no boolean (planning
    refuses it then, naming the setting)."""
    from omegaconf import BooleanNode
    from omegaconf.errors import ValidationError

    text = value_of(overrides, key)
    if text is None:
        return None
    try:
        return bool(BooleanNode(value=text)._value())
    except ValidationError:
        return None
