"""The keys of many stored entries at once (the compaction build's input) equal the
keys read one entry and one message at a time, without a protobuf parse per message."""

from __future__ import annotations

import base64
import random

import pyarrow as pa
import pytest

from nereus.codec.kafka.records import Record, build_batch as kafka_batch
from nereus.ledger.entry import EntryFlags, EntryFormat, EntryHeader, encode_entry as stored
from nereus.codec.pulsar import BatchBuilder, MalformedBatch, compress, encode_entry, pb
from nereus.storage.api import FetchedEntry
from nereus.storage.key_view import KEY_SCHEMA
from nereus.topics import key_compaction


def pulsar_entry(base: int, messages, *, compression: int = pb.NONE) -> FetchedEntry:
    builder = BatchBuilder()
    for payload, meta in messages:
        builder.add(payload, meta)
    raw = builder.to_bytes()
    meta = pb.MessageMetadata(producer_name="p", sequence_id=base, publish_time=1000 + base,
                              num_messages_in_batch=len(messages), compression=compression,
                              uncompressed_size=len(raw))
    body = b"".join(encode_entry(meta, compress(compression, raw) if compression else raw))
    header = EntryHeader(EntryFormat.PULSAR, len(messages), flags=EntryFlags.BATCHED)
    return FetchedEntry(base, len(messages), b"".join(stored(header, body)))


def single_entry(base: int, key: str | None, payload: bytes) -> FetchedEntry:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=base, publish_time=5, partition_key=key)
    body = b"".join(encode_entry(meta, payload))
    return FetchedEntry(base, 1, b"".join(stored(EntryHeader(EntryFormat.PULSAR, 1), body)))


def kafka_entry(base: int, keys: list[bytes | None]) -> FetchedEntry:
    recs = [Record(i, 77 + i, k, None if k == b"dead" else b"v") for i, k in enumerate(keys)]
    return FetchedEntry(base, len(keys), b"".join(stored(EntryHeader(EntryFormat.KAFKA, len(keys)),
                                                         kafka_batch(recs, base_offset=base))))


def one_by_one(entries: list[FetchedEntry]) -> pa.Table:
    cols = ([], [], [], [], [], [])
    for e in entries:
        got = key_compaction.entry_keys(e.base_offset, memoryview(e.data))
        for column, values in zip(cols, (*got, [e.base_offset] * len(got[0]), [e.record_count] * len(got[0]))):
            column += values
    return pa.table(dict(zip(KEY_SCHEMA.names, cols)), schema=KEY_SCHEMA)


def mixed_entries(seed: int) -> list[FetchedEntry]:
    rng = random.Random(seed)
    entries, base = [], 0
    for i in range(40):
        kind = rng.random()
        if kind < 0.1:
            entries.append(single_entry(base, rng.choice([None, "solo"]), rng.choice([b"", b"x"])))
        elif kind < 0.2:
            entries.append(kafka_entry(base, [rng.choice([b"a", None, b"dead"]) for _ in range(rng.randint(1, 4))]))
        else:
            messages = []
            for _ in range(rng.randint(1, 30)):
                meta = pb.SingleMessageMetadata(sequence_id=rng.randrange(1 << 40))
                r = rng.random()
                if r < 0.8:
                    meta.partition_key = f"k{rng.randrange(50)}"
                elif r < 0.85:
                    meta.partition_key = base64.b64encode(bytes([rng.randrange(256)] * 3)).decode()
                    meta.partition_key_b64_encoded = True
                elif r < 0.9:
                    meta.null_partition_key = True
                if rng.random() < 0.5:
                    meta.event_time = 1_700_000_000_000 + rng.randrange(1000)
                if rng.random() < 0.1:
                    meta.null_value = True
                messages.append((rng.choice([b"", b"value"]), meta))
            entries.append(pulsar_entry(base, messages, compression=rng.choice([pb.NONE, pb.ZSTD, pb.LZ4])))
        base = entries[-1].end_offset
    return entries


@pytest.mark.parametrize("seed", range(4))
def test_entries_keys_equal_the_per_message_parse(seed, monkeypatch):
    entries = mixed_entries(seed)
    expected = one_by_one(entries).sort_by("offset")
    # The batched entries must not go through the per-message parse.
    monkeypatch.setattr(key_compaction, "_batch_keys", lambda *a, **k: pytest.fail("parsed message by message"))
    got = key_compaction.entries_keys(entries).sort_by("offset")
    assert got.equals(expected), (got.to_pylist()[:5], expected.to_pylist()[:5])


def test_layouts_the_scan_does_not_read_fall_back_to_protobuf():
    meta = pb.SingleMessageMetadata(partition_key="k")
    meta.properties.add(key="a", value="b")
    plain = pulsar_entry(0, [(b"v", meta)] * 3)
    # an unknown field 20 appended to one message's metadata: protobuf skips it
    raw = bytes(plain.data)
    head = pb.SingleMessageMetadata(partition_key="k", payload_size=1).SerializeToString()
    odd_meta = head + b"\xa0\x01\x05"
    batch = len(odd_meta).to_bytes(4, "big") + odd_meta + b"v"
    outer = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=9, num_messages_in_batch=1)
    odd = FetchedEntry(3, 1, b"".join(stored(EntryHeader(EntryFormat.PULSAR, 1), b"".join(encode_entry(outer, batch)))))
    got = key_compaction.entries_keys([FetchedEntry(0, 3, raw), odd]).sort_by("offset")
    assert got.column("key").to_pylist() == [b"k"] * 4
    assert got.column("offset").to_pylist() == [0, 1, 2, 3]


def test_a_broken_batch_is_reported():
    outer = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=9, num_messages_in_batch=2)
    meta = pb.SingleMessageMetadata(payload_size=1).SerializeToString()
    batch = len(meta).to_bytes(4, "big") + meta + b"v"  # one message where two are counted
    entry = FetchedEntry(0, 2, b"".join(stored(EntryHeader(EntryFormat.PULSAR, 2), b"".join(encode_entry(outer, batch)))))
    with pytest.raises(MalformedBatch):
        key_compaction.entries_keys([entry])


def messages_of(data) -> list[tuple[bytes, bytes]]:
    from nereus.ledger.entry import decode_entry
    from nereus.codec.pulsar import entry_messages, split_entry

    meta, payload = split_entry(decode_entry(data)[1])
    return [(m.metadata.SerializePartialToString(), bytes(m.payload)) for m in entry_messages(meta, payload)]


def test_shrunk_batches_keep_their_survivors_byte_for_byte():
    entries = [e for e in mixed_entries(9)]
    rng = random.Random(3)
    items = [(e.data, tuple(sorted(rng.sample(range(e.record_count), rng.randint(1, e.record_count)))))
             for e in entries]
    shrunk = key_compaction.shrink_entries(items)
    for (data, keep), got in zip(items, shrunk):
        if got is None:  # Kafka and unbatched entries are served as stored
            assert len(messages_of(data)) == 1 or bytes(data[:2]) == b"NE"
            continue
        expected = key_compaction._shrink_parsed(data, keep)
        assert messages_of(got) == messages_of(expected)
        before = messages_of(data)
        assert [messages_of(got)[i] for i in keep] == [before[i] for i in keep]
