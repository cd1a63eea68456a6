"""What a Pulsar consumer may see of a stream that has transactions.

Dispatch stops at the last stable offset (the lowest first offset of an open
transaction: Pulsar's maxReadPosition), and skips CONTROL entries (transaction
markers, of either protocol) and the entries of aborted transactions, Kafka ones
included. The answers come from the stream's transaction index
(``nereus.transactions.stream_index``), cached per broker: a stream that never had a
transaction costs no metadata read.
"""

from __future__ import annotations

from ...ledger.entry import EntryFlags, EntryHeader
from ...storage import OffsetOutOfRange, StorageError
from . import entries

_CONTROL, _TRANSACTIONAL = int(EntryFlags.CONTROL), int(EntryFlags.TRANSACTIONAL)
_SCAN_WINDOW = 256  # offsets read per step when looking back for the last visible entry


async def view(topic):
    """The stream's TxnView at its current end, or None when the broker has no transactions."""
    streams = getattr(topic.service, "stream_txns", None)
    if streams is None:
        return None
    return await streams.view(topic.stream_id, topic.handle.next_offset())


def hidden(header: EntryHeader, base: int, txns) -> bool:
    """True for an entry no Pulsar consumer gets: a marker, or a record of an aborted transaction."""
    flags = header.flags
    if flags & _CONTROL:
        return True
    return bool(flags & _TRANSACTIONAL) and txns is not None and txns.is_aborted(header.producer_id, base)


async def last_visible(topic, end: int):
    """The last entry below ``end`` (and below the LSO) that a consumer may get, or None.

    Readers compare it with what they received (hasMessageAvailable), so it must not be a
    marker, an aborted record or a record above the LSO, which they would wait for ever.
    """
    txns = await view(topic)
    hi = min(end, txns.lso) if txns is not None else end
    lo = topic.handle.start_offset()
    step = 1  # usually the last entry is visible: one small read
    while hi > lo:
        window = max(lo, hi - step)
        found, pos = None, window
        while pos < hi:
            try:
                fetched = (await topic.handle.fetch(pos, hi, max_bytes=1 << 20)).entries
            except (OffsetOutOfRange, StorageError):
                return None
            if not fetched:
                break
            for entry in fetched:
                if entry.base_offset < hi and not hidden(entries.split(entry.data)[0], entry.base_offset, txns):
                    found = entry
            pos = fetched[-1].end_offset
        if found is not None:
            return found
        hi, step = window, _SCAN_WINDOW
    return None


__all__ = ["hidden", "last_visible", "view"]
