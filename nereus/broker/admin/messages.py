"""Reading single messages over REST: ``lastMessageId``, ``examinemessage``, get message by id.

Message ids map as everywhere else: the "ledger" is the topic's stream id and the
entry id is the offset where the entry (a SEND, possibly a batch) starts. A message
answered here is the whole entry, as Pulsar answers it: the body is the
(decompressed) payload, a batch with its single-message metadata, and the entry's
metadata is in ``X-Pulsar-*`` headers. On a partitioned topic these calls are
refused (405), as Pulsar refuses them: they apply to one partition.
"""

from __future__ import annotations

from datetime import datetime, timezone

from aiohttp import web

from ...codec.pulsar.compression import decompress
from ...codec.pulsar.errors import DecompressionFailed, UnsupportedCompression
from ...pulsar.server import entries, positions
from ...storage import OffsetOutOfRange
from .common import AdminError, context, partitions, require_topic, topic_name

_SIGNED = 1 << 63
_COMPRESSION = {1: "LZ4", 2: "ZLIB", 3: "ZSTD", 4: "SNAPPY"}


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= _SIGNED else value


async def _single(request: web.Request, what: str):
    ctx = context(request)
    name = topic_name(request)
    if await partitions(ctx, name) != [name]:
        raise AdminError(405, f"{what} on a partitioned topic is not allowed")
    topic = await require_topic(ctx, name)
    await topic.handle.refresh()
    return topic


def _date(ms: int) -> str:
    """Java's ISO_OFFSET_DATE_TIME (as Pulsar formats header dates), in UTC."""
    at = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    text = at.strftime("%Y-%m-%dT%H:%M:%S")
    if ms % 1000:
        text += f".{ms % 1000:03d}".rstrip("0")
    return text + "Z"


async def _entry_at(topic, offset: int):
    """The entry starting at ``offset``, else None."""
    try:
        result = await topic.handle.fetch(offset, offset + 1, max_bytes=1)
    except OffsetOutOfRange:
        return None
    for entry in result.entries:
        if entry.base_offset == offset:
            return entry
    return None


async def _entry_holding(topic, offset: int):
    try:
        result = await topic.handle.fetch(offset, offset + 1, max_bytes=1)
    except OffsetOutOfRange:
        return None
    return next((e for e in result.entries if e.base_offset <= offset < e.end_offset), None)


def _message(topic, entry) -> web.Response:
    """Pulsar's answer for one entry: payload as the body, metadata as headers."""
    _header, body = entries.split(entry.data)
    meta = entries.metadata_of(body)
    payload = entries.payload_of(body)
    if meta.compression:
        try:
            payload = decompress(meta.compression, payload, meta.uncompressed_size)
        except (DecompressionFailed, UnsupportedCompression) as exc:
            raise AdminError(500, f"cannot decompress the message: {exc}") from None
    headers = {"X-Pulsar-Message-ID": f"{topic.stream_id}:{entry.base_offset}"}
    for prop in meta.properties:
        headers[f"X-Pulsar-PROPERTY-{prop.key}"] = prop.value
    if meta.HasField("publish_time"):
        headers["X-Pulsar-publish-time"] = _date(meta.publish_time)
    if meta.HasField("event_time") and meta.event_time:
        headers["X-Pulsar-event-time"] = _date(meta.event_time)
    if meta.HasField("deliver_at_time"):
        headers["X-Pulsar-deliver-at-time"] = _date(meta.deliver_at_time)
    if meta.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(meta.num_messages_in_batch)
        headers["X-Pulsar-batch-size"] = str(len(body) - meta.ByteSize())
    if meta.HasField("null_value"):
        headers["X-Pulsar-null-value"] = str(meta.null_value).lower()
    headers["X-Pulsar-Is-Encrypted"] = str(len(meta.encryption_keys) > 0).lower()
    if meta.HasField("producer_name"):
        headers["X-Pulsar-producer-name"] = meta.producer_name
    headers["X-Pulsar-sequence-id"] = str(meta.sequence_id)
    if meta.HasField("partition_key"):
        headers["X-Pulsar-partition-key"] = meta.partition_key
    if meta.HasField("ordering_key"):
        headers["X-Pulsar-ordering-key"] = meta.ordering_key.decode("utf-8", errors="replace")
    if meta.HasField("compression"):
        headers["X-Pulsar-compression"] = _COMPRESSION.get(meta.compression, "NONE")
    if meta.HasField("uncompressed_size"):
        headers["X-Pulsar-uncompressed-size"] = str(meta.uncompressed_size)
    if meta.HasField("schema_version"):
        headers["X-Pulsar-schema-version"] = meta.schema_version.hex()
    if meta.HasField("highest_sequence_id"):
        headers["X-Pulsar-highest-sequence-id"] = str(meta.highest_sequence_id)
    return web.Response(body=bytes(payload), headers=headers, content_type="application/octet-stream")


async def get_last_message_id(request: web.Request) -> web.Response:
    topic = await _single(request, "GetLastMessageId")
    mid = await positions.last_message_id(topic)
    answer = {"ledgerId": _signed(mid.ledgerId), "entryId": _signed(mid.entryId), "partitionIndex": topic.partition}
    if mid.HasField("batch_index"):
        entry = await _entry_at(topic, answer["entryId"])
        answer["batchIndex"] = mid.batch_index
        answer["batchSize"] = entry.record_count if entry is not None else mid.batch_index + 1
    return web.json_response(answer)


def _message_position(request: web.Request) -> int:
    try:
        position = int(request.query.get("messagePosition", "1"))
    except ValueError:
        raise AdminError(400, "messagePosition must be an integer") from None
    return max(position, 1)  # as Pulsar: a position below 1 means the first one


async def examine_message(request: web.Request) -> web.Response:
    initial = request.query.get("initialPosition", "latest")
    if initial not in ("latest", "earliest"):
        raise AdminError(412, "Invalid initialPosition: it should be latest or earliest")
    position = _message_position(request)
    topic = await _single(request, "Examine messages")
    start, end = topic.handle.start_offset(), topic.handle.next_offset()
    if end <= start:
        raise AdminError(412, "Could not examine messages due to the total message is zero")
    entry = None
    offset = start if initial == "earliest" else end - 1
    for _ in range(position):  # the N-th entry from that end
        if not start <= offset < end:
            entry = None
            break
        entry = await _entry_holding(topic, offset)
        if entry is None:
            break
        offset = entry.end_offset if initial == "earliest" else entry.base_offset - 1
    if entry is None:
        raise AdminError(412, f"Could not examine messages: messagePosition {position} is beyond the topic's "
                              "messages")
    return _message(topic, entry)


async def get_message_by_id(request: web.Request) -> web.Response:
    try:
        ledger, offset = int(request.match_info["ledgerId"]), int(request.match_info["entryId"])
    except ValueError:
        raise AdminError(404, "Message not found: ledgerId and entryId must be integers") from None
    topic = await _single(request, "GetMessageById")
    if ledger != topic.stream_id:
        raise AdminError(404, "Message not found")
    entry = await _entry_at(topic, offset) if offset >= 0 else None
    if entry is None:
        raise AdminError(404, f"Message id not found: {ledger}:{offset}")
    return _message(topic, entry)


def add_routes(router: web.UrlDispatcher) -> None:
    t = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    router.add_get(t + "/lastMessageId", get_last_message_id)
    router.add_get(t + "/examinemessage", examine_message)
    router.add_get(t + "/ledger/{ledgerId}/entry/{entryId}", get_message_by_id)
