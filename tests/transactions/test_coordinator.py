"""The transaction coordinator: state machine, CAS races, fencing, timeouts, recovery."""

from __future__ import annotations

import asyncio

import pytest

from nereus.ledger.entry import EntryFlags, EntryFormat, EntryHeader, decode_entry
from nereus.ledger.naming import TopicName
from nereus.transactions import (ConcurrentTransactions, InvalidProducerIdMapping, InvalidTransactionTimeout,
                                 InvalidTxnState, ProducerFenced, TransactionNotFound, TxnState, kafka_key,
                                 pulsar_key)
from nereus.transactions.records import MAX_EPOCH, record_key

P0 = "persistent://public/default/orders-partition-0"
P1 = "persistent://public/default/orders-partition-1"
TIMEOUT = 60_000


async def produce(broker, partition: str, pid: int, epoch: int, count: int = 3) -> list[int]:
    """What a partition leader does for transactional records: verify, begin, append."""
    topic = await broker.registry.get(TopicName.parse(partition))
    await topic.ensure_writer()
    rec = await broker.coordinator.verify(pid, epoch, partition)
    await broker.stream_txns.begin(topic.stream_id, pid, epoch, topic.handle.next_offset(), sequence=rec.sequence)
    offsets = []
    for i in range(count):
        header = EntryHeader(EntryFormat.KAFKA, 1, producer_id=pid, producer_epoch=epoch,
                             flags=EntryFlags.TRANSACTIONAL | EntryFlags.BATCHED)
        result = await topic.append(header.pack() + b"record-%d" % i, 1)
        offsets.append(result.base_offset)
    return offsets


async def entries(broker, partition: str):
    topic = await broker.registry.get(TopicName.parse(partition))
    result = await topic.handle.fetch(0, topic.handle.next_offset(), max_bytes=1 << 20)
    return topic, [(e.base_offset, decode_entry(e.data)[0]) for e in result.entries]


async def markers(broker, partition: str):
    _, found = await entries(broker, partition)
    return [(offset, h) for offset, h in found if h.flags & EntryFlags.CONTROL]


async def test_init_add_commit_walks_the_state_machine_and_writes_commit_markers(broker):
    coord = broker.coordinator
    pid, epoch = await coord.init_producer("tx-1", TIMEOUT)
    key = kafka_key("tx-1")
    assert epoch == 0 and (await coord.describe(key)).state == TxnState.EMPTY
    await coord.add_partitions(key, pid, epoch, [P0, P1])
    await coord.add_partitions(key, pid, epoch, [P0])  # again: nothing new
    rec = await coord.describe(key)
    assert rec.state == TxnState.ONGOING and rec.partitions == [P0, P1]
    await produce(broker, P0, pid, epoch)
    await produce(broker, P1, pid, epoch)
    topic, _ = await entries(broker, P0)
    view = await broker.stream_txns.view(topic.stream_id, topic.handle.next_offset())
    assert view.lso == 0 and view.open == {pid: 0}
    done = await coord.end(key, pid, epoch, commit=True)
    assert done.state == TxnState.COMPLETE_COMMIT and done.partitions == []
    for partition in (P0, P1):
        found = await markers(broker, partition)
        assert [offset for offset, _ in found] == [3]
        header = found[0][1]
        assert header.format == EntryFormat.KAFKA and header.producer_id == pid and header.producer_epoch == epoch
        assert header.flags == EntryFlags.TRANSACTIONAL | EntryFlags.CONTROL | EntryFlags.BATCHED
    view = await broker.stream_txns.view(topic.stream_id, topic.handle.next_offset())
    assert view.lso == 4 and view.aborted(0, 4) == []
    # A retried EndTxn with the same outcome succeeds; the opposite one is refused.
    assert (await coord.end(key, pid, epoch, commit=True)).state == TxnState.COMPLETE_COMMIT
    with pytest.raises(InvalidTxnState):
        await coord.end(key, pid, epoch, commit=False)
    # The next transaction of the same producer starts from COMPLETE_COMMIT.
    await coord.add_partitions(key, pid, epoch, [P1])
    assert (await coord.describe(key)).partitions == [P1]


