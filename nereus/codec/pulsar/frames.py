"""Pulsar frame layout: the decoded ``Frame`` and the frame encoders.

Simple command::

    [totalSize u32][commandSize u32][BaseCommand]

Command with payload (SEND, MESSAGE)::

    [totalSize][commandSize][BaseCommand]
    ([0x0e02 u16][brokerEntryMetadataSize u32][BrokerEntryMetadata])?
    [0x0e01 u16][crc32c u32][metadataSize u32][MessageMetadata][payload]

All integers are big-endian. ``totalSize`` counts every byte after itself.
The crc32c covers ``metadataSize`` through the end of the payload. Everything
from the 0x0e01 magic to the end is the *entry*: what a broker persists and
later dispatches unchanged, so the same-protocol path never re-encodes it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from crc32c import crc32c
from google.protobuf.message import DecodeError, Message

from . import PulsarApi_pb2 as pb
from .commands import FIELD_BY_TYPE, type_name
from .errors import ChecksumMismatch, MalformedFrame

Buffer = bytes | bytearray | memoryview

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02
# Pulsar's default maxMessageSize; brokers and clients allow a frame this
# much payload plus a fixed allowance for command and metadata.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
FRAME_HEADROOM = 10 * 1024
DEFAULT_MAX_FRAME_SIZE = DEFAULT_MAX_MESSAGE_SIZE + FRAME_HEADROOM

_U32 = struct.Struct(">I")
_U32X2 = struct.Struct(">II")
_MAGIC_U32 = struct.Struct(">HI")  # magic + (crc or size)
_CRC_HEADER = struct.Struct(">HII")  # magic, crc32c, metadataSize


class Frame:
    """One decoded frame; payload-related fields are None for simple commands.

    ``payload``, ``metadata_bytes`` and ``entry`` are memoryviews into the
    received bytes (no copy). ``metadata`` and ``broker_entry_metadata`` are
    parsed on first access so a broker that only forwards entries never pays
    for it. ``checksum_ok`` is False only when a checksum was present and did
    not match; the frame is still returned so the caller decides what to do.
    """

    __slots__ = (
        "command",
        "payload",
        "metadata_bytes",
        "entry",
        "checksum",
        "checksum_ok",
        "broker_entry_metadata_bytes",
        "_metadata",
        "_broker_entry_metadata",
    )

    def __init__(
        self,
        command: pb.BaseCommand,
        *,
        payload: memoryview | None = None,
        metadata_bytes: memoryview | None = None,
        entry: memoryview | None = None,
        checksum: int | None = None,
        checksum_ok: bool = True,
        broker_entry_metadata_bytes: memoryview | None = None,
    ) -> None:
        self.command = command
        self.payload = payload
        self.metadata_bytes = metadata_bytes
        self.entry = entry
        self.checksum = checksum
        self.checksum_ok = checksum_ok
        self.broker_entry_metadata_bytes = broker_entry_metadata_bytes
        self._metadata: pb.MessageMetadata | None = None
        self._broker_entry_metadata: pb.BrokerEntryMetadata | None = None

    @property
    def type(self) -> int:
        """The ``BaseCommand.Type`` value."""
        return self.command.type

    @property
    def body(self) -> Message:
        """The sub-command selected by the type (e.g. ``command.send``)."""
        return getattr(self.command, FIELD_BY_TYPE[self.command.type])

    @property
    def metadata(self) -> pb.MessageMetadata | None:
        """Parsed MessageMetadata, or None for a frame without payload."""
        if self._metadata is None and self.metadata_bytes is not None:
            self._metadata = _parse(pb.MessageMetadata, self.metadata_bytes, "MessageMetadata")
        return self._metadata

    @property
    def broker_entry_metadata(self) -> pb.BrokerEntryMetadata | None:
        """Parsed BrokerEntryMetadata prefix, if the frame has one."""
        raw = self.broker_entry_metadata_bytes
        if self._broker_entry_metadata is None and raw is not None:
            self._broker_entry_metadata = _parse(pb.BrokerEntryMetadata, raw, "BrokerEntryMetadata")
        return self._broker_entry_metadata

    def verify(self) -> None:
        """Raise ChecksumMismatch if the frame's checksum did not match."""
        if not self.checksum_ok:
            assert self.checksum is not None and self.entry is not None
            raise ChecksumMismatch(self.checksum, crc32c(self.entry[6:]))

    def __repr__(self) -> str:
        size = None if self.payload is None else self.payload.nbytes
        return f"Frame({type_name(self.command.type)}, payload={size}, checksum_ok={self.checksum_ok})"


