"""Large individual-ack sets spill to snapshot objects and come back intact."""

import json

from nereus.ledger.cursor import SPILL_RANGES, Cursor, cursor_key, snapshot_name
from nereus.meta import open_engine
from nereus.objstore import open_object_store
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
    assert record["snapshot"] == snapshot_name(7, "sub", 1) and record["acks"]["ranges"] == []
    assert len(record["acks"]) == 2 and len(json.dumps(record)) < 500  # the metadata write stays small

    # a snapshot left by a writer that died before its record committed
    await objects.put_if_absent(snapshot_name(7, "sub", 2), b"{}")
    reloaded, created = await Cursor.open(meta, 7, "sub", initial=0, objects=objects)
    assert not created and reloaded.acks == cursor.acks
    assert not await _exists(objects, snapshot_name(7, "sub", 2))  # the orphan is gone

    reloaded.ack_cumulative(4 * SPILL_RANGES)  # everything acknowledged: back inline
    await reloaded.persist()
    record = json.loads((await meta.get(cursor_key(7, "sub"), partition_key=stream_partition(7))).value)
    assert "snapshot" not in record and record["acks"]["below"] == 4 * SPILL_RANGES + 1
    assert not await _exists(objects, snapshot_name(7, "sub", 1))  # no record names it: deleted
    await meta.close()
    await engine.close()


async def _exists(objects, key):
    from nereus.objstore.errors import ObjectNotFound
    try:
        await objects.head(key)
        return True
    except ObjectNotFound:
        return False