async def test_abort_lists_the_aborted_range_and_moves_the_lso(broker):
    coord = broker.coordinator
    key = kafka_key("tx-abort")
    pid, epoch = await coord.init_producer("tx-abort", TIMEOUT)
    await coord.add_partitions(key, pid, epoch, [P0])
    offsets = await produce(broker, P0, pid, epoch)
    topic, _ = await entries(broker, P0)
    await coord.end(key, pid, epoch, commit=False)
    found = await markers(broker, P0)
    assert [offset for offset, _ in found] == [3]
    view = await broker.stream_txns.view(topic.stream_id, topic.handle.next_offset())
    assert view.lso == 4
    assert view.aborted(0, 4) == [(pid, 0, 3)]
    assert all(view.is_aborted(pid, o) for o in offsets) and not view.is_aborted(pid + 1, 0)
    assert not view.is_aborted(pid, 4)


async def test_the_states_refuse_what_does_not_fit(broker):
    coord = broker.coordinator
    key = kafka_key("tx-states")
    pid, epoch = await coord.init_producer("tx-states", TIMEOUT)
    with pytest.raises(InvalidTxnState):  # nothing ongoing
        await coord.end(key, pid, epoch, commit=True)
    with pytest.raises(InvalidProducerIdMapping):
        await coord.add_partitions(key, pid + 1, epoch, [P0])
    with pytest.raises(InvalidProducerIdMapping):
        await coord.add_partitions(kafka_key("unknown"), pid, epoch, [P0])
    with pytest.raises(InvalidTxnState):  # the partition was never added
        await coord.verify(pid, epoch, P0)
    with pytest.raises(InvalidProducerIdMapping):
        await coord.verify(123456789, 0, P0)
    with pytest.raises(InvalidTransactionTimeout):
        await coord.init_producer("tx-states", coord.max_timeout_ms + 1)
    with pytest.raises(InvalidTransactionTimeout):
        await coord.init_producer("tx-states", 0)
    await coord.add_partitions(key, pid, epoch, [P0])
    await coord.verify(pid, epoch, P0)
    with pytest.raises(InvalidTxnState):
        await coord.verify(pid, epoch, P1)


async def test_two_coordinators_ending_the_same_transaction_complete_it_once(broker):
    key = kafka_key("tx-race")
    pid, epoch = await broker.coordinator.init_producer("tx-race", TIMEOUT)
    await broker.coordinator.add_partitions(key, pid, epoch, [P0, P1])
    await produce(broker, P0, pid, epoch)
    await produce(broker, P1, pid, epoch)
    other = broker.new_coordinator()
    results = await asyncio.gather(broker.coordinator.end(key, pid, epoch, True), other.end(key, pid, epoch, True))
    assert [r.state for r in results] == [TxnState.COMPLETE_COMMIT] * 2
    for partition in (P0, P1):
        assert len(await markers(broker, partition)) == 1
    # Opposite outcomes racing: exactly one wins, the other is refused.
    await broker.coordinator.add_partitions(key, pid, epoch, [P0])
    outcomes = await asyncio.gather(broker.coordinator.end(key, pid, epoch, True),
                                    other.end(key, pid, epoch, False), return_exceptions=True)
    errors = [o for o in outcomes if isinstance(o, Exception)]
    assert len(errors) == 1 and isinstance(errors[0], InvalidTxnState)


async def test_racing_init_producers_get_distinct_epochs_and_only_the_last_one_lives(broker):
    first, _ = await broker.coordinator.init_producer("tx-init", TIMEOUT)
    coords = [broker.coordinator, broker.new_coordinator(), broker.new_coordinator()]
    results = await asyncio.gather(*(c.init_producer("tx-init", TIMEOUT) for c in coords))
    assert {pid for pid, _ in results} == {first}
    epochs = sorted(epoch for _, epoch in results)
    assert epochs == [1, 2, 3]
    rec = await broker.coordinator.describe(kafka_key("tx-init"))
    assert rec.producer_epoch == 3
    key = kafka_key("tx-init")
    for stale in (1, 2):
        with pytest.raises(ProducerFenced):
            await broker.coordinator.add_partitions(key, first, stale, [P0])
    await broker.coordinator.add_partitions(key, first, 3, [P0])


async def test_racing_first_init_producers_agree_on_one_producer_id(broker):
    coords = [broker.coordinator, broker.new_coordinator()]
    results = await asyncio.gather(*(c.init_producer("tx-new", TIMEOUT) for c in coords))
    assert len({pid for pid, _ in results}) == 1 and sorted(e for _, e in results) == [0, 1]


