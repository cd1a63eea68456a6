"""MessageId <-> offset conversions, seeks and the last message id.

``MessageId.earliest`` is ``(-1, -1)`` and ``latest`` is ``(INT64_MAX, INT64_MAX)``
on the wire (as unsigned 64-bit values there).
"""

from __future__ import annotations

from ...ledger.entry import EntryFlags
from ...storage import OffsetOutOfRange
from ...codec.pulsar import pb
from . import entries, visibility
from .view_floor import view_floor

_INT64_MAX = (1 << 63) - 1
_NO_ID = (1 << 64) - 1


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def is_earliest(mid: pb.MessageIdData) -> bool:
    return _signed(mid.ledgerId) < 0 or _signed(mid.entryId) < 0


def is_latest(mid: pb.MessageIdData) -> bool:
    return mid.ledgerId >= _INT64_MAX and mid.entryId >= _INT64_MAX


def _clamp(topic, offset: int) -> int:
    return min(max(offset, topic.handle.start_offset()), topic.handle.next_offset())


def start_of(topic, mid: pb.MessageIdData) -> int:
    """Where a reader starting at ``mid`` begins: the entry holding it (the client drops what it must)."""
    if is_earliest(mid):
        return topic.handle.start_offset()
    if is_latest(mid):
        return topic.handle.next_offset()
    return _clamp(topic, mid.entryId)


def seek_position(topic, mid: pb.MessageIdData) -> int:
    """The cursor position for SEEK(mid): ``mid`` is the next message delivered."""
    if is_earliest(mid):
        return topic.handle.start_offset()
    if is_latest(mid):
        return topic.handle.next_offset()
    return _clamp(topic, mid.entryId + max(0, mid.batch_index))


async def _entry(topic, offset: int):
    try:
        result = await topic.handle.fetch(offset, offset + 1, max_bytes=1)
    except OffsetOutOfRange:
        return None
    for entry in result.entries:
        if entry.base_offset <= offset < entry.end_offset:
            return entry
    return None


async def entry_at(topic, offset: int) -> int | None:
    """Records from ``offset`` to the end of its entry when ``offset`` starts one, else 1."""
    entry = await _entry(topic, offset)
    if entry is None:
        return None
    return entry.record_count if entry.base_offset == offset else 1


async def by_publish_time(topic, publish_time: int) -> int:
    """First offset whose entry was published at or after ``publish_time`` (binary search)."""
    lo, hi = topic.handle.start_offset(), topic.handle.next_offset()
    while lo < hi:
        entry = await _entry(topic, (lo + hi) // 2)
        if entry is None:
            break
        header, _ = entries.split(entry.data)
        if header.first_timestamp < publish_time:
            lo = entry.end_offset
        else:
            hi = entry.base_offset
    return lo


async def last_message_id(topic, *, read_compacted: bool = False) -> pb.MessageIdData:
    """Id of the last readable message; entryId -1 when there is none (empty, or all trimmed).

    A trimmed message is not "available": readers compare this id with their own. For
    a ``read_compacted`` reader whose whole stream lies below the key view's horizon it
    is the view's last record (the stream's last ones may have been compacted away, as
    a tombstone is: the reader would wait for them for ever).
    """
    await topic.handle.refresh()
    end = topic.handle.next_offset()
    mid = pb.MessageIdData(ledgerId=topic.stream_id, entryId=_NO_ID, partition=topic.partition)
    if read_compacted:
        view = await topic.core.registry.key_views.get(topic.stream_id)
        if end <= view.horizon:
            last = view.entries[-1] if view.entries else None
            if last is not None and last.entry.base_offset + last.keep[-1] >= await view_floor(topic):
                header, _ = entries.split(last.entry.data)
                mid.entryId = last.entry.base_offset
                if header.flags & EntryFlags.BATCHED:
                    mid.batch_index = last.keep[-1]
            return mid
    if end <= topic.handle.start_offset():
        return mid
    if getattr(topic.service, "stream_txns", None) is not None:
        # Neither a marker nor an uncommitted or aborted record: readers would wait for it.
        entry = await visibility.last_visible(topic, end)
        if entry is None:
            return mid
    else:
        entry = await _entry(topic, end - 1)
    if entry is None:
        mid.entryId = end - 1
        return mid
    header, _ = entries.split(entry.data)
    mid.entryId = entry.base_offset
    if header.flags & EntryFlags.BATCHED:
        mid.batch_index = entry.record_count - 1
    return mid


__all__ = ["by_publish_time", "entry_at", "is_earliest", "is_latest", "last_message_id", "seek_position",
           "start_of"]
