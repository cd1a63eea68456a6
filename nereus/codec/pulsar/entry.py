"""A Pulsar entry (from the 0x0e01 magic, or from its metadata size) opened up.

For paths that must look at every message of an entry (cross-protocol reads, the
lakehouse readers): parse the ``MessageMetadata``, decompress the payload and split
a batch. The dispatch path never does this; it sends entries byte for byte.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from . import PulsarApi_pb2 as pb
from .batch import iter_batch
from .compression import decompress
from .errors import MalformedFrame
from .frames import Buffer

_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class EntryMessage:
    """Message ``index`` of an entry (0 for a non-batched entry).

    ``metadata`` holds the per-message fields (partition key, properties, event time,
    null value): the ``SingleMessageMetadata`` of a batched message, the entry's
    ``MessageMetadata`` otherwise.
    """

    index: int
    metadata: pb.SingleMessageMetadata | pb.MessageMetadata
    payload: memoryview


def split_entry(body: Buffer) -> tuple[pb.MessageMetadata, memoryview]:
    """(MessageMetadata, payload as stored) of a Pulsar entry; raises MalformedFrame."""
    view = memoryview(body)
    pos = 6 if bytes(view[:2]) == b"\x0e\x01" else 0
    try:
        size = _U32.unpack_from(view, pos)[0]
    except struct.error:
        raise MalformedFrame("entry too short for its metadata size") from None
    if pos + 4 + size > view.nbytes:
        raise MalformedFrame(f"metadata size {size} overruns the entry")
    meta = pb.MessageMetadata()
    try:
        meta.ParseFromString(view[pos + 4:pos + 4 + size])
    except DecodeError as exc:
        raise MalformedFrame(f"undecodable MessageMetadata: {exc}") from None
    return meta, view[pos + 4 + size:]


def entry_messages(meta: pb.MessageMetadata, payload: Buffer) -> list[EntryMessage]:
    """The messages of an entry split by ``split_entry`` (payload decompressed first).

    Raises PulsarCodecError (MalformedBatch, DecompressionFailed, ...). Encrypted
    payloads cannot be split: the caller checks ``meta.encryption_keys`` first.
    """
    data = decompress(meta.compression, payload, meta.uncompressed_size)
    if meta.HasField("num_messages_in_batch"):
        return [EntryMessage(m.index, m.metadata, m.payload) for m in iter_batch(data, meta.num_messages_in_batch)]
    return [EntryMessage(0, meta, memoryview(data))]


__all__ = ["EntryMessage", "entry_messages", "split_entry"]
