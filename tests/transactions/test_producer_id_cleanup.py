"""Producer-id index entries go away when they become garbage, and zombies stay fenced after."""

from __future__ import annotations

import asyncio
import time

import pytest

from nereus.transactions import InvalidProducerIdMapping, ProducerFenced, TxnState, kafka_key
from nereus.transactions.records import MAX_EPOCH, PID_ROOT, pid_key, record_key

P0 = "persistent://public/default/orders-partition-0"
TIMEOUT = 60_000


async def pid_entries(broker) -> dict[int, str]:
    """Every pid index entry: producer id -> the record key it names."""
    return {int(r.key.rsplit("/", 1)[1]): r.value.decode()
            async for r in broker.meta.range_scan(f"{PID_ROOT}/", f"{PID_ROOT}/~")}


async def exhaust(broker, transactional_id: str) -> tuple[int, int]:
    """Set the record's epoch to the last one (instead of 32k re-inits), then re-init: the new (pid, epoch)."""
    key = kafka_key(transactional_id)
    stored = await broker.meta.get(record_key(key))
    rec = (await broker.coordinator.describe(key)).with_(producer_epoch=MAX_EPOCH - 1)
    await broker.meta.put(record_key(key), rec.to_json(), expected_version_id=stored.version.version_id)
    return await broker.coordinator.init_producer(transactional_id, TIMEOUT)


async def test_exhaustion_keeps_the_previous_pid_only_and_every_zombie_stays_fenced(broker):
    coord, key = broker.coordinator, kafka_key("tx-gc")
    first, _ = await coord.init_producer("tx-gc", TIMEOUT)
    second, epoch = await exhaust(broker, "tx-gc")
    assert epoch == 0 and await pid_entries(broker) == {first: key, second: key}
    third, epoch = await exhaust(broker, "tx-gc")
    assert epoch == 0 and await pid_entries(broker) == {second: key, third: key}  # the first one is gone
    assert (await coord.describe(key)).previous_producer_id == second

    # The zombie of the last exhaustion is still told it is fenced (its entry is kept) ...
    with pytest.raises(ProducerFenced):
        await coord.verify(second, MAX_EPOCH - 1, P0)
    # ... and the older one, whose entry is gone, is refused too, as an unknown producer id.
    with pytest.raises(InvalidProducerIdMapping):
        await coord.verify(first, MAX_EPOCH - 1, P0)
    for zombie in (first, second):
        with pytest.raises(InvalidProducerIdMapping):
            await coord.add_partitions(key, zombie, MAX_EPOCH - 1, [P0])
        with pytest.raises(InvalidProducerIdMapping):
            await coord.end(key, zombie, MAX_EPOCH - 1, commit=True)
    with pytest.raises(ProducerFenced):
        await coord.init_producer("tx-gc", TIMEOUT, first, MAX_EPOCH - 1)

    # A retry of the InitProducerId that exhausted the epoch gets the new producer, not a fence.
    assert await coord.init_producer("tx-gc", TIMEOUT, second, MAX_EPOCH - 1) == (third, 0)
    # The live producer is unaffected.
    await coord.add_partitions(key, third, 0, [P0])
    assert (await coord.verify(third, 0, P0)).state == TxnState.ONGOING
    assert (await coord.end(key, third, 0, commit=True)).state == TxnState.COMPLETE_COMMIT


async def test_expiration_deletes_the_previous_pid_entry_with_the_record(broker):
    coord = broker.coordinator
    coord.transactional_id_expiration_ms = 1_000
    await coord.init_producer("tx-idle", TIMEOUT)
    await exhaust(broker, "tx-idle")
    assert len(await pid_entries(broker)) == 2
    broker.clock.advance(2)
    assert await coord.expire_transactional_ids() == 1
    assert await pid_entries(broker) == {}


async def test_racing_first_inits_leave_one_pid_entry(broker):
    coords = [broker.coordinator, broker.new_coordinator()]
    for i in range(5):
        results = await asyncio.gather(*(c.init_producer(f"tx-race-{i}", TIMEOUT) for c in coords))
        assert len({pid for pid, _ in results}) == 1
    entries = await pid_entries(broker)
    assert sorted(entries.values()) == sorted(kafka_key(f"tx-race-{i}") for i in range(5))


async def test_the_expiration_pass_deletes_pid_entries_no_record_names(broker):
    coord = broker.coordinator
    live, _ = await coord.init_producer("tx-live", TIMEOUT)
    previous = live
    live, _ = await exhaust(broker, "tx-live")
    txn = await coord.new_txn(TIMEOUT)  # a Pulsar transaction's entry
    # What a broker that died between writing a pid entry and its record leaves behind:
    orphan = await coord.producer_ids.allocate()
    await broker.meta.put(pid_key(orphan), kafka_key("tx-never-written").encode())
    assert await coord.expire_transactional_ids() == 0
    assert orphan in await pid_entries(broker)  # too young: its record may be on its way
    coord.orphan_pid_grace_ms = 0
    await wait_until_older(broker, pid_key(orphan))
    assert await coord.expire_transactional_ids() == 0
    assert set(await pid_entries(broker)) == {previous, live, txn}


async def wait_until_older(broker, key: str) -> None:
    """Until the metadata plane's clock has moved past ``key``'s write (the grace compares with it)."""
    written = (await broker.meta.get(key)).version.modified_timestamp
    deadline = asyncio.get_running_loop().time() + 10
    while int(time.time() * 1000) <= written:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.005)
