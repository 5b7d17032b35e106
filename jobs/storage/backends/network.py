"""``network``: a file system every node mounts (Lustre, NFS); this machine's counters may not see its
reads, so only a positive sighting proves a run cold."""

from jobs.storage.backends.backend import Backend

BACKEND = Backend("network", requests=False, every_node=True, evicts=True, sighted_only=True, rank=1)
