"""OffsetFetch with require_stable (KIP-447) against a transaction's completion that lands between
its reads: the pending offsets are read before the committed ones, so the answer is either
UNSTABLE_OFFSET_COMMIT or the committed offset, never "no offset"."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from nereus.kafka.server.groups import group_api, txn_offsets
from nereus.kafka.server.groups.offsets import offset_key

GROUP, TOPIC = "g", "t"


class CompletingCoordinator:
    """A coordinator whose transaction completes (offset written, pending dropped) when its committed
    offsets are read, as a completion racing the fetch does."""

    def __init__(self, meta) -> None:
        self.meta = meta

    def coordinates(self, group_id: str) -> bool:
        return True

    async def fetch_offsets(self, group_id: str) -> dict:
        before = {}
        rec = await self.meta.get(offset_key(group_id, TOPIC, 0))
        if rec is not None:
            before[(TOPIC, 0)] = json.loads(rec.value)
        await self.meta.put(offset_key(group_id, TOPIC, 0), json.dumps({"offset": 10, "epoch": -1}).encode())
        await self.meta.delete(txn_offsets.pending_key(group_id, 7))
        return before


@dataclass
class Asked:
    name: str
    partition_indexes: tuple


async def test_a_completion_between_the_reads_shows_the_offset_as_unstable(memory_meta):
    await txn_offsets.hold(memory_meta, GROUP, 7, 0, [[TOPIC, 0, 10, -1, None]])
    ctx = SimpleNamespace(meta=memory_meta, coordinator=CompletingCoordinator(memory_meta))
    conn = SimpleNamespace(authorizer=None)
    error, found = await group_api._fetch_group(ctx, conn, GROUP, [Asked(TOPIC, (0,))], require_stable=True)
    assert error == ErrorCode.none
    assert found == {TOPIC: [(0, -1, -1, "", ErrorCode.unstable_offset_commit)]}
    # Asked again (as the client does after UNSTABLE_OFFSET_COMMIT): the committed offset.
    error, found = await group_api._fetch_group(ctx, conn, GROUP, [Asked(TOPIC, (0,))], require_stable=True)
    assert found[TOPIC][0][:2] == (0, 10)
