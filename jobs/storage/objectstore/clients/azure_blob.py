"""azure-storage-blob (Microsoft's SDK for Python) on an Azure Blob store (``storage=azure``): TensorFlow's
native reader downloads each image's blob with it inside tf.data's parallel map, through the open store's
own container client; PyTorch's DataLoader workers each download theirs with a client of their own, its
keys lent to the environment as Azure's (``AZURE_STORAGE_ACCOUNT``, ``AZURE_STORAGE_KEY``) for the pass.
The tool's own requests on such a store (the upload, listings, deletes) go through it too."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jobs.storage.objectstore.clients.base import ObjectClient


@dataclass(frozen=True)
class AzureBlob(ObjectClient):
    def get(self, store) -> Callable[[str], bytes]:
        container = store.client
        return lambda key: container.download_blob(key).readall()

    def indexed(self, endpoint, keys: tuple[str, ...]):
        return _Blobs(endpoint, tuple(keys))


class _Blobs:
    """``[j]``: the bytes of blob ``keys[j]``, one download; picklable (a spawned worker gets a copy), its
    client made in the process that first indexes it, with the keys of that process's environment."""

    def __init__(self, endpoint, keys: tuple[str, ...]):
        self.endpoint, self.keys = endpoint, keys
        self._client = None

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, j: int) -> bytes:
        from jobs.storage.objectstore import services

        service = services.of(self.endpoint)
        if self._client is None:
            self._client = service.connect(self.endpoint, connections=4)
        try:
            return service.get(self._client, self.endpoint, self.keys[j])
        except Exception as e:  # noqa: BLE001 - one line naming the store, as the training process says it
            raise service.why(e, self.endpoint) from None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_client": None}  # a new process makes its own


CLIENT = AzureBlob(
    "azure-storage-blob",
    "azure-storage-blob",
    frameworks=("tensorflow", "pytorch"),
    install="pip install '.[azure]' (make install does it)",
    services=("azure",),
    module="azure.storage.blob",
    tools=True,
)
