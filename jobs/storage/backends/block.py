"""``block``: a local block device; a cold cache means the page cache evicted, and this machine's block
counters see every read."""

from jobs.storage.backends.backend import Backend

BACKEND = Backend("block", requests=False, every_node=False, evicts=True, sighted_only=False, rank=0)
