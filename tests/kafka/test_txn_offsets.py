"""Group offsets held by a transaction are tagged with its sequence number: a late completion of
an earlier transaction of the same producer (same id and epoch) leaves the next one's alone."""

from __future__ import annotations

from nereus.kafka.server.groups import txn_offsets

GROUP, TOPIC = "g", "t"


async def test_a_late_completion_leaves_the_offsets_of_the_next_transaction(memory_meta):
    """Offsets held by transaction 2 of a producer survive a late abort of its transaction 1."""
    await txn_offsets.hold(memory_meta, GROUP, 7, 0, [[TOPIC, 0, 10, -1, None]], sequence=1)
    await txn_offsets.complete_group(memory_meta, None, GROUP, 7, 0, False, sequence=1)
    await txn_offsets.hold(memory_meta, GROUP, 7, 0, [[TOPIC, 0, 20, -1, None]], sequence=2)
    await txn_offsets.complete_group(memory_meta, None, GROUP, 7, 0, False, sequence=1)  # late, once more
    held = await txn_offsets.pending(memory_meta, GROUP)
    assert held[7]["seq"] == 2 and held[7]["offsets"] == [[TOPIC, 0, 20, -1, None]]
    await txn_offsets.complete_group(memory_meta, None, GROUP, 7, 0, False, sequence=2)
    assert await txn_offsets.pending(memory_meta, GROUP) == {}


async def test_offsets_left_by_an_earlier_transaction_are_not_merged_into_the_next(memory_meta):
    await txn_offsets.hold(memory_meta, GROUP, 7, 0, [[TOPIC, 0, 10, -1, None], [TOPIC, 1, 5, -1, None]], sequence=1)
    await txn_offsets.hold(memory_meta, GROUP, 7, 0, [[TOPIC, 0, 20, -1, None]], sequence=2)
    held = await txn_offsets.pending(memory_meta, GROUP)
    assert held[7]["offsets"] == [[TOPIC, 0, 20, -1, None]]
