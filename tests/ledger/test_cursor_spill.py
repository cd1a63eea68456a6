"""Large individual-ack sets spill to snapshot objects and come back intact."""

import json

from nereus.ledger.cursor import SPILL_RANGES, Cursor, cursor_key
from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.objstore.errors import ObjectNotFound
from nereus.storage.records import stream_partition


async def test_scattered_acks_spill_to_an_object_and_reload():
    engine = open_engine(None, shards=1)
    meta = engine.client()
    objects = open_object_store("memory://")
    cursor, created = await Cursor.open(meta, 7, "sub", initial=0, objects=objects)
    assert created
    for offset in range(1, 4 * SPILL_RANGES, 2):  # every other offset: one range each
        cursor.ack(offset, offset + 1)
    await cursor.persist()
    record = json.loads((await meta.get(cursor_key(7, "sub"), partition_key=stream_partition(7))).value)
    snapshot = record["snapshot"]
    assert snapshot.startswith("cursors/00000000000000000007/sub/0000000001-") and record["gen"] == 1
    assert record["acks"]["ranges"] == []
    assert len(record["acks"]) == 2 and len(json.dumps(record)) < 500  # the metadata write stays small

    reloaded, created = await Cursor.open(meta, 7, "sub", initial=0, objects=objects)
    assert not created and reloaded.acks == cursor.acks

    reloaded.ack_cumulative(4 * SPILL_RANGES)  # everything acknowledged: back inline
    await reloaded.persist()
    record = json.loads((await meta.get(cursor_key(7, "sub"), partition_key=stream_partition(7))).value)
    assert "snapshot" not in record and record["acks"]["below"] == 4 * SPILL_RANGES + 1
    assert not await _exists(objects, snapshot)  # no record names it: deleted
    await meta.close()
    await engine.close()


async def _exists(objects, key):
    try:
        await objects.head(key)
        return True
    except ObjectNotFound:
        return False
