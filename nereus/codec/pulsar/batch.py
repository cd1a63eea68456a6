"""Batched payloads: several messages behind one MessageMetadata.

A batch is the (uncompressed) concatenation of, per message::

    [singleMetadataSize u32][SingleMessageMetadata][payload of payload_size]

``MessageMetadata.num_messages_in_batch`` says how many there are. When the
entry is compressed the whole concatenation is compressed as one block, so
decompress first (compression.py) — only on paths that must look inside.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence

from google.protobuf.message import DecodeError

from . import PulsarApi_pb2 as pb
from .errors import MalformedBatch
from .frames import Buffer

_U32 = struct.Struct(">I")


class BatchMessage:
    """One message of a batch: parsed header plus a view of its payload."""

    __slots__ = ("index", "metadata", "payload")

    def __init__(self, index: int, metadata: pb.SingleMessageMetadata, payload: memoryview) -> None:
        self.index = index
        self.metadata = metadata
        self.payload = payload

    def __repr__(self) -> str:
        return f"BatchMessage(index={self.index}, payload={self.payload.nbytes} bytes)"


def iter_batch(payload: Buffer, num_messages: int) -> Iterator[BatchMessage]:
    """Lazily yield the ``num_messages`` messages of an uncompressed batch.

    Each step parses one SingleMessageMetadata (needed to find the next
    message); payloads are memoryview slices of ``payload``. Bytes after the
    last message are ignored, as the reference clients do.
    """
    if num_messages < 0:
        raise MalformedBatch(f"negative message count {num_messages}")
    view = memoryview(payload)
    if view.format != "B":
        view = view.cast("B")
    end = view.nbytes
    pos = 0
    for index in range(num_messages):
        if end - pos < 4:
            raise MalformedBatch(f"batch ends before message {index} of {num_messages}")
        meta_size = _U32.unpack_from(view, pos)[0]
        meta_end = pos + 4 + meta_size
        if meta_end > end:
            raise MalformedBatch(f"message {index}: metadata size {meta_size} overruns the batch")
        meta = pb.SingleMessageMetadata()
        try:
            meta.ParseFromString(view[pos + 4 : meta_end])
        except DecodeError as exc:
            raise MalformedBatch(f"message {index}: undecodable SingleMessageMetadata: {exc}") from None
        if not meta.HasField("payload_size"):
            raise MalformedBatch(f"message {index}: SingleMessageMetadata without payload_size")
        size = meta.payload_size
        if size < 0 or meta_end + size > end:
            raise MalformedBatch(f"message {index}: payload size {size} overruns the batch")
        pos = meta_end + size
        yield BatchMessage(index, meta, view[meta_end:pos])


def parse_batch(payload: Buffer, num_messages: int) -> list[BatchMessage]:
    """Eager form of iter_batch."""
    return list(iter_batch(payload, num_messages))


class BatchBuilder:
    """Accumulate messages into a batch payload without joining payloads.

    ``buffers()`` returns the pieces for ``encode_entry`` /
    ``encode_payload_command`` (which checksum them piecewise);
    ``num_messages`` goes into ``MessageMetadata.num_messages_in_batch``.
    """

    def __init__(self) -> None:
        self._parts: list[Buffer] = []
        self.num_messages = 0
        self.size = 0  # uncompressed batch size in bytes

    def add(self, payload: Buffer, metadata: pb.SingleMessageMetadata | None = None) -> None:
        """Append one message; ``metadata.payload_size`` is set from ``payload``."""
        meta = pb.SingleMessageMetadata() if metadata is None else metadata
        nbytes = memoryview(payload).nbytes
        meta.payload_size = nbytes
        header = meta.SerializeToString()
        self._parts.append(_U32.pack(len(header)) + header)
        self._parts.append(payload)
        self.num_messages += 1
        self.size += 4 + len(header) + nbytes

    def buffers(self) -> list[Buffer]:
        """The batch as a list of buffers (headers and untouched payloads)."""
        return list(self._parts)

    def to_bytes(self) -> bytes:
        """The batch joined into one buffer (needed before compressing)."""
        return b"".join(self._parts)


def build_batch(messages: Iterable[tuple[Buffer, pb.SingleMessageMetadata | None]]) -> tuple[list[Buffer], int]:
    """Build a batch from (payload, metadata) pairs; returns (buffers, count)."""
    builder = BatchBuilder()
    for payload, metadata in messages:
        builder.add(payload, metadata)
    return builder.buffers(), builder.num_messages


def batch_size(parts: Sequence[Buffer]) -> int:
    """Total byte length of a list of buffers."""
    return sum(memoryview(p).nbytes for p in parts)


__all__ = ["BatchBuilder", "BatchMessage", "batch_size", "build_batch", "iter_batch", "parse_batch"]