async def test_reinit_fences_the_zombie_and_aborts_its_transaction_with_the_new_epoch(broker):
    coord = broker.coordinator
    key = kafka_key("tx-zombie")
    pid, epoch = await coord.init_producer("tx-zombie", TIMEOUT)
    await coord.add_partitions(key, pid, epoch, [P0])
    await produce(broker, P0, pid, epoch)
    pid2, epoch2 = await coord.init_producer("tx-zombie", TIMEOUT)
    assert pid2 == pid and epoch2 > epoch + 1  # one bump fenced the old transaction, one is the new producer's
    found = await markers(broker, P0)
    assert len(found) == 1 and found[0][1].producer_epoch == epoch + 1
    topic, _ = await entries(broker, P0)
    view = await broker.stream_txns.view(topic.stream_id, topic.handle.next_offset())
    assert view.aborted(0, 10) == [(pid, 0, 3)] and view.lso == 4
    with pytest.raises(ProducerFenced):
        await coord.add_partitions(key, pid, epoch, [P0])
    with pytest.raises(ProducerFenced):
        await coord.end(key, pid, epoch, commit=True)
    with pytest.raises(ProducerFenced):
        await coord.verify(pid, epoch, P0)
    with pytest.raises(ProducerFenced):  # KIP-360 with an epoch that is not (or no longer) current
        await coord.init_producer("tx-zombie", TIMEOUT, pid, epoch)
    assert (await coord.describe(key)).state == TxnState.EMPTY


async def test_kip360_reinit_with_the_current_epoch_bumps_it(broker):
    coord = broker.coordinator
    pid, epoch = await coord.init_producer("tx-360", TIMEOUT)
    assert await coord.init_producer("tx-360", TIMEOUT, pid, epoch) == (pid, epoch + 1)
    assert await coord.init_producer("tx-360", TIMEOUT, pid, epoch) == (pid, epoch + 1)  # a retry of it
    with pytest.raises(ProducerFenced):
        await coord.init_producer("tx-360", TIMEOUT, pid + 1, epoch + 1)


async def test_epoch_exhaustion_gives_a_new_producer_id(broker):
    coord = broker.coordinator
    key = kafka_key("tx-exhaust")
    pid, _ = await coord.init_producer("tx-exhaust", TIMEOUT)
    stored = await broker.meta.get(record_key(key))
    rec = (await coord.describe(key)).with_(producer_epoch=MAX_EPOCH - 1)
    await broker.meta.put(record_key(key), rec.to_json(), expected_version_id=stored.version.version_id)
    pid2, epoch2 = await coord.init_producer("tx-exhaust", TIMEOUT)
    assert pid2 != pid and epoch2 == 0
    assert (await coord.find_by_pid(pid2)).key == key
    with pytest.raises(ProducerFenced):  # the old pid's record moved on
        await coord.verify(pid, MAX_EPOCH - 1, P0)


async def test_an_abandoned_transaction_is_aborted_after_its_timeout(broker):
    coord = broker.coordinator
    key = kafka_key("tx-timeout")
    pid, epoch = await coord.init_producer("tx-timeout", 10_000)
    await coord.add_partitions(key, pid, epoch, [P0])
    await produce(broker, P0, pid, epoch)
    topic, _ = await entries(broker, P0)
    broker.clock.advance(9)
    assert await coord.abort_expired() == 0
    assert (await broker.stream_txns.view(topic.stream_id, 3)).lso == 0
    broker.clock.advance(2)
    assert await coord.abort_expired() == 1
    rec = await coord.describe(key)
    assert rec.state == TxnState.COMPLETE_ABORT and rec.producer_epoch == epoch + 1
    view = await broker.stream_txns.view(topic.stream_id, topic.handle.next_offset())
    assert view.lso == 4 and view.aborted(0, 4) == [(pid, 0, 3)]
    with pytest.raises(ProducerFenced):  # the zombie cannot commit what was aborted
        await coord.end(key, pid, epoch, commit=True)
    assert (await coord.end(key, pid, epoch, commit=False)).state == TxnState.COMPLETE_ABORT  # its abort agrees
    assert await coord.init_producer("tx-timeout", 10_000, pid, epoch) == (pid, epoch + 1)  # KIP-360 recovery


