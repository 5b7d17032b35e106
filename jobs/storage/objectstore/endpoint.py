"""Where an object store answers and the keys it takes: what every other module of the store shares."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

REGION = "us-east-1"


@dataclass(frozen=True)
class Credentials:
    """An access key pair. Never printed: its repr hides both keys."""

    access_key: str = field(repr=False)
    secret_key: str = field(repr=False)

    @classmethod
    def fresh(cls) -> Credentials:
        return cls("IOC" + secrets.token_hex(8).upper(), secrets.token_urlsafe(30))

    def __repr__(self) -> str:
        return "Credentials(<hidden>)"


@dataclass(frozen=True)
class Endpoint:
    """Where a store answers: its URL, the bucket (Azure's container) and the prefix the tool may write
    under, and the service it speaks (``storage.service``: jobs.storage.objectstore.services)."""

    url: str
    bucket: str
    prefix: str = "iocampaign"
    region: str = REGION
    service: str = "s3"
