"""Stored entries as the console's message browser shows them: one dict per message.

Entries of both protocols are read as Pulsar entries (``topics.convert``: a Kafka batch
becomes one batched entry, its key the partition key, its headers the properties, its
record timestamps the event times), so a message's offset is the entry's base offset
plus its batch index in either protocol, and its Pulsar message id is
``ledger:entry:partition[:batch index]`` with the stream id as the ledger. Values are
decoded by the topic's schema version the message names (JSON, Avro, string), a
payload without one as UTF-8 text when it is text, else as hex; at most
``MAX_VALUE_BYTES`` of a value are shown.
"""

from __future__ import annotations

import decimal
import io
import json
import uuid
from dataclasses import dataclass

import avro.errors
import avro.io
import avro.schema

from ...ledger.entry import EntryFlags, decode_entry
from ...codec.pulsar import PulsarCodecError, entry_messages, split_entry
from ...storage.api import FetchedEntry
from ...topics.convert import ConversionError, key_from_pulsar, pulsar_body
from ...topics.schemas import SchemaInfo, version_from_bytes

MAX_VALUE_BYTES = 64 * 1024
_TEXT_SCHEMAS = {"STRING": "string"}


@dataclass
class Schemas:
    """The topic's schema versions (``schemas.history``) and their parsed Avro definitions."""

    versions: list[SchemaInfo]

    def __post_init__(self) -> None:
        self._parsed: dict[int, avro.schema.Schema | None] = {}

    def of(self, version: int | None) -> SchemaInfo | None:
        """The version a message names, else the latest live one (a message of a schema-less producer: None)."""
        live = [v for v in self.versions if not v.deleted]
        if version is not None:
            return next((v for v in live if v.version == version), None)
        return live[-1] if live else None

    def avro(self, info: SchemaInfo) -> avro.schema.Schema | None:
        if info.version not in self._parsed:
            try:
                self._parsed[info.version] = avro.schema.parse(info.data.decode())
            except (avro.errors.SchemaParseException, ValueError, UnicodeDecodeError):
                self._parsed[info.version] = None
        return self._parsed[info.version]


def jsonable(value):
    """An Avro datum as JSON: bytes as hex, decimals and uuids as text."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _as_text(payload: bytes) -> tuple[str, object]:
    """("text", str) when the bytes are UTF-8 text, else ("hex", str)."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return "hex", payload.hex()
    if any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        return "hex", payload.hex()
    return "text", text


def decode_value(payload: bytes, info: SchemaInfo | None, schemas: Schemas) -> tuple[str, object]:
    """(format, value) of a payload under a schema version."""
    kind = info.type if info is not None else None
    if kind == "JSON":
        try:
            return "json", json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            pass
    elif kind == "AVRO":
        schema = schemas.avro(info)
        if schema is not None:
            try:
                return "avro", jsonable(avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(io.BytesIO(payload))))
            except (avro.errors.AvroException, EOFError, ValueError, TypeError, UnicodeDecodeError, IndexError):
                pass
    elif kind in _TEXT_SCHEMAS:
        try:
            return _TEXT_SCHEMAS[kind], payload.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return _as_text(payload)


def _key(meta) -> tuple[str | None, bool]:
    """(key as text or hex, whether it is hex)."""
    key = key_from_pulsar(meta)
    if key is None:
        return None, False
    try:
        return key.decode("utf-8"), False
    except UnicodeDecodeError:
        return key.hex(), True


def messages(entry: FetchedEntry, stream_id: int, partition: int, schemas: Schemas) -> list[dict]:
    """The messages of one stored entry (none for markers and Kafka control batches)."""
    header, _ = decode_entry(entry.data)
    if header.flags & EntryFlags.CONTROL:
        return []
    try:
        meta, payload = split_entry(pulsar_body(entry.data))
        if meta.HasField("marker_type"):
            return []
        if meta.encryption_keys:
            return [_unreadable(entry, stream_id, partition, meta, "encrypted")]
        parts = entry_messages(meta, payload)
    except (ConversionError, PulsarCodecError) as exc:
        return [_unreadable(entry, stream_id, partition, None, f"undecodable entry: {exc}")]
    batched = meta.HasField("num_messages_in_batch")
    version = version_from_bytes(meta.schema_version) if meta.HasField("schema_version") else None
    info = schemas.of(version)
    out = []
    for part in parts:
        single = part.metadata
        data = bytes(part.payload)
        shown = data[:MAX_VALUE_BYTES]
        null = single.HasField("null_value") and single.null_value
        fmt, value = ("null", None) if null else decode_value(shown if len(data) > MAX_VALUE_BYTES else data, info,
                                                               schemas)
        key, key_hex = _key(single)
        message_id = f"{stream_id}:{entry.base_offset}:{partition}" + (f":{part.index}" if batched else "")
        out.append({
            "partition": partition, "offset": entry.base_offset + part.index, "messageId": message_id,
            "key": key, "keyHex": key_hex, "properties": {p.key: p.value for p in single.properties},
            "publishTime": meta.publish_time, "eventTime": single.event_time or None,
            "producer": meta.producer_name or None, "schemaVersion": info.version if info is not None else None,
            "format": fmt, "value": value, "size": len(data), "truncated": len(data) > MAX_VALUE_BYTES,
        })
    return out


def _unreadable(entry, stream_id: int, partition: int, meta, reason: str) -> dict:
    return {"partition": partition, "offset": entry.base_offset, "messageId": f"{stream_id}:{entry.base_offset}:{partition}",
            "key": None, "keyHex": False, "properties": {},
            "publishTime": meta.publish_time if meta is not None else None, "eventTime": None,
            "producer": meta.producer_name if meta is not None else None, "schemaVersion": None,
            "format": "unreadable", "value": reason, "size": len(entry.data), "truncated": False}


def shown_bytes(message: dict) -> int:
    """What a message adds to an answer, roughly: its value as shown."""
    value = message["value"]
    return len(value) if isinstance(value, str) else len(json.dumps(value)) if value is not None else 0


__all__ = ["MAX_VALUE_BYTES", "Schemas", "decode_value", "jsonable", "messages", "shown_bytes"]

