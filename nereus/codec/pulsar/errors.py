"""Typed errors of the Pulsar codec.

Two kinds matter to a caller. *Stream* errors (``fatal = True``) mean the byte
stream can no longer be split into frames: the decoder keeps raising the same
error and the connection should be closed. *Frame* errors (``fatal = False``)
concern one well-delimited frame, which the decoder has already skipped: the
caller may answer with an error command and keep reading.
"""

from __future__ import annotations


class PulsarCodecError(Exception):
    """Root of every error raised by nereus.codec.pulsar."""

    fatal = False


class FrameTooLarge(PulsarCodecError):
    """A frame declares a size above the decoder's max_frame_size."""

    fatal = True

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class CorruptStream(PulsarCodecError):
    """The frame length prefix is impossible, so frame boundaries are lost."""

    fatal = True


class TruncatedFrame(PulsarCodecError):
    """The stream ended (receive_eof) in the middle of a frame."""

    fatal = True


class MalformedFrame(PulsarCodecError):
    """A frame's inner sizes, magic numbers or protobuf bytes are invalid."""


class UnknownCommand(MalformedFrame):
    """A frame carries a BaseCommand type this codec does not know."""


class ChecksumMismatch(PulsarCodecError):
    """The crc32c over metadata and payload does not match the frame's."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(f"crc32c mismatch: frame says {expected:#010x}, data gives {actual:#010x}")
        self.expected = expected
        self.actual = actual


class MalformedBatch(PulsarCodecError):
    """A batched payload does not hold the messages its sizes announce."""


class UnsupportedCompression(PulsarCodecError):
    """The compression codec id is not one this codec implements."""


class DecompressionFailed(PulsarCodecError):
    """Compressed data is corrupt or does not match its uncompressed size."""


__all__ = [
    "ChecksumMismatch",
    "CorruptStream",
    "DecompressionFailed",
    "FrameTooLarge",
    "MalformedBatch",
    "MalformedFrame",
    "PulsarCodecError",
    "TruncatedFrame",
    "UnknownCommand",
    "UnsupportedCompression",
]
