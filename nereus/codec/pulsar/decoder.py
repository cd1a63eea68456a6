"""Sans-io frame decoder: feed bytes with ``receive_data``, pull ``Frame``s.

Received chunks are kept as they came (immutable ``bytes``); a frame that
lies inside one chunk is handed out as a memoryview slice of it, so the
payload is never copied. Only a frame split across chunks is joined, once.
"""

from __future__ import annotations

import struct

from crc32c import crc32c
from google.protobuf.message import DecodeError

from ..chunks import ChunkQueue
from . import PulsarApi_pb2 as pb
from .commands import EMPTY_BODY_TYPES, FIELD_BY_TYPE
from .errors import (
    ChecksumMismatch,
    CorruptStream,
    FrameTooLarge,
    MalformedFrame,
    PulsarCodecError,
    TruncatedFrame,
    UnknownCommand,
)
from .frames import (
    DEFAULT_MAX_FRAME_SIZE,
    MAGIC_BROKER_ENTRY_METADATA,
    MAGIC_CRC32C,
    Buffer,
    Frame,
)

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
# The smallest frame: the 4-byte length, a 4-byte commandSize and a
# BaseCommand of at least its 2-byte type field.
_MIN_TOTAL_SIZE = 4 + 2


class FrameDecoder:
    """Incremental decoder of a Pulsar byte stream (either direction).

    ``max_frame_size`` bounds a whole frame, length prefix included.
    ``strict_checksum`` makes a bad crc32c raise ChecksumMismatch (the frame
    is skipped) instead of being reported through ``Frame.checksum_ok``.
    After a fatal error (see errors.py) every call re-raises it.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, *, strict_checksum: bool = False) -> None:
        if max_frame_size < 4 + _MIN_TOTAL_SIZE:
            raise ValueError("max_frame_size too small for any frame")
        self.max_frame_size = max_frame_size
        self.strict_checksum = strict_checksum
        self._queue = ChunkQueue()
        self._eof = False
        self._error: PulsarCodecError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return self._queue.buffered

    def receive_data(self, data: Buffer) -> None:
        """Append received bytes. Mutable buffers are copied (callers reuse them)."""
        if self._eof:
            raise RuntimeError("receive_data after receive_eof")
        self._queue.append(data)

    def receive_eof(self) -> None:
        """Mark the end of the stream; a partial frame then raises TruncatedFrame."""
        self._eof = True

    def next_frame(self) -> Frame | None:
        """Return the next complete frame, or None if more bytes are needed."""
        if self._error is not None:
            raise self._error
        queue = self._queue
        if queue.buffered < 4:
            return self._need_more()
        total = queue.peek(_U32)[0]
        frame_size = total + 4
        if total < _MIN_TOTAL_SIZE:
            return self._fail(CorruptStream(f"frame length {total} is below the minimum"))
        if frame_size > self.max_frame_size:
            return self._fail(FrameTooLarge(frame_size, self.max_frame_size))
        if queue.buffered < frame_size:
            return self._need_more()
        return self._parse(queue.take(frame_size))

    def __iter__(self):
        """Yield every complete frame currently buffered."""
        while (frame := self.next_frame()) is not None:
            yield frame

    # -- buffer handling -------------------------------------------------

    def _need_more(self) -> None:
        if self._eof and self._queue.buffered:
            self._fail(TruncatedFrame(f"stream ended with {self._queue.buffered} bytes of an unfinished frame"))
        return None

    def _fail(self, error: PulsarCodecError) -> None:
        if error.fatal:
            self._error = error
        raise error

    # -- frame parsing (the frame is already consumed: errors here are per frame)

    def _parse(self, buf: memoryview) -> Frame:
        end = buf.nbytes
        cmd_size = _U32.unpack_from(buf, 4)[0]
        pos = 8 + cmd_size
        if pos > end:
            raise MalformedFrame(f"commandSize {cmd_size} overruns the frame of {end} bytes")
        command = _parse_command(buf[8:pos])
        if pos == end:
            return Frame(command)

        bem = None
        if end - pos >= 2 and _U16.unpack_from(buf, pos)[0] == MAGIC_BROKER_ENTRY_METADATA:
            if end - pos < 6:
                raise MalformedFrame("truncated broker entry metadata header")
            bem_size = _U32.unpack_from(buf, pos + 2)[0]
            bem_end = pos + 6 + bem_size
            if bem_end > end:
                raise MalformedFrame(f"broker entry metadata size {bem_size} overruns the frame")
            bem = buf[pos + 6 : bem_end]
            pos = bem_end

        entry_start = pos
        checksum = None
        if end - pos >= 2 and _U16.unpack_from(buf, pos)[0] == MAGIC_CRC32C:
            if end - pos < 10:
                raise MalformedFrame("truncated checksum header")
            checksum = _U32.unpack_from(buf, pos + 2)[0]
            pos += 6
        elif end - pos < 4:
            raise MalformedFrame(f"{end - pos} stray bytes after the command")
        # else: a pre-v6 peer sends no checksum; metadataSize follows directly.

        meta_size = _U32.unpack_from(buf, pos)[0]
        meta_end = pos + 4 + meta_size
        if meta_end > end:
            raise MalformedFrame(f"metadataSize {meta_size} overruns the frame")
        checksum_ok = True
        if checksum is not None:
            actual = crc32c(buf[pos:])
            if actual != checksum:
                if self.strict_checksum:
                    raise ChecksumMismatch(checksum, actual)
                checksum_ok = False
        return Frame(
            command,
            payload=buf[meta_end:],
            metadata_bytes=buf[pos + 4 : meta_end],
            entry=buf[entry_start:],
            checksum=checksum,
            checksum_ok=checksum_ok,
            broker_entry_metadata_bytes=bem,
        )


def _parse_command(data: memoryview) -> pb.BaseCommand:
    command = pb.BaseCommand()
    try:
        command.ParseFromString(data)
    except DecodeError as exc:
        raise MalformedFrame(f"undecodable BaseCommand: {exc}") from None
    # An enum value this proto lacks lands in unknown fields, leaving no type.
    if not command.HasField("type"):
        raise UnknownCommand("BaseCommand with a missing or unknown type")
    field = FIELD_BY_TYPE.get(command.type)
    if field is None:
        raise UnknownCommand(f"BaseCommand type {command.type} has no sub-command field")
    if not command.HasField(field) and command.type not in EMPTY_BODY_TYPES:
        raise MalformedFrame(f"BaseCommand of type {command.type} lacks its '{field}' sub-command")
    if not command.IsInitialized():
        raise MalformedFrame(f"BaseCommand lacks required fields {command.FindInitializationErrors()}")
    return command


__all__ = ["FrameDecoder"]
