"""Message deduplication by producer name and sequence id.

The highest persisted sequence id of each producer name is snapshotted into the
metadata plane every ``SNAPSHOT_EVERY`` entries (``{stream}/pulsar-dedup``: the map
and the offset it covers). On load the entries after the snapshot are replayed
(their stored header carries the sequence ids, the metadata the producer name), so
the state survives a crash without a metadata write per message.

Whether duplicates are dropped is the namespace policy ``deduplicationEnabled``
(``POST /admin/v2/namespaces/{tenant}/{ns}/deduplication``), read when a topic is
loaded and again whenever the policy is changed or removed through the admin API.
Without a policy the broker default ``BROKER_DEDUPLICATION_ENABLED`` applies: True
here, where Pulsar's ``brokerDeduplicationEnabled`` defaults to false. With
deduplication disabled every SEND is stored, but the sequence ids are still
tracked, so enabling it again takes effect at once with an accurate state.
"""

from __future__ import annotations

import asyncio
import json
import logging

from ...meta import MetadataStore
from ...meta import cas
from ...storage import StreamHandle
from ...storage.records import stream_partition
from . import entries

log = logging.getLogger(__name__)

SNAPSHOT_EVERY = 256
# Broker default for namespaces without a deduplication policy (Pulsar: false).
BROKER_DEDUPLICATION_ENABLED = True


def snapshot_key(stream_id: int) -> str:
    return f"{stream_partition(stream_id)}/pulsar-dedup"


class Dedup:
    """Per-topic sequence tracking: persisted (durable) and pushed (accepted) highs."""

    def __init__(self, meta: MetadataStore, stream_id: int) -> None:
        self.meta = meta
        self.stream_id = stream_id
        self.enabled = BROKER_DEDUPLICATION_ENABLED
        self.persisted: dict[str, int] = {}
        self.pushed: dict[str, int] = {}
        # (producer name, sequence id) -> the append task in flight (its result has the base offset)
        self.inflight: dict[tuple[str, int], asyncio.Future] = {}
        self._covered = 0  # offset the persisted map is complete up to
        self._since_snapshot = 0
        self._snapshotting: asyncio.Task | None = None

    async def restore(self, handle: StreamHandle) -> None:
        rec = await self.meta.get(snapshot_key(self.stream_id), partition_key=stream_partition(self.stream_id))
        offset = 0
        if rec is not None:
            value = json.loads(rec.value)
            self.persisted = dict(value["seq"])
            offset = value["offset"]
        await handle.refresh()
        offset = max(offset, handle.start_offset())
        end = handle.next_offset()
        replayed = 0
        while offset < end:
            result = await handle.fetch(offset, end, max_bytes=4 << 20)
            if not result.entries:
                break
            for fetched in result.entries:
                if fetched.base_offset < offset:
                    continue
                header, body = entries.split(fetched.data)
                name = entries.metadata_of(body).producer_name
                if name and header.last_sequence >= 0:
                    self.persisted[name] = max(self.persisted.get(name, -1), header.last_sequence)
                replayed += 1
            offset = result.entries[-1].end_offset
        self.pushed = dict(self.persisted)
        self._covered = end
        if replayed:
            log.info("stream %d: dedup state rebuilt, %d entries replayed after the snapshot", self.stream_id, replayed)

    def last_sequence(self, name: str) -> int:
        """What PRODUCER_SUCCESS reports: -1 while deduplication is disabled, as Pulsar does."""
        return self.persisted.get(name, -1) if self.enabled else -1

    def is_duplicate(self, name: str, sequence: int) -> bool:
        return self.enabled and sequence <= self.pushed.get(name, -1)

    def accept(self, name: str, highest: int) -> None:
        if highest > self.pushed.get(name, -1):
            self.pushed[name] = highest

    def committed(self, name: str, highest: int, end_offset: int) -> None:
        """An entry ending at ``end_offset`` is durable (called in offset order)."""
        if highest > self.persisted.get(name, -1):
            self.persisted[name] = highest
        self._covered = max(self._covered, end_offset)
        self._since_snapshot += 1
        if self._since_snapshot >= SNAPSHOT_EVERY and self._snapshotting is None:
            self._snapshotting = asyncio.ensure_future(self._snapshot_bg())

    def failed(self, name: str) -> None:
        """An append failed: later sends of the same sequence ids must be accepted again."""
        self.pushed[name] = self.persisted.get(name, -1)

    async def _snapshot_bg(self) -> None:
        try:
            await self.snapshot()
        except Exception:
            log.exception("stream %d: dedup snapshot failed", self.stream_id)
        finally:
            self._snapshotting = None

    async def snapshot(self) -> None:
        if self._since_snapshot == 0:
            return
        self._since_snapshot = 0
        value = json.dumps({"offset": self._covered, "seq": self.persisted}, separators=(",", ":")).encode()
        await cas.update(self.meta, snapshot_key(self.stream_id), lambda _old: value,
                         partition_key=stream_partition(self.stream_id))


__all__ = ["BROKER_DEDUPLICATION_ENABLED", "Dedup", "snapshot_key"]
