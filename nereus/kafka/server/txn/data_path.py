"""The data path of transactions: transactional produce and read_committed reads.

Produce: before the first transactional batch of a producer id and epoch on a
partition, the coordinator confirms the producer is current and added the
partition (``verify``), and the stream's transaction index records the open
transaction from a lower bound of its first offset (``begin``); the partition
remembers it, so later batches of the transaction cost nothing. The memory is
checked again when the stream's transaction index changes (a transaction began or
ended there), so a zombie's batch after its transaction was aborted is refused.

Read committed: only records below the last stable offset (the first offset of
the oldest open transaction), with the aborted transactions of the range for the
client to filter its batches. Entries of the Pulsar format carry no Kafka
transaction fields: aborted ones are served marked as their transaction's batches,
so the client's filter drops them too.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import OrderedDict
from typing import TYPE_CHECKING

import crc32c

from kio.schema.errors import ErrorCode

from ....ledger.entry import EntryFlags, EntryFormat, decode_entry
from ....codec.kafka.batch import TRANSACTIONAL_MASK, parse_header
from ....transactions import errors as txn_errors

if TYPE_CHECKING:
    from .context import Transactions

log = logging.getLogger(__name__)

_ATTRIBUTES, _PRODUCER, _CRC = struct.Struct(">h"), struct.Struct(">qh"), struct.Struct(">I")

READ_COMMITTED = 1
LSO_POLL_SECONDS = 0.5  # a long poll held at the last stable offset also looks again this often


#: Most streams whose last change ``TxnSignals`` remembers one by one.
MAX_SIGNALLED_STREAMS = 100_000


class TxnSignals:
    """Per stream: a generation that changes at each change of its transaction index, and long polls woken by it.

    Generations are stamps of one counter, so that only the most recently changed streams
    need an entry: a forgotten stream answers the highest stamp forgotten, which differs
    from any stamp it had before a later change (a change takes a new, higher stamp) and may
    only make a caller look at an index that did not change.
    """

    def __init__(self, max_streams: int = MAX_SIGNALLED_STREAMS) -> None:
        self._stamps: OrderedDict[int, int] = OrderedDict()  # stream -> stamp of its last change, oldest first
        self._last_stamp = 0
        self._forgotten = 0  # the highest stamp dropped from ``_stamps``
        self._max_streams = max_streams
        self._waiters: dict[int, list[asyncio.Future]] = {}

    def changed(self, stream_id: int) -> None:
        """The stream transaction index's listener: its open transactions or LSO may have changed."""
        self._last_stamp += 1
        self._stamps[stream_id] = self._last_stamp
        self._stamps.move_to_end(stream_id)
        if len(self._stamps) > self._max_streams:
            self._forgotten = self._stamps.popitem(last=False)[1]
        for fut in self._waiters.pop(stream_id, ()):
            if not fut.done():
                fut.set_result(True)

    def generation(self, stream_id: int) -> int:
        return self._stamps.get(stream_id, self._forgotten)

    async def wait(self, stream_id: int, timeout: float) -> bool:
        """Wait for the next change of the stream's index; False on timeout."""
        fut = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(stream_id, [])
        waiters.append(fut)
        try:
            await asyncio.wait([fut], timeout=timeout)
            return fut.done()
        finally:
            if fut in waiters:
                waiters.remove(fut)
            if not waiters and self._waiters.get(stream_id) is waiters:
                del self._waiters[stream_id]


async def begin_batch(txns: Transactions, part, batch) -> tuple[ErrorCode, str | None]:
    """(error code, message) for a transactional batch; NONE: it may be appended."""
    pid, epoch = batch.producer_id, batch.producer_epoch
    if pid < 0 or batch.base_sequence < 0:
        return ErrorCode.invalid_record, "a transactional batch needs a producer id and sequence"
    coordinator, streams = txns.coordinator, txns.streams
    if coordinator is None or streams is None:
        return ErrorCode.coordinator_not_available, "transactions are not enabled on this broker"
    stream_id = part.handle.stream_id
    generation = txns.signals.generation(stream_id)
    if part.txn_generation != generation and part.txn_open:
        # The stream's index changed (a transaction began or ended): keep what is still open at the same epoch
        index = await streams.index(stream_id)
        part.txn_open = {p: e for p, e in part.txn_open.items() if index.open.get(p, (0, None))[1] == e}
    part.txn_generation = generation
    if part.txn_open.get(pid) == epoch:
        return ErrorCode.none, None
    stream = str(part.topic.name)
    try:
        record = await coordinator.verify(pid, epoch, stream)
        await streams.begin(stream_id, pid, epoch, part.handle.next_offset(), sequence=record.sequence)
    except txn_errors.ProducerFenced:
        return ErrorCode.invalid_producer_epoch, None
    except (txn_errors.InvalidTxnState, txn_errors.InvalidProducerIdMapping) as exc:
        return ErrorCode.invalid_txn_state, str(exc)
    except txn_errors.ConcurrentTransactions as exc:
        return ErrorCode.concurrent_transactions, str(exc)
    except Exception as exc:
        log.warning("kafka: transactional produce to %s: %s", stream, exc)
        return ErrorCode.coordinator_not_available, str(exc)
    part.txn_open[pid] = epoch
    part.txn_generation = txns.signals.generation(stream_id)  # this begin's own change
    return ErrorCode.none, None


async def begin_request(txns: Transactions, catalog, req) -> None:
    """Begin the transactions of a Produce request's partitions all at once, before its appends.

    The appends (one partition after the other, in order) then find them begun; a
    partition whose check fails here is checked again, and answered, by its append.
    """
    parts = [(topic.name, pdata) for topic in req.topic_data for pdata in topic.partition_data]
    if len(parts) > 1:
        await asyncio.gather(*(_begin_partition(txns, catalog, name, pdata) for name, pdata in parts),
                             return_exceptions=True)


async def _begin_partition(txns: Transactions, catalog, topic: str, pdata) -> None:
    if not pdata.records:
        return
    batch = parse_header(pdata.records)
    if not batch.transactional or batch.control:
        return
    part = await catalog.partition(topic, pdata.index)
    if part is not None:
        await begin_batch(txns, part, batch)


async def view(txns: Transactions, part, high_watermark: int):
    """The stream's transaction view (None: transactions are not enabled)."""
    if txns.streams is None:
        return None
    return await txns.streams.view(part.handle.stream_id, high_watermark)


def aborted_pulsar_entry(entry, txns) -> bool:
    """A Pulsar-format transactional entry of an aborted transaction (the client cannot filter it)."""
    data = entry.data
    if len(data) <= 3 or data[3] == EntryFormat.KAFKA:
        return False
    header, _ = decode_entry(data)
    return bool(header.flags & EntryFlags.TRANSACTIONAL) and txns.is_aborted(header.producer_id, entry.base_offset)


def as_aborted_batch(batch: bytes, entry) -> bytes:
    """A converted Pulsar entry marked as its transaction's batch, so the client's aborted-transaction filter
    skips it (dropping it here would leave a consumer whose last batch it was without a way past it)."""
    header, _ = decode_entry(entry.data)
    out = bytearray(batch)
    attributes = _ATTRIBUTES.unpack_from(out, 21)[0] | TRANSACTIONAL_MASK
    _ATTRIBUTES.pack_into(out, 21, attributes)
    _PRODUCER.pack_into(out, 43, header.producer_id, header.producer_epoch)
    _CRC.pack_into(out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


__all__ = ["LSO_POLL_SECONDS", "READ_COMMITTED", "TxnSignals", "aborted_pulsar_entry", "as_aborted_batch", "begin_batch",
           "begin_request", "view"]
