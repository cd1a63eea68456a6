"""A stored entry as each protocol reads it (see docs/entry-format.md).

The same-protocol path returns the stored bytes (Kafka: only the base offset and
leader epoch fields are rewritten); the other protocol gets a converted copy.
"""

from __future__ import annotations

import logging
import struct

from .entry import HEADER_SIZE, EntryFormat, decode_entry

log = logging.getLogger(__name__)

_PREFIX = struct.Struct(">q")
_EPOCH = struct.Struct(">i")


def pulsar_body(data: bytes | memoryview) -> memoryview:
    """The Pulsar entry (from the 0x0e01 magic) of a stored entry of any format."""
    view = memoryview(data)
    if len(view) > 3 and view[3] == EntryFormat.KAFKA:
        header, body = decode_entry(view)
        from ..kafka.convert import ConversionError, kafka_to_pulsar
        try:
            return memoryview(kafka_to_pulsar(body))
        except ConversionError:
            log.warning("a stored Kafka batch could not be converted for a Pulsar consumer")
            raise
    return view[HEADER_SIZE:]


def kafka_batch(data: bytes | memoryview, base_offset: int, leader_epoch: int = -1) -> bytes | None:
    """The record batch of a stored entry as served at ``base_offset``; None if not showable."""
    header, body = decode_entry(data)
    if header.format == EntryFormat.KAFKA:
        out = bytearray(body)
        _PREFIX.pack_into(out, 0, base_offset)
        _EPOCH.pack_into(out, 12, leader_epoch)
        return bytes(out)
    from ..kafka.convert import pulsar_to_kafka
    return pulsar_to_kafka(body, base_offset, leader_epoch)


__all__ = ["kafka_batch", "pulsar_body"]
