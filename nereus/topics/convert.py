"""A stored entry as each protocol reads it, and conversion between the two formats.

The same-protocol path returns the stored bytes (Kafka: only the base offset and
leader epoch fields are rewritten); the other protocol gets a converted copy (see
docs/entry-format.md). Conversion happens on cross-protocol reads only.

Mapping (both directions): Kafka key <-> Pulsar partition key (base64-flagged when
the key is not UTF-8), value <-> payload (a null value <-> ``null_value``),
headers <-> properties (values as UTF-8 text), record timestamp <-> event time.
Record i of a stored entry is offset ``base + i`` in both protocols, so a Pulsar
entry always converts to one batch with offset deltas 0..n-1 and a Kafka batch to
one batched Pulsar entry (batch index = offset delta).
"""

from __future__ import annotations

import base64
import logging
import struct

from ..codec.kafka.batch import InvalidBatch
from ..codec.kafka.records import Record, build_batch, decode_records
from ..ledger.entry import HEADER_SIZE, EntryFormat, decode_entry
from ..codec.pulsar import encode_entry, entry_messages, pb, split_entry
from ..codec.pulsar.errors import PulsarCodecError

log = logging.getLogger(__name__)

_U32 = struct.Struct(">I")
PRODUCER_NAME = "kafka"


class ConversionError(ValueError):
    """The entry cannot be shown to the other protocol."""


def _key_to_pulsar(key: bytes | None, meta) -> None:
    if key is None:
        return
    try:
        meta.partition_key = key.decode("utf-8")
    except UnicodeDecodeError:
        meta.partition_key = base64.b64encode(key).decode()
        meta.partition_key_b64_encoded = True


def kafka_to_pulsar(batch: bytes | memoryview) -> bytes:
    """A stored Kafka batch as a Pulsar entry (from the 0x0e01 magic)."""
    try:
        header, records = decode_records(batch)
    except InvalidBatch as exc:
        raise ConversionError(str(exc)) from None
    parts: list[bytes] = []
    for record in records:
        single = pb.SingleMessageMetadata(payload_size=len(record.value or b""))
        _key_to_pulsar(record.key, single)
        for key, value in record.headers:
            single.properties.add(key=key, value=(value or b"").decode("utf-8", "replace"))
        if record.timestamp > 0:
            single.event_time = record.timestamp
        if record.value is None:
            single.null_value = True
        raw = single.SerializeToString()
        parts += [_U32.pack(len(raw)), raw, record.value or b""]
    publish = header.max_timestamp if header.max_timestamp > 0 else header.base_timestamp
    meta = pb.MessageMetadata(producer_name=PRODUCER_NAME, sequence_id=max(header.base_sequence, 0),
                              publish_time=max(publish, 0), num_messages_in_batch=len(records))
    return b"".join(bytes(p) for p in encode_entry(meta, parts))


def key_from_pulsar(meta) -> bytes | None:
    if not meta.HasField("partition_key") or meta.null_partition_key:
        return None
    if meta.partition_key_b64_encoded:
        return base64.b64decode(meta.partition_key)
    return meta.partition_key.encode("utf-8")


def _record(index: int, meta, payload: bytes, publish_time: int) -> Record:
    headers = [(p.key, p.value.encode("utf-8")) for p in meta.properties]
    timestamp = meta.event_time or publish_time
    value = None if meta.null_value else bytes(payload)
    return Record(index, timestamp, key_from_pulsar(meta), value, headers)


def pulsar_to_kafka(body: bytes | memoryview, base_offset: int, leader_epoch: int = -1) -> bytes | None:
    """A stored Pulsar entry as one Kafka batch; None for entries Kafka cannot show (markers)."""
    try:
        meta, payload = split_entry(body)
        if meta.HasField("marker_type") or meta.encryption_keys:
            return None
        records = [_record(m.index, m.metadata, m.payload, meta.publish_time) for m in entry_messages(meta, payload)]
    except (PulsarCodecError, struct.error) as exc:
        raise ConversionError(f"undecodable Pulsar entry: {exc}") from None
    if not records:
        return None
    return build_batch(records, base_offset=base_offset, leader_epoch=leader_epoch)


_SERVED_PREFIX = struct.Struct(">qii")  # base offset, batch length, partition leader epoch
_LENGTH = struct.Struct(">i")


def pulsar_body(data: bytes | memoryview) -> memoryview:
    """The Pulsar entry (from the 0x0e01 magic) of a stored entry of any format."""
    view = memoryview(data)
    if len(view) > 3 and view[3] == EntryFormat.KAFKA:
        header, body = decode_entry(view)
        try:
            return memoryview(kafka_to_pulsar(body))
        except ConversionError:
            log.warning("a stored Kafka batch could not be converted for a Pulsar consumer")
            raise
    return view[HEADER_SIZE:]


def kafka_batch_chunks(data: bytes | memoryview, base_offset: int,
                       leader_epoch: int = -1) -> list[bytes | memoryview] | None:
    """The record batch of a stored entry as served at ``base_offset``, as chunks to write in
    order; None if not showable. A stored Kafka batch is not copied: the 16 bytes before its
    CRC'd part (base offset and leader epoch rewritten, its length) are a chunk of their own,
    the rest a view of ``data``."""
    header, body = decode_entry(data)
    if header.format == EntryFormat.KAFKA:
        (length,) = _LENGTH.unpack_from(body, 8)
        return [_SERVED_PREFIX.pack(base_offset, length, leader_epoch), body[_SERVED_PREFIX.size:]]
    batch = pulsar_to_kafka(body, base_offset, leader_epoch)
    return None if batch is None else [batch]


def kafka_batch(data: bytes | memoryview, base_offset: int, leader_epoch: int = -1) -> bytes | None:
    """The record batch of a stored entry as served at ``base_offset``, in one piece; None if not showable."""
    chunks = kafka_batch_chunks(data, base_offset, leader_epoch)
    return None if chunks is None else b"".join(chunks)


__all__ = ["kafka_batch", "kafka_batch_chunks", "pulsar_body", "ConversionError", "kafka_to_pulsar", "key_from_pulsar", "pulsar_to_kafka"]
