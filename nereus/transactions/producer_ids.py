"""One producer-id space for both protocols: a metadata counter, reserved in blocks."""

from __future__ import annotations

import asyncio
import json

from ..meta import MetadataStore, cas

PRODUCER_ID_KEY = "/nereus/kafka/next-producer-id"  # kept where Kafka's idempotent producers put it
PRODUCER_ID_BLOCK = 1000


class ProducerIds:
    """Producer ids from a metadata counter, reserved in blocks (unique across restarts and brokers)."""

    def __init__(self, meta: MetadataStore) -> None:
        self.meta = meta
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def allocate(self) -> int:
        """A producer id no other caller (of any process) ever got."""
        async with self._lock:  # two callers must not both reserve a block and drop one
            if self._next >= self._end:
                rec = await cas.update(self.meta, PRODUCER_ID_KEY, lambda old: json.dumps(
                    {"next": (json.loads(old)["next"] if old else 1000) + PRODUCER_ID_BLOCK}).encode())
                self._end = json.loads(rec.value)["next"]
                self._next = self._end - PRODUCER_ID_BLOCK
            pid = self._next
            self._next += 1
            return pid


__all__ = ["PRODUCER_ID_BLOCK", "PRODUCER_ID_KEY", "ProducerIds"]
