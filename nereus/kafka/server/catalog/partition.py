"""One Kafka partition: a stream shared with the Pulsar topic of the same name.

Appends go through the protocol-neutral ``nereus.topics.Topic`` (one append session
per stream in this process, taken on the first produce, never by a fetch; Pulsar
consumers are woken through its listeners). The leader epoch is the stream's
fencing token. When the topic unloads (its session was fenced or lost) the
partition is closed and the next request loads it afresh. Idempotent producers are checked
by ``producer_state.ProducerStates`` (bounded in time and count); the state is rebuilt
from the stored entry headers after a restart.
"""

from __future__ import annotations

import asyncio
import logging

from ....topics.convert import kafka_batch, kafka_batch_chunks
from ....ledger.entry import EntryFlags, EntryFormat, EntryHeader, decode_entry
from ....storage import FetchedEntry
from ....codec.kafka.batch import BatchHeader
from .producer_state import DUPLICATE, INVALID_EPOCH, NONE, OUT_OF_ORDER, ProducerState, ProducerStates

log = logging.getLogger(__name__)

RESTORE_RECORDS = 20_000  # producer state is rebuilt from this many records at the tail

ATTACHMENT = "kafka"


class Partition:
    def __init__(self, core, topic: str, index: int, *, storage, meta, producer_options: dict) -> None:
        self.storage = storage
        self.meta = meta  # of the stream's time index
        self.name = topic
        self.index = index
        self.topic = core
        self.handle = core.handle
        self.leader_epoch = 0
        self.producers = ProducerStates(**producer_options)
        # Transactions begun here: pid -> epoch, as of the stream index's generation (txn/data_path.begin_batch)
        self.txn_open: dict[int, int] = {}
        self.txn_generation = -1
        self.closed = False
        self.loading: asyncio.Future | None = None
        self._restored_to = 0
        self._restored_token: int | None = None  # the append session the producer state was restored under
        core.on_unload(self._unloaded)

    def _unloaded(self, _reason: str) -> None:
        self.closed = True

    async def load(self) -> None:
        tail = await self.storage.tail(self.handle.stream_id)
        self.leader_epoch = tail.token
        token = self.handle.fencing_token
        await self._restore_producers()
        self._restored_to = self.handle.next_offset()
        self._restored_token = token

    async def ensure_writer(self) -> None:
        """Hold the append session before a produce; raises StreamFenced if the topic unloaded.

        The session may have been taken since the load by this call or by the broker
        adopting the topic (a move back after another broker wrote): either way the
        producer state is brought up to what the other writers committed meanwhile.
        """
        if not self.handle.writable:
            await self.topic.ensure_writer()
        token = self.handle.fencing_token
        if token == self._restored_token:
            return
        self.leader_epoch = max(self.leader_epoch, token or 0)
        if self.handle.next_offset() != self._restored_to:  # another session wrote since the load
            await self._restore_producers()
            self._restored_to = self.handle.next_offset()
        self._restored_token = token

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
                    self.producers.restore(header.producer_id, header.producer_epoch, header.base_sequence,
                                           header.last_sequence, entry.base_offset)
            offset = result.entries[-1].end_offset

    # -- idempotence -------------------------------------------------------------------
    def check_sequence(self, batch: BatchHeader):
        """(error code, original base offset or future) for a producer's batch; NONE to append."""
        return self.producers.check(batch)

    def accept(self, batch: BatchHeader, result) -> None:
        self.producers.accept(batch, result)

    def forget_failed(self, batch: BatchHeader, result) -> None:
        """An append failed: the producer may send these sequences again."""
        self.producers.forget_failed(batch, result)

    # -- data path -----------------------------------------------------------------------
    def append(self, batch: BatchHeader, data: memoryview, keys=None) -> asyncio.Future:
        """Start appending one batch now (call order = offset order); yields the base offset.

        ``keys``: the batch's records as the topic's key log takes them (``KeyRecorder.committed``)."""
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
        # The one copy of a produced batch: ``data`` is a view of the request frame, which the
        # stored entry must not pin (nor the tail cache, which keeps the entry).
        task = self.topic.append(b"".join((header.pack(), data)), batch.record_count, keys)
        count, size = batch.record_count, len(data)

        def done(t: asyncio.Task) -> None:
            if t.cancelled() or t.exception() is not None:
                return
            self.topic.traffic.published(count, size)
            # Keeps the Pulsar dedup snapshot covering Kafka entries (no replay of them on load).
            self.topic.dedup.committed("", -1, t.result().base_offset + count)

        task.add_done_callback(done)
        return task

    def served(self, entry: FetchedEntry) -> bytes | None:
        """The entry as a Kafka batch with its base offset and leader epoch as served."""
        return kafka_batch(entry.data, entry.base_offset, self.leader_epoch)

    def served_chunks(self, entry: FetchedEntry) -> list | None:
        """``served`` as chunks to write in order, the stored batch referenced, not copied."""
        return kafka_batch_chunks(entry.data, entry.base_offset, self.leader_epoch)


__all__ = ["DUPLICATE", "INVALID_EPOCH", "NONE", "OUT_OF_ORDER", "Partition", "ProducerState"]
