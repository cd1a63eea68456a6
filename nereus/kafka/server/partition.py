"""One Kafka partition: a stream shared with the Pulsar topic of the same name.

Appends go through the protocol-neutral ``nereus.topics.Topic`` (one append session
per stream in this process, taken on the first produce, never by a fetch; Pulsar
consumers are woken through its listeners). The leader epoch is the stream's
fencing token. When the topic unloads (its session was fenced or lost) the
partition is closed and the next request loads it afresh. Idempotent producers are checked here:
per producer id the epoch and the last five batches' sequence ranges, as Kafka
keeps them; the state is rebuilt from the stored entry headers after a restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field

from ...ledger.convert import kafka_batch
from ...ledger.entry import EntryFlags, EntryFormat, EntryHeader, decode_entry
from ...storage import FetchedEntry
from ..codec.batch import BatchHeader

log = logging.getLogger(__name__)

KEEP_BATCHES = 5  # Kafka caches this many batches per producer for duplicate detection
RESTORE_RECORDS = 20_000  # producer state is rebuilt from this many records at the tail

NONE, OUT_OF_ORDER, DUPLICATE, INVALID_EPOCH = 0, 45, 46, 47
ATTACHMENT = "kafka"


@dataclass
class ProducerState:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=KEEP_BATCHES))  # (first, last, future|offset)

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1


class Partition:
    def __init__(self, service, topic: str, index: int, core) -> None:
        self.service = service
        self.name = topic
        self.index = index
        self.topic = core
        self.handle = core.handle
        self.leader_epoch = 0
        self.producers: dict[int, ProducerState] = {}
        self.closed = False
        self.loading: asyncio.Future | None = None
        self._restored_to = 0
        core.on_unload(self._unloaded)

    def _unloaded(self, _reason: str) -> None:
        self.closed = True

    async def load(self) -> None:
        tail = await self.service.storage.tail(self.handle.stream_id)
        self.leader_epoch = tail.token
        await self._restore_producers()
        self._restored_to = self.handle.next_offset()

    async def ensure_writer(self) -> None:
        """Hold the append session before a produce; raises StreamFenced if the topic unloaded."""
        if self.handle.writable:
            return
        await self.topic.ensure_writer()
        self.leader_epoch = self.handle.fencing_token or self.leader_epoch
        if self.handle.next_offset() != self._restored_to:  # another session wrote since the load
            await self._restore_producers()
            self._restored_to = self.handle.next_offset()

    async def _restore_producers(self) -> None:
        handle = self.handle
        end = handle.next_offset()
        offset = max(handle.start_offset(), end - RESTORE_RECORDS)
        while offset < end:
            result = await handle.fetch(offset, end, max_bytes=8 << 20)
            if not result.entries:
                break
            for entry in result.entries:
                if entry.base_offset < offset:
                    continue
                header, _ = decode_entry(entry.data)
                if header.format == EntryFormat.KAFKA and header.producer_id >= 0 and header.base_sequence >= 0:
                    state = self.producers.get(header.producer_id)
                    if state is None or header.producer_epoch > state.epoch:
                        state = self.producers[header.producer_id] = ProducerState(header.producer_epoch)
                    state.batches.append((header.base_sequence, header.last_sequence, entry.base_offset))
            offset = result.entries[-1].end_offset

    # -- idempotence -------------------------------------------------------------------
    def check_sequence(self, batch: BatchHeader):
        """(error code, original base offset or future) for a producer's batch; NONE to append."""
        pid = batch.producer_id
        if pid < 0 or batch.base_sequence < 0:
            return NONE, None
        state = self.producers.get(pid)
        if state is None:
            return NONE, None  # unknown producer (new, or its state expired): accept
        if batch.producer_epoch < state.epoch:
            return INVALID_EPOCH, None
        if batch.producer_epoch > state.epoch:
            return (NONE, None) if batch.base_sequence == 0 else (OUT_OF_ORDER, None)
        for first, last, original in state.batches:
            if first == batch.base_sequence and last == batch.last_sequence:
                return DUPLICATE, original
        expected = (state.last_sequence + 1) % (1 << 31)
        if batch.base_sequence == expected:
            return NONE, None
        if state.batches and _seq_before(batch.base_sequence, expected):
            return DUPLICATE, None
        return OUT_OF_ORDER, None

    def accept(self, batch: BatchHeader, result) -> None:
        if batch.producer_id < 0 or batch.base_sequence < 0:
            return
        state = self.producers.get(batch.producer_id)
        if state is None or batch.producer_epoch > state.epoch:
            state = self.producers[batch.producer_id] = ProducerState(batch.producer_epoch)
        state.batches.append((batch.base_sequence, batch.last_sequence, result))

    def forget_failed(self, batch: BatchHeader, result) -> None:
        """An append failed: the producer may send these sequences again."""
        state = self.producers.get(batch.producer_id)
        if state is None:
            return
        kept = [b for b in state.batches if b[2] is not result]
        # Later batches of the same producer were accepted after a gap; drop them too.
        cut = next((i for i, b in enumerate(state.batches) if b[2] is result), len(kept))
        state.batches = deque(kept[:cut], maxlen=KEEP_BATCHES)

    # -- data path -----------------------------------------------------------------------
    def append(self, batch: BatchHeader, data: memoryview) -> asyncio.Future:
        """Start appending one batch now (call order = offset order); yields the base offset."""
        flags = EntryFlags.NONE
        if batch.compression:
            flags |= EntryFlags.COMPRESSED
        if batch.transactional:
            flags |= EntryFlags.TRANSACTIONAL
        if batch.control:
            flags |= EntryFlags.CONTROL
        header = EntryHeader(EntryFormat.KAFKA, batch.record_count, first_timestamp=batch.base_timestamp,
                             max_timestamp=batch.max_timestamp, producer_id=batch.producer_id,
                             producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
                             last_sequence=batch.last_sequence, flags=flags | EntryFlags.BATCHED)
        task = self.topic.append(header.pack() + bytes(data), batch.record_count)
        count = batch.record_count

        def done(t: asyncio.Task) -> None:
            if t.cancelled() or t.exception() is not None:
                return
            # Keeps the Pulsar dedup snapshot covering Kafka entries (no replay of them on load).
            self.topic.dedup.committed("", -1, t.result().base_offset + count)

        task.add_done_callback(done)
        return task

    def served(self, entry: FetchedEntry) -> bytes:
        """The entry as a Kafka batch with its base offset and leader epoch as served."""
        return kafka_batch(entry.data, entry.base_offset, self.leader_epoch)


def _seq_before(seq: int, expected: int) -> bool:
    """seq is below expected in 31-bit wrapping sequence space."""
    return 0 < (expected - seq) % (1 << 31) < (1 << 30)


__all__ = ["Partition", "ProducerState"]