async def test_the_background_loop_aborts_expired_transactions(broker):
    coord = broker.coordinator
    coord.interval = 0.01
    key = kafka_key("tx-loop")
    pid, epoch = await coord.init_producer("tx-loop", 1_000)
    await coord.add_partitions(key, pid, epoch, [P0])
    broker.clock.advance(5)
    coord.start()
    deadline = asyncio.get_running_loop().time() + 10
    while (await coord.describe(key)).state != TxnState.COMPLETE_ABORT:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)


async def test_recovery_finishes_a_commit_whose_coordinator_died_after_prepare(broker):
    coord = broker.coordinator
    key = kafka_key("tx-crash")
    pid, epoch = await coord.init_producer("tx-crash", TIMEOUT)
    await coord.add_partitions(key, pid, epoch, [P0, P1])
    await produce(broker, P0, pid, epoch)
    await produce(broker, P1, pid, epoch)
    # The crash: PREPARE_COMMIT is durable, no marker was written.
    stored = await broker.meta.get(record_key(key))
    rec = (await coord.describe(key)).with_(state=TxnState.PREPARE_COMMIT)
    await broker.meta.put(record_key(key), rec.to_json(), expected_version_id=stored.version.version_id,
                          secondary_indexes=rec.active_index())
    with pytest.raises(ConcurrentTransactions):
        await coord.add_partitions(key, pid, epoch, [P0])
    restarted = broker.new_coordinator()
    assert await restarted.recover() == 1
    assert (await restarted.describe(key)).state == TxnState.COMPLETE_COMMIT
    for partition in (P0, P1):
        found = await markers(broker, partition)
        assert [offset for offset, _ in found] == [3]
        topic, _ = await entries(broker, partition)
        view = await broker.stream_txns.view(topic.stream_id, topic.handle.next_offset())
        assert view.lso == 4 and view.aborted(0, 4) == []
    assert await restarted.recover() == 0


async def test_complete_partition_twice_writes_one_marker(broker):
    coord = broker.coordinator
    key = kafka_key("tx-twice")
    pid, epoch = await coord.init_producer("tx-twice", TIMEOUT)
    await coord.add_partitions(key, pid, epoch, [P0])
    await produce(broker, P0, pid, epoch)
    await asyncio.gather(*(broker.participants.complete_partition(P0, pid, epoch, False) for _ in range(2)))
    await broker.participants.complete_partition(P0, pid, epoch, False)
    assert len(await markers(broker, P0)) == 1
    topic, _ = await entries(broker, P0)
    view = await broker.stream_txns.view(topic.stream_id, topic.handle.next_offset())
    assert view.aborted(0, 10) == [(pid, 0, 3)] and view.lso == 4


async def test_a_late_marker_of_a_finished_transaction_leaves_the_next_one_open(broker):
    """A completion that runs again on a stale copy of the record (recovery's snapshot, a retried
    WriteTxnMarkers) names the transaction it ends: the same producer's next one, begun meanwhile
    at the same epoch, keeps its records and its open record; group completers get the number."""
    coord = broker.coordinator
    key = kafka_key("tx-late")
    completed = []

    async def complete_group(group, txn_pid, txn_epoch, commit, sequence):
        completed.append((group, commit, sequence))

    broker.participants.register_group_completer(complete_group)
    pid, epoch = await coord.init_producer("tx-late", TIMEOUT)
    await coord.add_partitions(key, pid, epoch, [P0])
    await coord.add_groups(key, pid, epoch, "g-late")
    await produce(broker, P0, pid, epoch)
    first = await coord.describe(key)
    assert (await coord.end(key, pid, epoch, commit=False)).state == TxnState.COMPLETE_ABORT
    await coord.add_partitions(key, pid, epoch, [P0])
    second = await coord.describe(key)
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, first.producer_epoch)
    assert second.sequence == first.sequence + 1
    offsets = await produce(broker, P0, pid, epoch)
    # the first transaction's abort, once more
    await broker.participants.complete_partition(P0, pid, epoch, False, sequence=first.sequence)
    assert len(await markers(broker, P0)) == 1
    topic, _ = await entries(broker, P0)
    view = await broker.stream_txns.view(topic.stream_id, topic.handle.next_offset())
    assert view.open == {pid: offsets[0]} and view.aborted(0, 10) == [(pid, 0, 3)]
    assert (await coord.end(key, pid, epoch, commit=True)).state == TxnState.COMPLETE_COMMIT
    found = await markers(broker, P0)
    assert [(offset, h.producer_id) for offset, h in found] == [(3, pid), (offsets[-1] + 1, pid)]
    view = await broker.stream_txns.view(topic.stream_id, topic.handle.next_offset())
    assert view.open == {} and view.aborted(0, 100) == [(pid, 0, 3)]
    assert completed == [("g-late", False, first.sequence)]


