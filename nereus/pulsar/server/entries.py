"""Pulsar entries in storage: the neutral header in front of the SEND bytes.

Only the few metadata fields the broker needs are read (record count, publish
time, sequence ids, delivery time, ordering key); the entry itself is stored and
later dispatched byte for byte.
"""

from __future__ import annotations

import struct
import time

from google.protobuf.message import DecodeError

from ...topics.convert import pulsar_body
from ...ledger.entry import EntryFlags, EntryFormat, EntryHeader, decode_entry
from ...ledger.subscription import sticky_hash
from ...codec.pulsar import Frame, MalformedBatch, iter_batch, pb

_U32 = struct.Struct(">I")
NONE_KEY = b"NONE_KEY"  # what Pulsar hashes for messages without a key


#: Most messages one batch may claim (a client's batchingMaxMessages is far lower).
MAX_BATCH_MESSAGES = 1_000_000
#: The smallest a batched message can be: its 4-byte metadata size and a payload_size field.
_MIN_BATCHED_MESSAGE_BYTES = 6


def record_count(meta: pb.MessageMetadata) -> int:
    return meta.num_messages_in_batch if meta.HasField("num_messages_in_batch") else 1


def implausible_count(meta: pb.MessageMetadata, entry_size: int) -> str | None:
    """Why the batch's claimed message count cannot be true, or None.

    The count becomes offsets (one per record) and sizes lists on the consumer side,
    so a client may not claim more messages than its bytes can hold.
    """
    if not meta.HasField("num_messages_in_batch"):
        return None
    count = meta.num_messages_in_batch
    room = max(entry_size, meta.uncompressed_size if meta.compression else 0)
    if count < 1 or count > MAX_BATCH_MESSAGES or count * _MIN_BATCHED_MESSAGE_BYTES > room:
        return f"a batch of {entry_size} bytes cannot hold {count} messages"
    return None


_BATCHED, _COMPRESSED = int(EntryFlags.BATCHED), int(EntryFlags.COMPRESSED)
_DELAYED, _CONTROL = int(EntryFlags.DELAYED), int(EntryFlags.CONTROL)
_TRANSACTIONAL = int(EntryFlags.TRANSACTIONAL)


def stored_entry(frame: Frame, meta: pb.MessageMetadata, highest_sequence: int,
                 txn_pid: int | None = None) -> tuple[bytes, int]:
    """The stored form of a SEND: (bytes, record count). One copy of the entry (per SEND,
    so the flags are plain ints: IntFlag arithmetic costs more than the rest).

    A transactional SEND (``txn_pid``: the TxnID's least bits) is flagged TRANSACTIONAL
    and carries the transaction's pid, epoch 0, as every transactional entry does."""
    flags = 0 if txn_pid is None else _TRANSACTIONAL
    if meta.HasField("num_messages_in_batch"):
        flags = _BATCHED
        count = meta.num_messages_in_batch
    else:
        count = 1
    if meta.compression:
        flags |= _COMPRESSED
    if meta.HasField("deliver_at_time"):
        flags |= _DELAYED
    if meta.HasField("marker_type"):
        flags |= _CONTROL
    header = EntryHeader(EntryFormat.PULSAR, count, first_timestamp=meta.publish_time,
                         max_timestamp=meta.publish_time, base_sequence=meta.sequence_id,
                         last_sequence=highest_sequence, flags=flags,
                         producer_id=-1 if txn_pid is None else txn_pid, producer_epoch=-1 if txn_pid is None else 0)
    return b"".join((header.pack(), frame.entry)), count


def split(data: bytes | memoryview) -> tuple[EntryHeader, memoryview]:
    """(header, Pulsar entry from the 0x0e01 magic) of a stored entry (Kafka entries converted)."""
    header, body = decode_entry(data)
    return header, (pulsar_body(data) if header.format == EntryFormat.KAFKA else body)


def body_of(data: bytes | memoryview) -> memoryview:
    return pulsar_body(data)


def metadata_of(body: memoryview) -> pb.MessageMetadata:
    """Parse the MessageMetadata of a Pulsar entry (with or without the crc32c magic)."""
    pos = 6 if bytes(body[:2]) == b"\x0e\x01" else 0
    size = _U32.unpack_from(body, pos)[0]
    meta = pb.MessageMetadata()
    try:
        meta.ParseFromString(body[pos + 4 : pos + 4 + size])
    except DecodeError:
        return pb.MessageMetadata()
    return meta


def payload_of(body: memoryview) -> memoryview:
    pos = 6 if bytes(body[:2]) == b"\x0e\x01" else 0
    size = _U32.unpack_from(body, pos)[0]
    return body[pos + 4 + size :]


def sticky_key(body: memoryview) -> int:
    """Key_Shared hash of an entry: ordering key, else partition key, else the first batched key."""
    meta = metadata_of(body)
    if meta.HasField("ordering_key"):
        return sticky_hash(meta.ordering_key)
    if meta.HasField("partition_key"):
        return sticky_hash(meta.partition_key)
    if meta.HasField("num_messages_in_batch") and not meta.compression:
        try:
            for message in iter_batch(payload_of(body), 1):
                single = message.metadata
                if single.HasField("ordering_key"):
                    return sticky_hash(single.ordering_key)
                if single.HasField("partition_key"):
                    return sticky_hash(single.partition_key)
        except MalformedBatch:
            pass
    return sticky_hash(NONE_KEY)


def deliver_at(header: EntryHeader, body: memoryview) -> int | None:
    """Delivery time in ms for a delayed entry still in the future, else None."""
    if not header.flags & EntryFlags.DELAYED:
        return None
    at = metadata_of(body).deliver_at_time
    return at if at > time.time() * 1000 else None


__all__ = ["body_of", "deliver_at", "metadata_of", "record_count", "split", "sticky_key", "stored_entry"]
