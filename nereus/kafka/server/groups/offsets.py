"""The committed offsets of the groups a coordinator holds, written only conditionally.

Records: ``/nereus/kafka/offsets/{group}/{topic}:{partition:010d}`` ->
``{"offset", "epoch", "metadata", "ts"}`` (names URL-quoted; one level below the
group so its offsets are one range in key order).

Offset commits. The coordinator validates member and generation against the group
it holds and waits until that group state is durable. For a member's commit it
then re-reads the group record's version: if another broker wrote the group, the
generation just validated may be stale, so the group is dropped and the commit
answered NOT_COORDINATOR (a window between this read and the offset write remains;
Oxia has no multi-key transactions). Each offset is written with the version this
broker knows (read first if it never saw the record). An offset write that loses
a race does not overwrite blindly: the group record is re-read; if it changed, the
group is dropped and the partition answered NOT_COORDINATOR (the client retries
against the current group). If it did not, this broker still holds the group's
current generation and the commit was validated against it, so the offset is
re-read, the value it replaces is logged, and the write is retried once with that
version; losing again answers NOT_COORDINATOR. A broker writes one commit request
of a group at a time, in arrival order, so its own commits never race each other.
A commit is acknowledged only after its write; other failures answer
COORDINATOR_NOT_AVAILABLE (retriable).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from ....meta import EXPECT_ABSENT, PutOp, UnexpectedVersion
from ....codec.kafka.consumer_protocol import subscribed_topics
from .members import (COORDINATOR_NOT_AVAILABLE, EMPTY, GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC, NON_EMPTY_GROUP,
                      NONE, NOT_COORDINATOR, GroupError, GroupLost)

if TYPE_CHECKING:
    from .group import Group

log = logging.getLogger(__name__)

OFFSETS_ROOT = "/nereus/kafka/offsets/"
_END = "\U0010ffff"


def group_prefix(group_id: str) -> str:
    return OFFSETS_ROOT + quote(group_id, safe="") + "/"


def offset_key(group_id: str, topic: str, partition: int) -> str:
    return f"{group_prefix(group_id)}{quote(topic, safe='')}:{partition:010d}"


class OffsetCommits:
    """The offset commits of ``Coordinator`` (whose ``meta``, ``durable`` and ``_still_owned`` they use)."""

    async def commit_offsets(self, group: Group, offsets: dict[tuple[str, int], tuple[int, int, str | None]],
                             *, member_commit: bool) -> dict[tuple[str, int], int]:
        """Write validated commits ``(topic, partition) -> (offset, leader epoch, metadata)``.

        Returns the Kafka error code of each partition (NONE once durable).
        """
        rec = group.record
        tps = list(offsets)
        async with rec.commits:
            try:
                await self.durable(group)
                if member_commit and not await self._still_owned(group):
                    return dict.fromkeys(tps, NOT_COORDINATOR)
                await self._learn_offset_versions(group, [tp for tp in tps if tp not in rec.offsets])
            except GroupLost:
                return dict.fromkeys(tps, NOT_COORDINATOR)
            now_ms = int(time.time() * 1000)
            values = {tp: json.dumps({"offset": o, "epoch": e, "metadata": m, "ts": now_ms}).encode()
                      for tp, (o, e, m) in offsets.items()}
            codes, conflicts = self._outcomes(group, tps, await self._put_offsets(group, tps, values))
            if conflicts:
                codes.update(await self._after_conflict(group, conflicts, values))
            return codes

    async def _put_offsets(self, group: Group, tps: list, values: dict) -> list:
        ops = [PutOp(offset_key(group.group_id, t, p), values[(t, p)], expected_version_id=group.record.offsets[(t, p)])
               for t, p in tps]
        return await self.meta.put_many(ops)

    def _outcomes(self, group: Group, tps: list, results: list) -> tuple[dict, list]:
        codes, conflicts = {}, []
        for tp, result in zip(tps, results):
            if isinstance(result, UnexpectedVersion):
                conflicts.append(tp)
            elif isinstance(result, Exception):
                log.warning("kafka group %s: committing %s-%d failed: %s", group.group_id, tp[0], tp[1], result)
                group.record.offsets.pop(tp, None)  # unknown whether it was written: read it next time
                codes[tp] = COORDINATOR_NOT_AVAILABLE
            else:
                group.record.offsets[tp] = result.version.version_id
                codes[tp] = NONE
        return codes, conflicts

    async def _after_conflict(self, group: Group, tps: list, values: dict) -> dict:
        """Offsets written elsewhere since this broker saw them: retry once if the group is still ours."""
        if not await self._still_owned(group):
            return dict.fromkeys(tps, NOT_COORDINATOR)
        current = await self._learn_offset_versions(group, tps)
        for tp in tps:
            log.warning("kafka group %s: the offset of %s-%d was committed elsewhere (%s); this broker holds "
                        "the group's current state, so its commit replaces it", group.group_id, tp[0], tp[1],
                        current.get(tp))
        codes, conflicts = self._outcomes(group, tps, await self._put_offsets(group, tps, values))
        for tp in conflicts:
            group.record.offsets.pop(tp, None)
            codes[tp] = NOT_COORDINATOR
        return codes

    async def _learn_offset_versions(self, group: Group, tps: list) -> dict:
        """Read the offset records of ``tps``: remembers their versions, returns their values."""
        records = await asyncio.gather(*(self.meta.get(offset_key(group.group_id, t, p)) for t, p in tps))
        values = {}
        for tp, rec in zip(tps, records):
            group.record.offsets[tp] = EXPECT_ABSENT if rec is None else rec.version.version_id
            values[tp] = None if rec is None else json.loads(rec.value)
        return values

    async def delete_offsets(self, group_id: str, tps: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete: (the group's error code, each partition's). Offsets of a topic the group's
        members are subscribed to stay (GROUP_SUBSCRIBED_TO_TOPIC); a group whose members do not use
        the consumer protocol must be empty (NON_EMPTY_GROUP); the others go."""
        try:
            group = await self.group(group_id, create=False)
        except GroupError as exc:
            return exc.code, {}
        prefix = group_prefix(group_id)
        if group is None:
            if not [k async for k in self.meta.list(prefix, prefix + _END)]:
                return GROUP_ID_NOT_FOUND, {}
            subscribed: frozenset[str] = frozenset()
        else:
            subscribed = _subscribed(group)
            if subscribed is None:
                return NON_EMPTY_GROUP, {}
        codes = {tp: GROUP_SUBSCRIBED_TO_TOPIC for tp in tps if tp[0] in subscribed}
        doomed = [tp for tp in dict.fromkeys(tps) if tp not in codes]
        if group is None:
            for t, p in doomed:
                await self.meta.delete(offset_key(group_id, t, p))
                codes[(t, p)] = NONE
            return NONE, codes
        async with group.record.commits:  # after this broker's commits in flight
            try:
                await self.durable(group)
            except GroupLost:
                return NOT_COORDINATOR, {}
            for t, p in doomed:
                await self.meta.delete(offset_key(group_id, t, p))
                group.record.offsets[(t, p)] = EXPECT_ABSENT
                codes[(t, p)] = NONE
        return NONE, codes

    async def fetch_offsets(self, group_id: str) -> dict[tuple[str, int], dict]:
        """Every committed offset of the group: ``(topic, partition) -> {"offset", "epoch", "metadata", "ts"}``."""
        prefix = group_prefix(group_id)
        out = {}
        async for rec in self.meta.range_scan(prefix, prefix + _END):
            topic, partition = rec.key[len(prefix):].rsplit(":", 1)
            out[(unquote(topic), int(partition))] = json.loads(rec.value)
        return out


def _subscribed(group: Group) -> frozenset[str] | None:
    """The topics the group's members subscribe to; None when its members use another protocol than
    the consumer's (whose subscriptions cannot be read): only an empty such group loses offsets."""
    if group.is_consumer:
        return group.consumer.subscribed
    if group.state == EMPTY and not group.members:
        return frozenset()
    if group.protocol_type != "consumer":
        return None
    topics: frozenset[str] = frozenset()
    for member in group.members.values():
        topics |= subscribed_topics(member.metadata_for(group.protocol)) or frozenset()
    return topics


__all__ = ["OFFSETS_ROOT", "OffsetCommits", "group_prefix", "offset_key"]
