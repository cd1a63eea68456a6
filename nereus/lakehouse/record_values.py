"""The one mapping of stored records to the values of a row, for Kafka and Pulsar entries.

Everything that turns a topic's records into rows uses it: ``rows`` (row tuples for
the Spark source and table delivery) and ``table_format`` (the columns of compacted
objects, hence of the SBT tables), so a record reads the same everywhere. Stored
entries are opened with the codecs the cross-protocol paths use
(``codec.pulsar.entry``, ``codec.kafka.records``, ``topics.convert``).

Values of a record, kept column by column (Python lists, one item per record):

    offset         the stream offset (Kafka: base + offset delta; Pulsar: entry base + batch index)
    publish        microseconds since the epoch: Kafka max_timestamp (else base_timestamp),
                   Pulsar publish_time; None when unset (0)
    event          microseconds: Kafka record timestamp (LogAppendTime batches: the publish
                   time), Pulsar event_time; None when unset
    key, value     bytes or None
    properties     dict: Pulsar properties, Kafka headers (decoded as UTF-8; a repeated
                   header keeps its last value)
    producer       Pulsar producer name; ``kafka`` for Kafka batches

Columns, not row tuples, because compaction's hot path (Kafka batches) fills whole
columns per batch without building a Python object per record and field.
"""

from __future__ import annotations

from ..codec.kafka.records import decode_records
from ..topics.convert import PRODUCER_NAME as KAFKA_PRODUCER_NAME
from ..topics.convert import key_from_pulsar
from ..ledger.entry import EntryFlags, EntryFormat, decode_entry
from ..codec.pulsar import entry_messages, split_entry
from ..topics.schemas import version_from_bytes
from ..transactions.stream_index import TxnView

LOG_APPEND_TIME = 0x08  # Kafka batch attribute: timestamps are the broker's (max_timestamp)


def _micros(ms: int) -> int | None:
    return ms * 1000 if ms > 0 else None


class RecordColumns:
    """The values of records, one list per value (see the module docstring)."""

    __slots__ = ("offset", "publish", "event", "key", "value", "properties", "producer")

    def __init__(self) -> None:
        self.offset: list[int] = []
        self.publish: list[int | None] = []
        self.event: list[int | None] = []
        self.key: list[bytes | None] = []
        self.value: list[bytes | None] = []
        self.properties: list[dict[str, str | None] | None] = []
        self.producer: list[str | None] = []

    def __len__(self) -> int:
        return len(self.offset)

    def add_entry(self, base: int, data: bytes | memoryview, aborted: TxnView | None = None) -> None:
        """The records of one stored entry whose first record is at offset ``base``.

        Entries without records add nothing: control entries (Kafka transaction markers,
        Pulsar markers), transactional entries ``aborted`` lists (the stream's transaction
        view), and encrypted Pulsar payloads (which cannot be split; their offsets are a gap).
        """
        header, body = decode_entry(data)
        if header.flags & EntryFlags.CONTROL:
            return
        if aborted is not None and header.flags & EntryFlags.TRANSACTIONAL \
                and aborted.is_aborted(header.producer_id, base):
            return
        if header.format == EntryFormat.KAFKA:
            self.add_kafka(base, body)
        else:
            self.add_pulsar(base, body)

    def add_kafka(self, base: int, body: memoryview) -> None:
        """The records of a Kafka record batch (the hot path of compaction: whole columns at once)."""
        header, batch = decode_records(body)
        publish = _micros(header.max_timestamp if header.max_timestamp > 0 else header.base_timestamp)
        n = len(batch)
        self.offset += [base + r.offset_delta for r in batch]
        self.publish += [publish] * n
        if header.attributes & LOG_APPEND_TIME:
            self.event += [publish] * n
        else:
            self.event += [r.timestamp * 1000 if r.timestamp > 0 else None for r in batch]
        self.key += [r.key for r in batch]
        self.value += [r.value for r in batch]
        self.properties += [{k: None if v is None else v.decode("utf-8", "replace") for k, v in r.headers}
                            for r in batch]
        self.producer += [KAFKA_PRODUCER_NAME] * n

    def add_pulsar(self, base: int, body: memoryview) -> None:
        """The messages of a Pulsar entry (a batch gives one record per message)."""
        meta, payload = split_entry(body)
        if meta.HasField("marker_type") or meta.encryption_keys:
            return
        publish = _micros(meta.publish_time)
        for m in entry_messages(meta, payload):
            single = m.metadata
            self.offset.append(base + max(m.index, 0))
            self.publish.append(publish)
            self.event.append(_micros(single.event_time))
            self.key.append(key_from_pulsar(single))
            self.value.append(None if single.null_value else bytes(m.payload))
            self.properties.append({p.key: p.value for p in single.properties})
            self.producer.append(meta.producer_name)

    def add_empty(self, offset: int) -> None:
        """A row without a record (every value None but the offset)."""
        self.offset.append(offset)
        for column in (self.publish, self.event, self.key, self.value, self.properties, self.producer):
            column.append(None)


__all__ = ["KAFKA_PRODUCER_NAME", "LOG_APPEND_TIME", "RecordColumns"]


def schema_version(data: bytes | memoryview) -> int | None:
    """The schema version a stored Pulsar entry was written with (None: Kafka, none, unreadable)."""
    try:
        header, body = decode_entry(data)
        if header.format != EntryFormat.PULSAR or header.flags & EntryFlags.CONTROL:
            return None
        meta, _ = split_entry(body)
    except Exception:  # noqa: BLE001 - entry_rows decides what an unreadable entry means
        return None
    return version_from_bytes(meta.schema_version) if meta.HasField("schema_version") else None
