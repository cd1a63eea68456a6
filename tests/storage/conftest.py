import pytest

from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.objstore.faults import FaultInjectingObjectStore
from nereus.storage import StorageOptions, StreamStorage, WalOptions

FAST = StorageOptions(wal=WalOptions(flush_interval=0.002))


@pytest.fixture
async def engine():
    engine = open_engine(None, shards=4)
    yield engine
    await engine.close()


@pytest.fixture
async def meta(engine):
    client = engine.client(namespace="default")
    yield client
    await client.close()


@pytest.fixture
async def objects():
    store = FaultInjectingObjectStore(open_object_store("memory://"))
    yield store
    await store.close()


@pytest.fixture
async def storage(meta, objects):
    storage = StreamStorage(meta, objects, node_id="node-a", options=FAST)
    yield storage
    await storage.close()


#: The storages of ``storage_on_each_wal`` on WAL replicas, for ``settle``.
ON_REPLICAS: list[StreamStorage] = []


async def settle() -> None:
    """Make the WAL-replica storages of the running test look as a quiet writer's do after its
    name reservation's life: every object uploaded and every block done (a freed object's block
    must be done before the collector deletes it). A no-op with the object WAL."""
    for storage in ON_REPLICAS:
        for writer in storage.writers:
            await writer.flush()
            await writer.blocks.close_all()  # its objects are uploaded (as a group) once it is closed
            if writer.uploader is not None:
                await writer.uploader.drain()
            await writer.flush()  # the markers' deletions are tracked with the flushes


class _LocalReplicas:
    """Three real WAL replicas on disk in this process (no network: the storage layer's own test)."""

    def __init__(self, stores: dict[str, object]):
        self.stores = stores

    async def prepare(self, replica_ids):
        pass

    def local_id(self):
        return "r0"

    def live(self):
        from nereus.storage.wal_replicas import ReplicaInfo

        return [ReplicaInfo(name, zone=name) for name in self.stores]

    def replica(self, replica_id):
        return self.stores.get(replica_id)


@pytest.fixture(params=["object", "replicated"])
async def storage_on_each_wal(request, meta, objects, tmp_path):
    """``storage`` with the object WAL, and with three WAL replicas on disk (ensemble 3, ack quorum 2)."""
    from nereus.storage.wal_replicas import Durability
    from nereus.wal import WalStore

    if request.param == "object":
        storage = StreamStorage(meta, objects, node_id="node-a", options=FAST)
        yield storage
        await storage.close()
        return
    stores = {f"r{i}": await WalStore.open(tmp_path / f"wal-{i}", segment_bytes=1 << 20) for i in range(3)}
    storage = StreamStorage(meta, objects, node_id="node-a", options=FAST, directory=_LocalReplicas(stores),
                            durability=Durability("replicated", 3, 3, 2))
    ON_REPLICAS.append(storage)
    yield storage
    ON_REPLICAS.remove(storage)
    await storage.close()
    for store in stores.values():
        await store.close()
