"""The error a setting that cannot run raises, in every layer (campaign.errors re-exports it)."""

from __future__ import annotations

from hydra.errors import CompactHydraException


class ConfigError(CompactHydraException):
    """A setting is wrong; the message names it and says what would be right."""