def _parse(cls: type, data: Buffer, what: str):
    msg = cls()
    try:
        msg.ParseFromString(data)
    except DecodeError as exc:
        raise MalformedFrame(f"undecodable {what}: {exc}") from None
    if not msg.IsInitialized():
        raise MalformedFrame(f"{what} lacks required fields {msg.FindInitializationErrors()}")
    return msg


def _nbytes(buf: Buffer) -> int:
    return buf.nbytes if isinstance(buf, memoryview) else len(buf)


def _as_parts(data: Buffer | Sequence[Buffer]) -> list[Buffer]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return [data]
    return list(data)


def _serialized(msg: Message | Buffer) -> Buffer:
    if isinstance(msg, (bytes, bytearray, memoryview)):
        return msg
    return msg.SerializeToString()


def encode_command(command: pb.BaseCommand) -> bytes:
    """Encode a simple command frame.

    Raises protobuf's EncodeError if a required field is missing: a bug on
    our side that the peer would otherwise report as a protocol error.
    """
    body = command.SerializeToString()
    return _U32X2.pack(len(body) + 4, len(body)) + body


def encode_entry(metadata: pb.MessageMetadata | Buffer, payload: Buffer | Sequence[Buffer]) -> list[Buffer]:
    """Build an entry ``[0x0e01][crc32c][metadataSize][metadata][payload]``.

    ``metadata`` may be a message or its serialized bytes; ``payload`` one
    buffer or several (e.g. a batch's pieces). The crc32c is chained over the
    pieces, so the payload is never concatenated. Returns buffers for
    ``writelines``; the first holds the header and metadata.
    """
    meta = _serialized(metadata)
    parts = _as_parts(payload)
    size = _U32.pack(_nbytes(meta))
    crc = crc32c(meta, crc32c(size))
    for part in parts:
        crc = crc32c(part, crc)
    head = _MAGIC_U32.pack(MAGIC_CRC32C, crc) + size + bytes(meta)
    return [head, *parts]


def encode_entry_command(
    command: pb.BaseCommand,
    entry: Buffer | Sequence[Buffer],
    *,
    broker_entry_metadata: pb.BrokerEntryMetadata | Buffer | None = None,
) -> list[Buffer]:
    """Frame a stored entry (e.g. ``Frame.entry``) behind ``command``.

    This is the dispatch path: the entry's bytes, checksum included, go out
    as they came in. An optional BrokerEntryMetadata is put in front of it.
    """
    cmd = command.SerializeToString()
    parts = _as_parts(entry)
    prefix = b""
    if broker_entry_metadata is not None:
        bem = bytes(_serialized(broker_entry_metadata))
        prefix = _MAGIC_U32.pack(MAGIC_BROKER_ENTRY_METADATA, len(bem)) + bem
    total = 4 + len(cmd) + len(prefix) + sum(_nbytes(p) for p in parts)
    head = _U32X2.pack(total, len(cmd)) + cmd + prefix
    if parts and _nbytes(parts[0]) < 512:
        # Small first part (the entry header): one buffer fewer to write.
        return [head + bytes(parts[0]), *parts[1:]]
    return [head, *parts]


def encode_payload_command(
    command: pb.BaseCommand,
    metadata: pb.MessageMetadata | Buffer,
    payload: Buffer | Sequence[Buffer],
    *,
    broker_entry_metadata: pb.BrokerEntryMetadata | Buffer | None = None,
) -> list[Buffer]:
    """Encode a command with metadata and payload (SEND, MESSAGE).

    Returns a list of buffers for ``writelines``; payload buffers are passed
    through untouched.
    """
    return encode_entry_command(command, encode_entry(metadata, payload), broker_entry_metadata=broker_entry_metadata)


__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "FRAME_HEADROOM",
    "MAGIC_BROKER_ENTRY_METADATA",
    "MAGIC_CRC32C",
    "Buffer",
    "Frame",
    "encode_command",
    "encode_entry",
    "encode_entry_command",
    "encode_payload_command",
]
