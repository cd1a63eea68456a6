"""Group offsets committed inside a transaction (TxnOffsetCommit, ``txn/offsets_api.py``).

They are held pending in the metadata plane under
``/nereus/kafka/txn-offsets/{group}/{pid:020d}`` -> ``{"epoch", "seq", "offsets": [[topic,
partition, offset, leader epoch, metadata], ...]}`` until the transaction ends (``seq``: its
sequence number; a late completion of an earlier transaction leaves them alone): the
coordinator's ``complete_group`` (registered here) writes them as the group's
committed offsets on commit and drops them on abort. Completing twice is harmless
(recovery may): the pending record is gone after the first. OffsetFetch with
``require_stable`` answers UNSTABLE_OFFSET_COMMIT for a partition with a pending
offset.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import quote

from ....meta import cas
from ....transactions.stream_index import same_transaction

log = logging.getLogger(__name__)

PENDING_ROOT = "/nereus/kafka/txn-offsets/"
_END = "\U0010ffff"


def _group_prefix(group_id: str) -> str:
    return PENDING_ROOT + quote(group_id, safe="") + "/"


def pending_key(group_id: str, pid: int) -> str:
    return f"{_group_prefix(group_id)}{pid:020d}"


async def pending(meta, group_id: str) -> dict[int, dict]:
    """pid -> its pending record, for every open transaction with offsets of the group."""
    prefix = _group_prefix(group_id)
    return {int(rec.key[len(prefix):]): json.loads(rec.value)
            async for rec in meta.range_scan(prefix, prefix + _END)}


async def unstable_partitions(meta, group_id: str) -> set[tuple[str, int]]:
    return {(t, p) for record in (await pending(meta, group_id)).values() for t, p, *_ in record["offsets"]}


async def complete_group(meta, coordinator, group_id: str, pid: int, epoch: int, commit: bool,
                         sequence: int = 0) -> None:
    """End the offsets transaction ``sequence`` holds for a group: committed offsets on commit,
    nothing on abort (idempotent)."""
    key = pending_key(group_id, pid)
    rec = await meta.get(key)
    if rec is None:
        return
    held = json.loads(rec.value)
    if not same_transaction(held.get("seq", 0), sequence):
        return
    offsets = held["offsets"]
    if commit and offsets:
        group = await coordinator.group(group_id)
        codes = await coordinator.commit_offsets(
            group, {(t, p): (o, e, m) for t, p, o, e, m in offsets}, member_commit=False)
        failed = {tp: c for tp, c in codes.items() if c}
        if failed:  # the coordinator retries the completion (recovery)
            raise RuntimeError(f"offsets of group {group_id} not written: {failed}")
    await meta.delete(key, expected_version_id=rec.version.version_id)
    log.debug("kafka group %s: transactional offsets of producer %d %s", group_id, pid,
              "committed" if commit else "dropped")


async def hold(meta, group_id: str, pid: int, epoch: int, offsets: list, sequence: int = 0) -> None:
    """Add ``offsets`` ([topic, partition, offset, leader epoch, metadata] each) to those the
    transaction ``sequence`` of ``pid`` holds for the group (a later offset of a partition replaces
    its earlier one)."""
    def merge(old: bytes | None) -> bytes:
        record = json.loads(old) if old else {"offsets": []}
        if record.get("seq", 0) != sequence:  # left by an earlier transaction: not this one's
            record = {"offsets": []}
        by_tp = {(t, p): [t, p, o, e, m] for t, p, o, e, m in record["offsets"]}
        by_tp.update({(t, p): [t, p, o, e, m] for t, p, o, e, m in offsets})
        return json.dumps({"epoch": epoch, "seq": sequence, "offsets": list(by_tp.values())}).encode()

    await cas.update(meta, pending_key(group_id, pid), merge)


__all__ = ["PENDING_ROOT", "complete_group", "hold", "pending", "pending_key", "unstable_partitions"]
