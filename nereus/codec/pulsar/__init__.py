"""Sans-io codec for the Apache Pulsar binary protocol.

No sockets, no event loop: bytes in, typed objects out, and back::

    decoder = FrameDecoder()
    decoder.receive_data(chunk)              # whatever the transport read
    while (frame := decoder.next_frame()) is not None:
        handle(frame.command, frame.payload)

    transport.write(encode_command(wrap(pb.CommandPong())))
    transport.writelines(encode_payload_command(cmd, metadata, payload))

Modules: ``frames`` (layout, Frame, encoders), ``decoder`` (FrameDecoder),
``commands`` (wrap/body helpers), ``batch`` (batched payloads),
``compression`` (LZ4/ZLIB/ZSTD/SNAPPY for cross-protocol paths), ``errors``.

``PulsarApi_pb2`` is generated from ``PulsarApi.proto`` and checked in, so
only ``protobuf`` is needed at run time. To regenerate (``dev`` extra)::

    PYTHON=.venv/bin/python sh nereus/codec/pulsar/regen.sh
"""

from . import PulsarApi_pb2 as pb
from .batch import BatchBuilder, BatchMessage, build_batch, iter_batch, parse_batch
from .commands import body, type_name, wrap
from .compression import compress, decompress
from .decoder import FrameDecoder
from .entry import EntryMessage, entry_messages, split_entry
from .errors import (
    ChecksumMismatch,
    CorruptStream,
    DecompressionFailed,
    FrameTooLarge,
    MalformedBatch,
    MalformedFrame,
    PulsarCodecError,
    TruncatedFrame,
    UnknownCommand,
    UnsupportedCompression,
)
from .frames import (
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_MESSAGE_SIZE,
    MAGIC_BROKER_ENTRY_METADATA,
    MAGIC_CRC32C,
    Frame,
    encode_command,
    encode_entry,
    encode_entry_command,
    encode_payload_command,
)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "MAGIC_BROKER_ENTRY_METADATA",
    "MAGIC_CRC32C",
    "BatchBuilder",
    "BatchMessage",
    "ChecksumMismatch",
    "CorruptStream",
    "DecompressionFailed",
    "EntryMessage",
    "Frame",
    "FrameDecoder",
    "FrameTooLarge",
    "MalformedBatch",
    "MalformedFrame",
    "PulsarCodecError",
    "TruncatedFrame",
    "UnknownCommand",
    "UnsupportedCompression",
    "body",
    "build_batch",
    "compress",
    "decompress",
    "encode_command",
    "encode_entry",
    "encode_entry_command",
    "encode_payload_command",
    "entry_messages",
    "iter_batch",
    "parse_batch",
    "pb",
    "split_entry",
    "type_name",
    "wrap",
]
