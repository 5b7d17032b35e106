"""The services an object store can speak (``storage.service``), one module each behind one interface
(``Service``, interface.py): S3 (s3_api.py, SeaweedFS embedded) and Azure Blob (blob_api.py, Azurite
embedded).

Adding a service: a module here declaring ``SERVICE`` (its requests, its embedded server, what it can do),
its line in ``SERVICES``, a preset in conf/storage/ and an object client that reads it
(docs/extending.md)."""

from __future__ import annotations

from jobs.errors import ConfigError
from jobs.storage.objectstore.services.interface import Abilities, Service

__all__ = ["SERVICES", "Abilities", "Service", "able", "get", "of"]


def _services() -> dict[str, Service]:
    from jobs.storage.objectstore.services import blob_api, s3_api

    return {s.name: s for s in (s3_api.SERVICE, blob_api.SERVICE)}


SERVICES = _services()


def get(name) -> Service:
    """The service ``storage.service=<name>``."""
    try:
        return SERVICES[str(name)]
    except KeyError:
        raise ConfigError(
            f"storage.service={name} is not an object-storage service; choose one of {', '.join(SERVICES)}"
        ) from None


def of(endpoint) -> Service:
    """The service a store's endpoint speaks."""
    return SERVICES[endpoint.service]


def able(ability: str) -> list[Service]:
    """The services that declare ``ability`` (``Abilities``), for a refusal to name."""
    return [s for s in SERVICES.values() if ability in s.can]
