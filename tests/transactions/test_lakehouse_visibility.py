"""Transactions and the storage side: rows, compaction, key views and trims see committed records only.

Transactional Kafka batches are appended as a partition leader appends them (verify,
begin, append) and decided by the real coordinator, whose participants write the
markers; the readers are the lakehouse's (rows, compaction) and the topic layer's.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
import pyarrow as pa
import pyarrow.parquet as pq

from nereus.codec.kafka.records import Record, build_batch, decode_records
from nereus.lakehouse import compaction as lake_compaction
from nereus.lakehouse import rows
from nereus.ledger.entry import EntryFlags, EntryFormat, EntryHeader, decode_entry
from nereus.ledger.naming import TopicName
from nereus.storage import compaction, key_view
from nereus.transactions import kafka_key

TOPIC = "persistent://public/default/lake"
TIMEOUT = 60_000
TRANSACTIONAL = 0x10


def kafka_entry(items: list[tuple[bytes | None, bytes]], *, pid: int = -1, epoch: int = -1,
                transactional: bool = False) -> bytes:
    """A stored Kafka entry as the Produce path stores it (transactional batches flagged)."""
    batch = bytearray(build_batch([Record(i, 1_700_000_000_000 + i, k, v) for i, (k, v) in enumerate(items)],
                                  producer_id=pid, producer_epoch=epoch, base_sequence=0 if pid >= 0 else -1))
    flags = EntryFlags.BATCHED
    if transactional:
        flags |= EntryFlags.TRANSACTIONAL
        struct.pack_into(">h", batch, 21, struct.unpack_from(">h", batch, 21)[0] | TRANSACTIONAL)
        struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    header = EntryHeader(EntryFormat.KAFKA, len(items), producer_id=pid, producer_epoch=epoch, flags=flags)
    return header.pack() + bytes(batch)


class Txn:
    """One Kafka transaction of its own transactional id on ``TOPIC``."""

    def __init__(self, broker, txid: str) -> None:
        self.broker, self.key = broker, kafka_key(txid)
        self.txid = txid
        self.pid = self.epoch = -1

    async def produce(self, *items: tuple[bytes | None, bytes]) -> int:
        coord = self.broker.coordinator
        if self.pid < 0:
            self.pid, self.epoch = await coord.init_producer(self.txid, TIMEOUT)
            await coord.add_partitions(self.key, self.pid, self.epoch, [TOPIC])
        topic = await self.broker.registry.get(TopicName.parse(TOPIC))
        await topic.ensure_writer()
        await coord.verify(self.pid, self.epoch, TOPIC)
        await self.broker.stream_txns.begin(topic.stream_id, self.pid, self.epoch, topic.handle.next_offset())
        result = await topic.append(kafka_entry(list(items), pid=self.pid, epoch=self.epoch, transactional=True),
                                    len(items))
        return result.base_offset

    async def end(self, commit: bool) -> None:
        await self.broker.coordinator.end(self.key, self.pid, self.epoch, commit)


async def plain(broker, *items: tuple[bytes | None, bytes]) -> int:
    topic = await broker.registry.get(TopicName.parse(TOPIC))
    await topic.ensure_writer()
    return (await topic.append(kafka_entry(list(items)), len(items))).base_offset


async def stream_of(broker):
    topic = await broker.registry.get(TopicName.parse(TOPIC))
    return topic, topic.stream_id


async def row_values(broker) -> list[tuple[int, bytes]]:
    out = []
    for r in await rows.topic_ranges(broker.meta, TOPIC):
        async for batch in rows.read_rows(broker.meta, broker.storage.objects, r):
            out += [(row[2], row[6]) for row in batch]
    return out


async def stored_entries(broker) -> list[tuple[int, bytes]]:
    topic, _ = await stream_of(broker)
    result = await topic.handle.fetch(0, topic.handle.next_offset(), max_bytes=1 << 24)
    return [(e.base_offset, bytes(e.data)) for e in result.entries]


async def scenario(broker):
    """Plain, committed, aborted (interleaved with plain), plain, an open transaction, then 16 plain
    appends (one slice each: 8 slices make an idx group, so groups lie past the open one)."""
    committed, aborted, still_open = Txn(broker, "tx-commit"), Txn(broker, "tx-abort"), Txn(broker, "tx-open")
    offsets = {}
    offsets["p0"] = await plain(broker, (b"k0", b"p0"), (None, b"p0b"))
    offsets["c0"] = await committed.produce((b"k1", b"c0"), (b"k2", b"c0b"))
    offsets["x0"] = await aborted.produce((b"k1", b"x0"),)
    offsets["p1"] = await plain(broker, (b"k3", b"p1"),)
    offsets["x1"] = await aborted.produce((b"k2", b"x1"), (b"k4", b"x1b"))
    offsets["c1"] = await committed.produce((b"k5", b"c1"),)
    await committed.end(True)
    await aborted.end(False)
    offsets["p2"] = await plain(broker, (b"k6", b"p2"),)
    offsets["o0"] = await still_open.produce((b"k1", b"o0"),)
    for i in range(16):
        await plain(broker, (b"t%d" % i, b"t%d" % i),)
    return offsets, still_open


COMMITTED_BEFORE_OPEN = [b"p0", b"p0b", b"c0", b"c0b", b"p1", b"c1", b"p2"]
AFTER_OPEN = [b"o0"] + [b"t%d" % i for i in range(16)]


async def test_rows_stop_at_the_lso_and_skip_aborted_records(broker):
    offsets, still_open = await scenario(broker)
    (r,) = await rows.topic_ranges(broker.meta, TOPIC)
    assert r.end == offsets["o0"]  # the last stable offset, not the tail
    assert [a[0] for a in r.aborted] == [(await broker.coordinator.describe(kafka_key("tx-abort"))).producer_id]
    got = await row_values(broker)
    assert [v for _, v in got] == COMMITTED_BEFORE_OPEN
    assert [o for o, v in got if v == b"p1"] == [offsets["p1"]]  # offsets are the stream's own
    await still_open.end(True)
    assert [v for _, v in await row_values(broker)] == COMMITTED_BEFORE_OPEN + AFTER_OPEN


async def test_an_aborted_open_transaction_never_gives_rows(broker):
    offsets, still_open = await scenario(broker)
    await still_open.end(False)
    assert [v for _, v in await row_values(broker)] == COMMITTED_BEFORE_OPEN + AFTER_OPEN[1:]


async def test_compaction_stays_below_the_lso_and_leaves_aborted_records_out_of_its_rows(broker):
    offsets, still_open = await scenario(broker)
    _, sid = await stream_of(broker)
    assert any(job.last >= offsets["o0"] for job in await compaction.plan(broker.meta, sid)), \
        "the scenario must have groups past the open transaction"
    before = await stored_entries(broker)
    plans = await lake_compaction.stable_plans(broker.meta, sid)
    assert plans and all(job.last < offsets["o0"] for job, _ in plans)
    objects = []
    for job, aborted in plans:
        result = await compaction.compact(broker.meta, broker.storage.objects, broker.storage.reader, job,
                                          lake_compaction.encoder(-1, aborted))
        objects.append(result.object)
    table = pa.concat_tables([pq.read_table(pa.BufferReader(await broker.storage.objects.get(key)),
                                            columns=["offset", "value"]) for key in objects])
    values = table.column("value").to_pylist()
    assert b"x0" not in values and b"x1" not in values and b"x1b" not in values
    assert values == [b"p0", b"p0b", b"c0", b"c0b", b"p1", b"c1"]  # the first idx group: 8 slices
    assert offsets["x0"] not in table.column("offset").to_pylist()  # a gap where the aborted records were
    # Brokers read the compacted range as before: the same entries at the same offsets.
    assert await stored_entries(broker) == before
    assert [v for _, v in await row_values(broker)] == COMMITTED_BEFORE_OPEN
    await still_open.end(True)
    for job, aborted in await lake_compaction.stable_plans(broker.meta, sid):
        await compaction.compact(broker.meta, broker.storage.objects, broker.storage.reader, job,
                                 lake_compaction.encoder(-1, aborted))
    assert (await stored_entries(broker))[:len(before)] == before
    assert [v for _, v in await row_values(broker)] == COMMITTED_BEFORE_OPEN + AFTER_OPEN


def view_records(view: key_view.KeyView) -> dict[bytes | None, bytes]:
    out = {}
    for item in view.entries:
        header, body = decode_entry(item.entry.data)
        if header.format != EntryFormat.KAFKA:
            continue
        _, batch = decode_records(body)
        for i in item.keep:
            out[batch[i].key] = batch[i].value
    return out


async def test_key_view_stops_at_the_lso_and_ignores_aborted_records(broker):
    offsets, still_open = await scenario(broker)
    _, sid = await stream_of(broker)
    result = await broker.registry.key_compactor.compact(TOPIC, delete_retention_ms=0)
    assert 0 < result.horizon <= offsets["o0"]
    _, view = await key_view.load(broker.meta, broker.storage.objects, sid)
    got = view_records(view)
    assert got[b"k1"] == b"c0" and got[b"k2"] == b"c0b"  # the aborted later values replaced nothing
    assert b"k4" not in got  # an aborted record's key is not in the view
    await still_open.end(False)
    await broker.registry.key_compactor.compact(TOPIC, delete_retention_ms=0)
    _, view = await key_view.load(broker.meta, broker.storage.objects, sid)
    got = view_records(view)
    assert got[b"k1"] == b"c0" and got[b"t15"] == b"t15" and b"k4" not in got


async def test_a_trim_forgets_the_aborted_ranges_below_the_new_start(broker):
    broker.storage.trim_listeners.append(broker.stream_txns.trimmed)  # as the broker wires it
    offsets, still_open = await scenario(broker)
    topic, sid = await stream_of(broker)
    await still_open.end(True)
    hwm = topic.handle.next_offset()
    assert (await broker.stream_txns.view(sid, hwm)).aborted(0, hwm)
    await topic.handle.trim(offsets["x1"])  # inside the aborted transaction: its range stays
    assert (await broker.stream_txns.view(sid, hwm)).aborted(0, hwm)
    await topic.handle.trim(offsets["p2"])  # past its marker
    assert (await broker.stream_txns.view(sid, hwm)).aborted(0, hwm) == []


async def test_delivered_tables_get_committed_records_only(broker, tmp_path):
    deltalake = pytest.importorskip("deltalake")
    from nereus.lakehouse.delta_target import DeltaTarget
    from nereus.lakehouse.deliver import Delivery

    offsets, still_open = await scenario(broker)
    delivery = Delivery(broker.meta, broker.storage.objects, TOPIC, DeltaTarget(str(tmp_path / "delta")))
    try:
        await delivery.deliver_once()
        table = deltalake.DeltaTable(str(tmp_path / "delta")).to_pyarrow_table()
        assert sorted(table.column("value").to_pylist()) == sorted(COMMITTED_BEFORE_OPEN)
        await still_open.end(True)
        await delivery.deliver_once()
        table = deltalake.DeltaTable(str(tmp_path / "delta")).to_pyarrow_table()
        assert sorted(table.column("value").to_pylist()) == sorted(COMMITTED_BEFORE_OPEN + AFTER_OPEN)
        assert offsets["x0"] not in table.column("offset").to_pylist()
    finally:
        delivery.close()


@pytest.fixture
async def file_broker(tmp_path):
    """The ``broker`` parts over an object store of files (table readers open the objects by URL)."""
    from tests.transactions.conftest import broker_parts

    async with broker_parts((tmp_path / "objects").as_uri()) as parts:
        yield parts


async def test_a_compacted_range_of_aborted_records_adds_no_row_to_the_sbt_table(file_broker, tmp_path):
    pytest.importorskip("pyiceberg")
    from nereus.lakehouse import sbt

    broker = file_broker
    for i in range(8):  # one idx group of 8 slices each
        await plain(broker, (b"a%d" % i, b"a%d" % i),)
    aborted = Txn(broker, "tx-gone")
    for i in range(7):
        await aborted.produce((b"x%d" % i, b"x%d" % i),)
    await aborted.end(False)  # its marker is the 8th slice of the second group
    for i in range(16):
        await plain(broker, (b"b%d" % i, b"b%d" % i),)
    _, sid = await stream_of(broker)
    plans = await lake_compaction.stable_plans(broker.meta, sid, target_bytes=1)  # one per group
    assert [(job.first, job.last) for job, _ in plans][:3] == [(0, 7), (8, 15), (16, 23)]
    for job, ranges in plans:
        await compaction.compact(broker.meta, broker.storage.objects, broker.storage.reader, job,
                                 lake_compaction.encoder(-1, ranges))
    objects_url = (tmp_path / "objects").as_uri()
    catalog = sbt.open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}", objects_url + "/iceberg")
    report = await sbt.sync(broker.meta, catalog, objects_url, TOPIC)
    assert report.added == len(plans) - 1  # the aborted range's object carries entries only
    table = catalog.load_table(sbt.identifier(TOPIC))
    values = table.scan().to_arrow().column("value").to_pylist()
    compacted_b = plans[-1][0].last + 1 - 16
    assert sorted(values) == sorted([b"a%d" % i for i in range(8)] + [b"b%d" % i for i in range(compacted_b)])
    assert [v for _, v in await row_values(broker)] == [b"a%d" % i for i in range(8)] + [b"b%d" % i for i in range(16)]