async def test_pulsar_transactions_share_the_coordinator(broker):
    coord = broker.coordinator
    pid = await coord.new_txn(TIMEOUT)
    key = pulsar_key(0, pid)
    rec = await coord.describe(key)
    assert rec.state == TxnState.ONGOING and (await coord.find_by_pid(pid)).key == key
    await coord.add_partitions(key, pid, 0, [P0])
    await coord.add_subscriptions(key, pid, 0, [(P1, "sub")])
    completed = []

    async def complete_subscription(topic, sub, txn_pid, commit):
        completed.append((topic, sub, txn_pid, commit))

    broker.participants.register_subscription_completer(complete_subscription)
    await produce(broker, P0, pid, 0, count=1)
    assert (await coord.end(key, pid, 0, commit=True)).state == TxnState.COMPLETE_COMMIT
    assert completed == [(P1, "sub", pid, True)]
    with pytest.raises(InvalidTxnState):  # a Pulsar transaction is used once
        await coord.add_partitions(key, pid, 0, [P0])
    with pytest.raises(TransactionNotFound):
        await coord.end(pulsar_key(0, pid + 12345), pid + 12345, 0, commit=True)
    other = await coord.new_txn(1_000)
    broker.clock.advance(2)
    assert await coord.abort_expired() == 1
    assert (await coord.describe(pulsar_key(0, other))).state == TxnState.COMPLETE_ABORT
    assert {r.key for r in await coord.list(states=[TxnState.COMPLETE_ABORT])} == {pulsar_key(0, other)}
    assert [r.key for r in await coord.list(pids=[pid])] == [key]


async def test_group_offsets_complete_with_the_transaction(broker):
    coord = broker.coordinator
    key = kafka_key("tx-groups")
    pid, epoch = await coord.init_producer("tx-groups", TIMEOUT)
    await coord.add_groups(key, pid, epoch, "g1")
    calls = []

    async def complete_group(group, txn_pid, txn_epoch, commit, sequence):
        calls.append((group, txn_pid, txn_epoch, commit, sequence))

    # No completer yet: the decision stands, the transaction waits in PREPARE_COMMIT.
    assert (await coord.end(key, pid, epoch, commit=True)).state == TxnState.PREPARE_COMMIT
    broker.participants.register_group_completer(complete_group)
    assert await coord.recover() == 1
    assert calls == [("g1", pid, epoch, True, 1)]
    assert (await coord.describe(key)).state == TxnState.COMPLETE_COMMIT


async def test_a_zombie_append_after_the_end_is_aborted_by_the_sweep(broker):
    coord = broker.coordinator
    key = kafka_key("tx-stray")
    pid, epoch = await coord.init_producer("tx-stray", TIMEOUT)
    await coord.add_partitions(key, pid, epoch, [P0])
    await coord.verify(pid, epoch, P0)  # the leader's check passed...
    await coord.end(key, pid, epoch, commit=True)  # ...then the transaction ended before its append
    topic = await broker.registry.get(TopicName.parse(P0))
    await topic.ensure_writer()
    await broker.stream_txns.begin(topic.stream_id, pid, epoch, topic.handle.next_offset())
    await topic.append(EntryHeader(EntryFormat.KAFKA, 1, producer_id=pid, producer_epoch=epoch,
                                   flags=EntryFlags.TRANSACTIONAL).pack() + b"late", 1)
    assert (await broker.stream_txns.view(topic.stream_id, 1)).lso == 0  # held back
    coord.stale_open_grace_ms = 60_000
    assert await coord.abort_stale_open() == 0  # too young to judge
    # Another producer's live transaction on this partition keeps its open record.
    other_pid, other_epoch = await coord.init_producer("tx-live", TIMEOUT)
    await coord.add_partitions(kafka_key("tx-live"), other_pid, other_epoch, [P0])
    await broker.stream_txns.begin(topic.stream_id, other_pid, other_epoch, topic.handle.next_offset())
    coord.stale_open_grace_ms = 0
    assert await coord.abort_stale_open() == 1
    view = await broker.stream_txns.view(topic.stream_id, topic.handle.next_offset())
    assert view.aborted(0, 10) == [(pid, 0, 1)] and view.open == {other_pid: 1}


