"""Share group membership (KIP-932's ShareGroupHeartbeat): member epochs and the assignment.

Rules:

- Member epoch 0 joins (with the member id the client chose, KIP-1082; an empty one is
  given a fresh id), -1 leaves. Any other epoch must be the member's current epoch, or
  the answer is FENCED_MEMBER_EPOCH (UNKNOWN_MEMBER_ID for an unknown member); the
  client then joins again with epoch 0.
- The group epoch grows whenever the membership, a subscription, or the partition count
  of a subscribed topic changes. A member is brought to the group epoch by its next
  heartbeat, which also carries its new assignment (none when it did not change).
- Assignment (the ``simple`` assignor, ``assignor.py``): the partitions of the subscribed
  topics spread evenly over the members, each partition shared by several members only when
  there are more members than partitions (its records are then shared out by acquisition,
  ``partition.py``). Computed once per group epoch.
- A member not heard from for the session timeout leaves the group.
- Membership lives in the coordinator's memory only: after a restart members get
  UNKNOWN_MEMBER_ID and join again, which costs nothing here (no revocation).

Sans-I/O: topics are names and partition counts; the handler maps topic ids.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from . import assignor

UNKNOWN_MEMBER, FENCED_MEMBER_EPOCH, INVALID_REQUEST = 25, 110, 42
LEAVE = -1
ASSIGNOR = "simple"

TopicPartitions = assignor.TopicPartitions


@dataclass
class ShareMember:
    member_id: str
    rack_id: str | None
    client_id: str
    client_host: str
    topics: frozenset[str] = frozenset()
    epoch: int = 0
    assigned: TopicPartitions = field(default_factory=dict)
    assigned_ids: dict[str, object] = field(default_factory=dict)  # the topic id of each topic assigned
    last_seen: float = 0.0


@dataclass
class ShareHeartbeatAnswer:
    error: int
    member_id: str | None = None
    epoch: int = -1
    assignment: TopicPartitions | None = None  # None: unchanged since the member's last heartbeat
    message: str | None = None


class ShareGroupState:
    """The members of one share group and their assignment."""

    def __init__(self, group_id: str, *, session_timeout: float = 45.0) -> None:
        self.group_id = group_id
        self.session_timeout = session_timeout
        self.members: dict[str, ShareMember] = {}
        self.epoch = 0
        self._partitions: dict[str, int] = {}
        self._ids: dict[str, object] = {}
        self._assignment: dict[str, TopicPartitions] = {}
        self._assigned_epoch = -1

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    @property
    def subscribed(self) -> set[str]:
        return {t for m in self.members.values() for t in m.topics}

    def heartbeat(self, now: float, *, member_id: str, epoch: int, topics: list[str] | None, rack_id: str | None,
                  client_id: str, client_host: str, partitions: dict[str, int],
                  topic_ids: dict[str, object] | None = None) -> ShareHeartbeatAnswer:
        """Apply one ShareGroupHeartbeat; ``partitions``: partition counts of the topics involved,
        ``topic_ids`` their ids (a topic deleted and created again under its name is another topic:
        its members are assigned it anew)."""
        self.expire(now)
        member = self.members.get(member_id) if member_id else None
        if epoch == LEAVE:
            if member is not None:
                del self.members[member_id]
                self.epoch += 1
            return ShareHeartbeatAnswer(0, member_id, LEAVE)
        if epoch == 0:
            if member is None:
                member = ShareMember(member_id or uuid.uuid4().hex, rack_id, client_id, client_host)
                self.members[member.member_id] = member
                self.epoch += 1
            elif topics is None:
                topics = sorted(member.topics)
            if topics is None:
                return ShareHeartbeatAnswer(INVALID_REQUEST, member.member_id,
                                            message="a joining member must subscribe to topics")
            member.epoch = 0  # a rejoin is told its whole assignment again
        elif member is None:
            return ShareHeartbeatAnswer(UNKNOWN_MEMBER, member_id, message=f"member {member_id} is not in the group")
        elif epoch != member.epoch:
            return ShareHeartbeatAnswer(FENCED_MEMBER_EPOCH, member_id,
                                        message=f"member epoch {epoch} is not the current {member.epoch}")
        member.last_seen = now
        member.rack_id = rack_id if rack_id is not None else member.rack_id
        if topics is not None and frozenset(topics) != member.topics:
            member.topics = frozenset(topics)
            self.epoch += 1
        counts = {t: n for t, n in partitions.items() if t in self.subscribed}
        ids = {t: i for t, i in (topic_ids or {}).items() if t in counts}
        if counts != self._partitions or ids != self._ids:
            self._partitions, self._ids = counts, ids
            self.epoch += 1
        if member.epoch == self.epoch:
            return ShareHeartbeatAnswer(0, member.member_id, member.epoch)
        target = self._targets().get(member.member_id, {})
        target_ids = {t: ids.get(t) for t in target}
        changed = target != member.assigned or target_ids != member.assigned_ids or member.epoch == 0
        member.assigned, member.assigned_ids, member.epoch = target, target_ids, self.epoch
        return ShareHeartbeatAnswer(0, member.member_id, member.epoch, target if changed else None)

    def _targets(self) -> dict[str, TopicPartitions]:
        """Every member's partitions at the current group epoch."""
        if self._assigned_epoch != self.epoch:
            subscriptions = {m: member.topics for m, member in self.members.items()}
            self._assignment = assignor.assign(subscriptions, self._partitions, self._assignment)
            self._assigned_epoch = self.epoch
        return self._assignment

    def expire(self, now: float) -> list[str]:
        """Drop the members whose session timed out; returns their ids."""
        gone = [m for m, v in self.members.items() if now - v.last_seen > self.session_timeout]
        for member_id in gone:
            del self.members[member_id]
        if gone:
            self.epoch += 1
        return gone


__all__ = ["ASSIGNOR", "FENCED_MEMBER_EPOCH", "LEAVE", "ShareGroupState", "ShareHeartbeatAnswer", "ShareMember",
           "UNKNOWN_MEMBER"]
