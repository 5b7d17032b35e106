"""Hydra's side of the config schema (``jobs.schema``): each group's dataclass stored in the ConfigStore
as ``<group>/<group>_schema``, the campaign's as ``campaign_schema``, every workload's own as
``workload/<kind>_schema``."""

from __future__ import annotations


def register() -> None:
    """Register the schemas in Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    from jobs import schema, workloads

    cs = ConfigStore.instance()
    cs.store(name="campaign_schema", node=schema.CampaignConf)
    for group, node in schema.GROUPS.items():
        cs.store(group=group, name=f"{group}_schema", node=node)
    workloads.discover()  # every workload stores its own schema as workload/<kind>_schema
