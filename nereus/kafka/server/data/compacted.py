"""Kafka over key-compacted topics (``cleanup.policy`` with ``compact``).

A fetch below the key view's horizon is served from the view: each kept entry as a
batch with only its surviving records, at their original offsets (offset gaps, as
Kafka's log cleaner leaves them); past the view's last record the fetch continues
from the horizon in the stream. The raw records below the horizon may be released
by retention (``broker.admin.retention``): the view still serves them, and the log
start offset is then the view's first record. With ``compact,delete`` retention
applies to the view too: it is served from the stream's start offset only, so a key
whose latest record is past retention is gone, as Kafka deletes old segments. (Produce refuses records without a
key on such topics, INVALID_RECORD, as Kafka does: ``produce.py``.)
"""

from __future__ import annotations

from ....storage import FetchResult, OffsetOutOfRange
from ....codec.kafka.records import build_batch, decode_records


async def is_compacted(configs, topic: str) -> bool:
    """``compact`` is in the topic's cleanup policy (``configs``: the catalog's TopicConfigs)."""
    return "compact" in (await configs.value(topic, "cleanup.policy")).split(",")


async def deletes(configs, topic: str) -> bool:
    """``delete`` is in the topic's cleanup policy (retention applies to the view too)."""
    return "delete" in (await configs.value(topic, "cleanup.policy")).split(",")


async def log_start(configs, topic: str, part) -> int:
    """The partition's log start offset: on a compact-only topic whose raw records below
    the view's horizon were released, the view's first record (the view still serves it)."""
    start = part.handle.start_offset()
    if not await is_compacted(configs, topic) or await deletes(configs, topic):
        return start
    view = await part.topic.registry.key_views.get(part.handle.stream_id)
    if not view.entries or start == 0:
        return start
    first = view.entries[0]
    return min(start, first.entry.base_offset + first.keep[0])


async def view_fetch(part, offset: int, max_bytes: int,
                     floor: int = 0) -> tuple[list[bytes], FetchResult | None] | None:
    """Batches of the key view from ``offset``; or, past its last record, the stream's
    fetch from the horizon (``([], result)``); None at or above the horizon.

    ``floor`` (``compact,delete``): the log start; a fetch below it is OffsetOutOfRange and
    the view's records below it are not served."""
    view = await part.topic.registry.key_views.get(part.handle.stream_id)
    if offset >= view.horizon:
        return None
    if offset < floor:
        raise OffsetOutOfRange(f"offset {offset} is below the log start {floor}")
    items = view.read(offset, max_bytes)
    if not items:
        return [], await part.handle.fetch(max(view.horizon, part.handle.start_offset()), max_bytes=max_bytes)
    batches = []
    for item in items:
        batch = part.served(item.entry)
        if batch is None:
            continue
        base = item.entry.base_offset
        survivors = [k for k in item.keep if base + k >= floor]
        if not survivors:
            continue
        if len(survivors) < item.entry.record_count:
            keep = set(survivors)
            header, records = decode_records(batch)
            kept = [r for r in records if r.offset_delta in keep]
            batch = build_batch(kept, base_offset=item.entry.base_offset, leader_epoch=part.leader_epoch)
        batches.append(batch)
    return batches, None


__all__ = ["deletes", "is_compacted", "log_start", "view_fetch"]
