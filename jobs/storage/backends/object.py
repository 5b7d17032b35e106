"""``object``: an object store (S3, Azure Blob: ``storage.service``): data is put and read by requests to a
server (the tool's own, started on the tier's root, or a user's at ``storage.endpoint``), never through a
mounted folder of its own."""

import contextlib
from dataclasses import dataclass

from jobs.storage.backends.backend import Backend, Served


@dataclass(frozen=True)
class ObjectStore(Backend):
    def check(self, cfg, workload, here: bool, able: str) -> None:
        """Its service, endpoint, bucket, prefix, reader and client, what the workload and its framework
        read it with, and what this machine has to serve it (jobs/storage/objectstore/needs.py)."""
        from jobs.storage.objectstore import needs

        needs.check(cfg, workload, here, able)

    def copies(self, st) -> int:
        """Two where the tool serves the store itself: the dataset's files, and the server's objects of them
        on the same root."""
        return 2 if self.embedded(st) else 1

    @contextlib.contextmanager
    def serving(self, s, where):
        """The store served for the cell (the embedded server this process keeps for its cells, started by
        the first and stopped with its folder when the process ends), the dataset put there once per
        content, read through the cell's object client; a cold run reads what the server reads from its
        disk. A cell on several Slurm nodes has a server on each (``spread``), for this cell only."""
        from jobs.storage.objectstore import clients, spread, tier

        st, on_nodes = s.cfg.storage, None
        if where.in_slurm_job and where.nodes > 1:
            on_nodes = (where.nodes, where.cpus_per_task, s.job_dir / spread.SUBDIR)
        with tier.serving(st, st.root, on_nodes) as store:
            put, facts = tier.put_dataset(store, s.ds)
            client = clients.of(s.cfg, s.w.uses_framework)
            described = {**store.describe(), "reader": str(st.reader), "client": client.name, **facts}
            if on_nodes and store.server is not None:  # where each node's gateway and volumes are
                described["nodes"] = [
                    {k: n[k] for k in ("node", "address", "url", "folder")} for n in store.server.nodes
                ]
            # the device a cold run is counted on: the server's (this node's)
            counted = str(store.server.data_dir) if store.server is not None else s.data_dir
            reading = client.reading(store, put, facts.get("dataset_prefix", ""), st.root)
            with reading as (read_as, said), store.reading_with(client):
                yield Served(read_as, counted, {"object_store": {**described, **said}}, store)


BACKEND = ObjectStore(
    "object",
    requests=True,
    every_node=True,  # every node's tasks reach the store's endpoint
    evicts=True,  # the server's volumes sit on a disk whose page cache may hold them
    sighted_only=False,
    settings=("service", "endpoint", "bucket", "prefix", "reader", "client"),
    preset="storage=s3",
    rank=3,
)
