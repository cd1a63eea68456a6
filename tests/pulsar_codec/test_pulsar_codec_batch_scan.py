"""The side-by-side batch scan reads what protobuf reads, and rejects what iter_batch rejects."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nereus.codec.pulsar import BatchBuilder, MalformedBatch, iter_batch, pb
from nereus.codec.pulsar.batch_scan import UnsupportedLayout, scan

single_meta = st.builds(
    lambda key, props, seq, event, null, null_key, b64, order: pb.SingleMessageMetadata(
        partition_key=key, properties=[pb.KeyValue(key=k, value=v) for k, v in props], sequence_id=seq,
        event_time=event, null_value=null, null_partition_key=null_key, partition_key_b64_encoded=b64,
        ordering_key=order),
    st.one_of(st.none(), st.text(max_size=300)),
    st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5)), max_size=3),
    st.integers(0, 2**56 - 1), st.integers(0, 2**56 - 1), st.booleans(), st.booleans(), st.booleans(),
    st.one_of(st.none(), st.binary(max_size=20)))
batches = st.lists(st.lists(st.tuples(st.binary(max_size=200), single_meta), max_size=12), max_size=8)


def build(messages) -> bytes:
    builder = BatchBuilder()
    for payload, meta in messages:
        builder.add(payload, meta)
    return builder.to_bytes()


def reference(batch: bytes, count: int) -> list[tuple]:
    out = []
    for m in iter_batch(batch, count):
        md = m.metadata
        key = md.partition_key.encode() if md.HasField("partition_key") and not md.null_partition_key else None
        out.append((key, md.partition_key_b64_encoded if key is not None else False, md.payload_size, md.event_time,
                    md.null_value))
    return out


def scanned(data: list[bytes], counts: list[int]) -> list[tuple]:
    found = scan(data, counts)
    offsets, keys = found.key_bytes()
    raw = keys.tobytes()
    return [(raw[offsets[i]:offsets[i + 1]] if found.has_key[i] else None,
             bool(found.key_b64[i]) if found.has_key[i] else False, int(found.payload_size[i]),
             int(found.event_time[i]), bool(found.null_value[i])) for i in found.rows_by_batch(counts)]


@settings(max_examples=150, deadline=None)
@given(batches)
def test_scan_reads_what_protobuf_reads(groups):
    data = [build(g) for g in groups]
    counts = [len(g) for g in groups]
    assert scanned(data, counts) == [row for d, n in zip(data, counts) for row in reference(d, n)]


def test_long_varints_and_many_messages_per_lane():
    big = pb.SingleMessageMetadata(partition_key="k", sequence_id=2**63 + 5, event_time=2**62 + 1)
    small = pb.SingleMessageMetadata(partition_key="x" * 200)
    data = [build([(b"v", big)] * 3), build([(b"", small)]), build([])]
    assert scanned(data, [3, 1, 0]) == reference(data[0], 3) + reference(data[1], 1)


def test_unknown_fields_the_scan_does_not_read_say_so():
    meta = pb.SingleMessageMetadata(partition_key="k", payload_size=1).SerializeToString()
    high_field = meta + b"\xa0\x01\x05"  # field 20, varint
    fixed = meta + b"\x59" + bytes(8)  # field 11, 64-bit
    for extra in (high_field, fixed):
        batch = struct.pack(">I", len(extra)) + extra + b"v"
        with pytest.raises(UnsupportedLayout):
            scan([batch], [1])


def raw_batch(metas: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(m)) + m + b"v" for m in metas)


def test_fields_in_any_order_or_repeated_read_as_protobuf_reads_them():
    metas = [b"\x18\x01\x12\x01a\x40\x05",  # payload_size before the key
             b"\x12\x01a\x18\x01\x12\x02bc",  # the key twice: the last one counts
             b"\x12\x01a\x18\x01\x40\x85\x01\x48\x01",  # a sequence_id, then null_value
             b"\x12\x01a\x18\x01\x50\x01",  # null_partition_key after the usual head
             b"\x18\x01"]  # no key at all
    data = [raw_batch(metas), raw_batch(metas[::-1])]
    assert scanned(data, [5, 5]) == reference(data[0], 5) + reference(data[1], 5)


def test_payload_size_given_twice_is_left_to_protobuf():
    with pytest.raises(UnsupportedLayout):
        scan([raw_batch([b"\x12\x01a\x18\x01\x18\x00"])], [1])


@pytest.mark.parametrize("batch,count", [
    (b"\x00\x00", 1),  # no room for a size
    (struct.pack(">I", 50) + b"\x10\x01", 1),  # metadata overruns
    (struct.pack(">I", 2) + b"\x12\x01", 1),  # partition_key overruns its metadata
    (struct.pack(">I", 2) + b"\x28\x01", 1),  # no payload_size
    (struct.pack(">I", 2) + b"\x18\x09" + b"abc", 1),  # payload overruns
    (struct.pack(">I", 3) + b"\x12\x7f\x18", 1),  # a key running past the end of the buffer
    (build([(b"v", None)]), 2),  # fewer messages than counted
])
def test_malformed_batches_raise(batch, count):
    with pytest.raises(MalformedBatch):
        scan([batch], [count])
    with pytest.raises(MalformedBatch):
        list(iter_batch(batch, count))


@settings(max_examples=60, deadline=None)
@given(batches)
def test_key_views_are_the_keys(groups):
    data = [build(g) for g in groups]
    counts = [len(g) for g in groups]
    found = scan(data, counts)
    offsets, keys = found.key_bytes()
    views = pa.Array.from_buffers(pa.binary_view(), len(found.has_key),
                                  [pa.py_buffer(np.packbits(found.has_key, bitorder="little")),
                                   pa.py_buffer(found.key_views()), pa.py_buffer(found.buffer)])
    views.validate(full=True)
    raw = keys.tobytes()
    assert views.to_pylist() == [raw[offsets[i]:offsets[i + 1]] if found.has_key[i] else None
                                 for i in range(len(found.has_key))]
