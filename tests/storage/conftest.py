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