async def test_finished_pulsar_transactions_are_forgotten_after_the_retention(broker):
    coord = broker.coordinator
    pid = await coord.new_txn(TIMEOUT)
    kafka_pid, _ = await coord.init_producer("tx-kept", TIMEOUT)
    await coord.end(pulsar_key(0, pid), pid, 0, commit=True)
    assert await coord.forget_finished() == 0
    broker.clock.advance(coord.pulsar_retention_ms / 1000 + 1)
    assert await coord.forget_finished() == 1
    assert await coord.describe(pulsar_key(0, pid)) is None and await coord.find_by_pid(pid) is None
    with pytest.raises(TransactionNotFound):
        await coord.end(pulsar_key(0, pid), pid, 0, commit=True)
    assert (await coord.find_by_pid(kafka_pid)).key == kafka_key("tx-kept")  # Kafka ids stay


async def test_aborted_ranges_of_trimmed_records_are_dropped_by_the_next_abort(broker):
    coord = broker.coordinator
    key = kafka_key("tx-trim")
    pid, epoch = await coord.init_producer("tx-trim", TIMEOUT)
    for _ in range(2):
        await coord.add_partitions(key, pid, epoch, [P0])
        await produce(broker, P0, pid, epoch, count=2)
        await coord.end(key, pid, epoch, commit=False)
        topic = await broker.registry.get(TopicName.parse(P0))
        view = await broker.stream_txns.view(topic.stream_id, topic.handle.next_offset())
        if topic.handle.start_offset() == 0:
            assert view.aborted(0, 10) == [(pid, 0, 2)]
            await broker.storage.trim(topic.stream_id, 3)
            await topic.handle.refresh()
    assert topic.handle.start_offset() == 3
    assert view.aborted(0, 10) == [(pid, 3, 5)]


async def test_end_without_waiting_answers_at_the_decision_and_completes_in_the_background(broker):
    coord = broker.coordinator
    pid, epoch = await coord.init_producer("tx-nowait", TIMEOUT)
    key = kafka_key("tx-nowait")
    await coord.add_partitions(key, pid, epoch, [P0])
    await produce(broker, P0, pid, epoch)
    decided = await coord.end(key, pid, epoch, commit=True, wait=False)
    assert decided.state == TxnState.PREPARE_COMMIT  # durable: a crash from here on is finished by recovery
    await coord.settle(key, 30)
    assert (await coord.describe(key)).state == TxnState.COMPLETE_COMMIT
    assert [offset for offset, _ in await markers(broker, P0)] == [3]
    await coord.add_partitions(key, pid, epoch, [P0])  # the next transaction
    assert (await coord.describe(key)).state == TxnState.ONGOING


async def test_the_loop_forgets_transactional_ids_idle_past_their_expiration_but_not_ongoing_ones(broker):
    coord = broker.coordinator
    coord.transactional_id_expiration_ms = 600_000
    idle, committed, ongoing = (kafka_key(t) for t in ("tx-idle", "tx-committed", "tx-ongoing"))
    idle_pid, _ = await coord.init_producer("tx-idle", TIMEOUT)
    pid, epoch = await coord.init_producer("tx-committed", TIMEOUT)
    await coord.add_partitions(committed, pid, epoch, [P0])
    await coord.end(committed, pid, epoch, commit=True)
    long_pid, long_epoch = await coord.init_producer("tx-ongoing", 900_000)
    await coord.add_partitions(ongoing, long_pid, long_epoch, [P1])
    broker.clock.advance(599)
    assert await coord.expire_transactional_ids() == 0  # not idle long enough yet
    broker.clock.advance(61)  # past the expiration and past the loop's next check
    coord.interval = 0.01
    coord.start()
    deadline = asyncio.get_running_loop().time() + 10
    while await coord.describe(idle) is not None or await coord.describe(committed) is not None:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    assert (await coord.describe(ongoing)).state == TxnState.ONGOING  # an open transaction never expires
    assert await coord.find_by_pid(idle_pid) is None
    new_pid, new_epoch = await coord.init_producer("tx-idle", TIMEOUT)  # starts afresh
    assert (new_pid, new_epoch) != (idle_pid, 0) and new_epoch == 0
