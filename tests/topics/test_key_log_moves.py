"""The key log of a topic that moves between brokers: the leaving owner writes its last
keys on handoff, the new owner goes on recording under the same policy, and a stale
recorder of the old owner (a paused process waking up) cannot append any more."""

from __future__ import annotations

import json
import types

from nereus.codec.kafka.records import Record, build_batch
from nereus.ledger.entry import EntryFormat, EntryHeader, encode_entry
from nereus.ledger.naming import TopicName
from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.storage import key_view
from nereus.topics import key_log
from nereus.topics.key_compaction import KeyCompactor, entries_keys
from nereus.ledger.policies import topic_policies_key
from tests.broker.test_cluster_ownership import Broker, _ring, wait_for


def kafka_entry(rows: list[tuple[bytes, bytes]]) -> bytes:
    batch = build_batch([Record(i, 1000 + i, key, value) for i, (key, value) in enumerate(rows)])
    return b"".join(bytes(x) for x in encode_entry(EntryHeader(EntryFormat.KAFKA, len(rows)), batch))


def groups(first: int, count: int) -> list[list[tuple[bytes, bytes]]]:
    """``count`` entries of three records each over 7 keys, values naming their update."""
    return [[(b"k%d" % ((first + i * 3 + j) % 7), b"v%d" % (first + i * 3 + j)) for j in range(3)]
            for i in range(count)]


async def log_end(storage, stream_id: int) -> int:
    return (await storage.tail(await storage.stream_id(key_log.log_name(stream_id)))).next


async def test_a_moved_topic_keeps_recording_its_keys_and_a_stale_recorder_is_fenced():
    engine = open_engine(None, shards=2)
    objects = open_object_store("memory://")
    first = await Broker(engine, objects, "b0").start()
    joiner = None
    try:
        ring = _ring(["b0", "b1"])
        name = next(TopicName.parse(n) for n in (f"persistent://public/default/klmove-{i}" for i in range(200))
                    if ring.owner(n) == "b1")
        await first.meta.put(topic_policies_key(name.tenant, name.namespace, name.local),
                             json.dumps({"compactionThreshold": 1 << 40}).encode())
        topic = await first.registry.get(name)
        await topic.ensure_writer()
        assert topic.key_log.enabled
        updates = groups(0, 10) + groups(30, 10)
        for rows in updates[:10]:
            await topic.append(kafka_entry(rows), len(rows))
        sid = topic.stream_id
        # What a paused old owner still holds: the keys of a commit it made before the move.
        session = types.SimpleNamespace(fencing_token=topic.handle.fencing_token)
        stale = key_log.KeyRecorder(first.storage, sid, entries_keys, session=session)
        stale.enable()
        stale.committed(0, 3, kafka_entry(updates[0]))

        joiner = await Broker(engine, objects, "b1").start()
        await wait_for(lambda: not first.placement.owns(str(name)), what="the handoff")
        moved = await joiner.registry.get(name)
        await moved.ensure_writer()
        assert moved.key_log.enabled  # the policy is the topic's, whoever owns it
        for rows in updates[10:]:
            await moved.append(kafka_entry(rows), len(rows))
        await moved.key_log.drain()
        runs = await key_log.read(joiner.storage, sid, 0, 60)
        # The old owner wrote its keys on its way out; the new one went on from there.
        assert [(r.lo, r.hi) for r in runs] == [(0, 30), (30, 60)]

        end = await log_end(joiner.storage, sid)
        await stale.drain()  # its session on the log was taken over: nothing lands
        assert await log_end(joiner.storage, sid) == end
        await stale.close()

        result = await KeyCompactor(joiner.storage, owner="b1").compact(str(name))
        assert result.horizon == 60
        _, view = await key_view.load(joiner.storage.meta, objects, sid)
        latest = {}
        for offset, (key, _value) in enumerate(row for rows in updates for row in rows):
            latest[key] = offset
        assert [e.entry.base_offset + k for e in view.entries for k in e.keep] == sorted(latest.values())
    finally:
        for broker in (joiner, first):
            if broker is not None:
                await broker.stop()
        await objects.close()
        await engine.close()
