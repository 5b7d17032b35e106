"""Hydra's side of the config schema (``jobs.schema``): each group's dataclass stored in the ConfigStore
as ``<group>/<group>_schema``, the campaign's as ``campaign_schema``, every workload's own as
``workload/<kind>_schema``."""

from __future__ import annotations


def register() -> None:
    """Register the schemas in Hydra's ConfigStore (idempotent), with every framework and kind of storage
    found first (``jobs.frameworks.declared``, ``jobs.storage.backends.declared``): a module of a user's
    that declares none is the command's one line, before anything is planned."""
    from hydra.core.config_store import ConfigStore

    from jobs import frameworks, schema, workloads
    from jobs.storage import backends

    frameworks.declared()
    backends.declared()

    cs = ConfigStore.instance()
    cs.store(name="campaign_schema", node=schema.CampaignConf)
    for group, node in schema.GROUPS.items():
        cs.store(group=group, name=f"{group}_schema", node=node)
    workloads.discover()  # every workload stores its own schema as workload/<kind>_schema
