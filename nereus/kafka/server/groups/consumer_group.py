"""The consumer group protocol of KIP-848: server-side assignment, member epochs, reconciliation.

Rules (what ``ConsumerGroupHeartbeat`` does to the state):

- The group epoch grows whenever the membership or a subscription changes (or the
  partition count of a subscribed topic); the target assignment is then computed
  again by the server's assignor (``uniform``: the partitions of every topic,
  sorted, dealt round-robin over the members subscribed to it, sorted by id;
  ``range``: each topic split in contiguous ranges) and stamped with that epoch.
- A member reconciles towards its target one heartbeat at a time. Partitions it
  must give up are revoked first: it is told its current assignment minus them
  and keeps its epoch until a heartbeat reports them no longer owned. Only then
  does it move to the target epoch, and it is given the target partitions that
  no other member still holds (the rest on a later heartbeat, once released).
- Member epoch 0 joins, -1 leaves (-2: a static member leaving for a restart,
  which keeps its place for the session timeout). A heartbeat with another epoch
  than the member's is FENCED_MEMBER_EPOCH; the client then rejoins with epoch 0.
  Except, as Kafka: the member's previous epoch with owned partitions that are all
  in its current assignment (the answer that moved it on was lost) is taken as its
  current epoch, and the answer repeats the epoch and the assignment.
- A member whose session timed out leaves the group.

Sans-I/O: topics are names and partition counts here; the handler maps topic ids.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

UNKNOWN_MEMBER, FENCED_MEMBER_EPOCH, UNSUPPORTED_ASSIGNOR = 25, 110, 112
ASSIGNORS = ("uniform", "range")
LEAVE, STATIC_LEAVE = -1, -2

TopicPartitions = dict[str, frozenset[int]]


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: float
    topics: frozenset[str] = frozenset()
    assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1  # the epoch before the last move (a lost answer's heartbeat carries it)
    assigned: TopicPartitions = field(default_factory=dict)  # what the member was told it owns
    revoking: TopicPartitions = field(default_factory=dict)  # given up, not yet confirmed released
    last_seen: float = 0.0

    def to_json(self) -> dict:
        return {"id": self.member_id, "instance": self.instance_id, "rack": self.rack_id, "client": self.client_id,
                "host": self.client_host, "rebalance": self.rebalance_timeout, "topics": sorted(self.topics),
                "assignor": self.assignor, "epoch": self.epoch, "previous_epoch": self.previous_epoch,
                "assigned": {t: sorted(p) for t, p in self.assigned.items()},
                "revoking": {t: sorted(p) for t, p in self.revoking.items()}}

    @classmethod
    def from_json(cls, v: dict) -> "ConsumerMember":
        return cls(v["id"], v["instance"], v["rack"], v["client"], v["host"], v["rebalance"], frozenset(v["topics"]),
                   v["assignor"], v["epoch"], v.get("previous_epoch", -1),
                   {t: frozenset(p) for t, p in v["assigned"].items()},
                   {t: frozenset(p) for t, p in v["revoking"].items()})


@dataclass
class HeartbeatAnswer:
    error: int
    member_id: str | None = None
    epoch: int = -1
    assignment: TopicPartitions | None = None
    message: str | None = None


def _flat(tp: TopicPartitions) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in tp.items() for p in ps}


def _nested(pairs) -> TopicPartitions:
    out: dict[str, set[int]] = {}
    for t, p in pairs:
        out.setdefault(t, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


def assign(members: dict[str, ConsumerMember], partitions: dict[str, int], assignor: str) -> dict[str, TopicPartitions]:
    """The target assignment of ``members`` over the topics' partition counts.

    ``uniform`` is sticky: a member keeps what it holds up to its fair share, so
    only the surplus moves; ``range`` deals contiguous ranges in member id order.
    """
    target: dict[str, set[tuple[str, int]]] = {m: set() for m in members}
    holder = {tp: m for m, v in members.items() for tp in _flat(v.assigned) | _flat(v.revoking)}
    for topic in sorted(partitions):
        subscribers = sorted(m for m, v in members.items() if topic in v.topics)
        if not subscribers:
            continue
        count = partitions[topic]
        if assignor == "range":
            per, extra = divmod(count, len(subscribers))
            start = 0
            for i, member in enumerate(subscribers):
                size = per + (1 if i < extra else 0)
                target[member].update((topic, p) for p in range(start, start + size))
                start += size
            continue
        share = dict.fromkeys(subscribers, count // len(subscribers))
        free = []
        for p in range(count):  # keep: the holder keeps it while under its fair share
            member = holder.get((topic, p))
            if member in share and share[member] > 0:
                share[member] -= 1
                target[member].add((topic, p))
            else:
                free.append(p)
        for p in free:  # the rest to the least loaded subscriber, ties by id
            member = min(subscribers, key=lambda m: (len([x for x in target[m] if x[0] == topic]), m))
            target[member].add((topic, p))
    return {m: _nested(pairs) for m, pairs in target.items()}


class ConsumerGroupState:
    """One consumer-protocol group's members, epochs and target assignment (persisted by its Group)."""

    def __init__(self) -> None:
        self.epoch = 0  # the group epoch
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, TopicPartitions] = {}
        self.partitions: dict[str, int] = {}  # subscribed topics' partition counts at the last assignment
        self.assignor = ASSIGNORS[0]

    @property
    def state(self) -> str:
        """As ConsumerGroupDescribe and ListGroups name it."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.epoch:
            return "Assigning"
        if any(m.epoch != self.assignment_epoch or m.revoking for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    @property
    def subscribed(self) -> frozenset[str]:
        return frozenset().union(*(m.topics for m in self.members.values())) if self.members else frozenset()

    def heartbeat(self, *, member_id: str, epoch: int, instance_id: str | None, rack_id: str | None,
                  client_id: str, client_host: str, rebalance_timeout: float, topics: list[str] | None,
                  assignor: str | None, owned: TopicPartitions | None, partitions: dict[str, int],
                  now: float) -> HeartbeatAnswer:
        """Apply one heartbeat; ``partitions``: the partition counts of the subscribed topics (absent: none)."""
        if assignor is not None and assignor not in ASSIGNORS:
            return HeartbeatAnswer(UNSUPPORTED_ASSIGNOR, message=f"server assignors: {', '.join(ASSIGNORS)}")
        if epoch == STATIC_LEAVE and member_id in self.members and self.members[member_id].instance_id:
            # A static member going away for a restart keeps its place (and target) for a session.
            gone = self.members[member_id]
            gone.assigned, gone.revoking, gone.epoch = {}, {}, STATIC_LEAVE
            return HeartbeatAnswer(0, member_id, epoch)
        if epoch in (LEAVE, STATIC_LEAVE):
            self.leave(member_id)
            return HeartbeatAnswer(0, member_id, epoch)
        member = self.members.get(member_id)
        if epoch == 0:
            if member is None and instance_id is not None:
                member = self._replace_static(instance_id, member_id)
            if member is None:
                member_id = member_id or str(uuid.uuid4())
                member = self.members[member_id] = ConsumerMember(member_id, instance_id, rack_id, client_id,
                                                                  client_host, rebalance_timeout)
                self.epoch += 1
            elif member.epoch != 0:
                # A member rejoining after being fenced: it owns nothing any more.
                member.assigned, member.revoking, member.epoch = {}, {}, 0
        elif member is None:
            return HeartbeatAnswer(UNKNOWN_MEMBER, message=f"member {member_id} is not in the group")
        elif epoch != member.epoch and not self._lost_answer(member, epoch, owned):
            return HeartbeatAnswer(FENCED_MEMBER_EPOCH,
                                   message=f"epoch {epoch} is not the member's current epoch {member.epoch}")
        member.last_seen, member.rebalance_timeout = now, rebalance_timeout
        if topics is not None and frozenset(topics) != member.topics:
            member.topics = frozenset(topics)
            self.epoch += 1
        if assignor is not None and assignor != member.assignor:
            member.assignor = assignor
            self.epoch += 1
        counts = {t: c for t, c in partitions.items() if t in self.subscribed}
        if counts != self.partitions:
            self.partitions = counts
            self.epoch += 1
        if owned is not None:
            member.revoking = _nested(_flat(member.revoking) & _flat(owned))
        before = (member.epoch, member.assigned)
        self._refresh_target()
        self._reconcile(member)
        changed = (member.epoch, member.assigned) != before or owned is not None or epoch == 0 or epoch != member.epoch
        return HeartbeatAnswer(0, member.member_id, member.epoch, member.assigned if changed else None)

    @staticmethod
    def _lost_answer(member: ConsumerMember, epoch: int, owned: TopicPartitions | None) -> bool:
        """A heartbeat at the member's previous epoch whose answer was lost (Kafka accepts it)."""
        return (0 < epoch == member.previous_epoch < member.epoch and owned is not None
                and _flat(owned) <= _flat(member.assigned))

    def _replace_static(self, instance_id: str, member_id: str) -> ConsumerMember | None:
        old = next((m for m in self.members.values() if m.instance_id == instance_id), None)
        if old is None:
            return None
        # A restarted static member takes the old one's place and target (no new group epoch).
        new_id = member_id or str(uuid.uuid4())
        del self.members[old.member_id]
        if old.member_id in self.target:
            self.target[new_id] = self.target.pop(old.member_id)
        old.member_id = new_id
        self.members[new_id] = old
        old.assigned, old.revoking, old.epoch = {}, {}, 0
        return old

    def leave(self, member_id: str) -> bool:
        if self.members.pop(member_id, None) is None:
            return False
        self.target.pop(member_id, None)
        self.epoch += 1
        return True

    def expire(self, now: float, session_timeout: float) -> list[str]:
        gone = [m for m, v in self.members.items() if now - v.last_seen > session_timeout]
        for member_id in gone:
            self.leave(member_id)
        return gone

    def _refresh_target(self) -> None:
        if self.assignment_epoch == self.epoch:
            return
        chosen = next((m.assignor for m in self.members.values() if m.assignor), None) or ASSIGNORS[0]
        self.assignor = chosen
        self.target = assign(self.members, self.partitions, chosen)
        self.assignment_epoch = self.epoch

    def _reconcile(self, member: ConsumerMember) -> None:
        target = _flat(self.target.get(member.member_id, {}))
        current = _flat(member.assigned)
        if current - target:
            # Revoke first: the member keeps its epoch until it reports them released.
            member.revoking = _nested(_flat(member.revoking) | (current - target))
            member.assigned = _nested(current & target)
            return
        if member.revoking:
            return
        held = set()
        for other in self.members.values():
            if other is not member:
                held |= _flat(other.assigned) | _flat(other.revoking)
        member.assigned = _nested(target - held)
        if member.epoch != self.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, self.assignment_epoch

    def to_json(self) -> dict:
        return {"epoch": self.epoch, "assignment_epoch": self.assignment_epoch, "assignor": self.assignor,
                "partitions": self.partitions, "members": [m.to_json() for m in self.members.values()],
                "target": {m: {t: sorted(p) for t, p in tp.items()} for m, tp in self.target.items()}}

    @classmethod
    def from_json(cls, v: dict) -> "ConsumerGroupState":
        state = cls()
        state.epoch, state.assignment_epoch, state.assignor = v["epoch"], v["assignment_epoch"], v["assignor"]
        state.partitions = v["partitions"]
        state.members = {m["id"]: ConsumerMember.from_json(m) for m in v["members"]}
        state.target = {m: {t: frozenset(p) for t, p in tp.items()} for m, tp in v["target"].items()}
        return state


__all__ = ["ASSIGNORS", "ConsumerGroupState", "ConsumerMember", "FENCED_MEMBER_EPOCH", "HeartbeatAnswer", "assign"]
