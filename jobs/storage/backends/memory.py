"""``memory``: RAM (tmpfs): nothing to evict."""

from jobs.storage.backends.backend import Backend

BACKEND = Backend("memory", requests=False, every_node=False, evicts=False, sighted_only=False, rank=2)
