"""The group coordinator (Kafka's classic protocol) with its state in the metadata plane.

States: Empty -> PreparingRebalance -> CompletingRebalance -> Stable. A join, a
leave or a member whose session timed out starts a rebalance; it completes when
every known member has rejoined or the rebalance timeout passed (members that did
not rejoin are dropped), bumping the generation. The leader's SyncGroup hands out
the assignments. The group (generation, members, assignments) is written to
``/nereus/kafka/groups/{group}`` when a rebalance completes (before the JoinGroup
answers), when it becomes Stable (before the SyncGroup answers) and when it becomes
Empty, so a restarted broker recognises the members' next heartbeats and never
hands out a generation twice; committed offsets are separate records
(``offsets.py``). The coordinator (``coordinator.py``) owns the conditional writes and
what happens when another broker wrote the group first.

Time comes from the coordinator's ``clock`` (monotonic seconds), so tests can
move it instead of sleeping.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

from .consumer_group import ConsumerGroupState, HeartbeatAnswer
from .members import (COMPLETING, COORDINATOR_NOT_AVAILABLE, DEAD, EMPTY, FENCED_INSTANCE_ID, GROUP_ID_NOT_FOUND,
                      GROUP_MAX_SIZE_REACHED, ILLEGAL_GENERATION, INCONSISTENT_PROTOCOL, INITIAL_REBALANCE_DELAY, NONE,
                      NOT_COORDINATOR, PREPARING, REBALANCE_IN_PROGRESS, STABLE, STALE_MEMBER_EPOCH, UNKNOWN_MEMBER,
                      UNSUPPORTED_VERSION, GroupError, JoinResult, Member, same_subscription)

log = logging.getLogger(__name__)


class Group:
    """One consumer group's membership state machine (persistence is the coordinator's)."""

    def __init__(self, coordinator, group_id: str, record) -> None:
        self.coordinator = coordinator
        self.group_id = group_id
        self.record = record  # coordinator.GroupRecord: versions and pending writes of this group
        self.state = EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._initial_until = 0.0
        self.consumer: ConsumerGroupState | None = None  # the KIP-848 protocol's state, if it ever served one
        # its consumer.session.timeout.ms (seconds; None: the coordinator's), as its last heartbeat read it
        self.consumer_session_timeout: float | None = None

    @property
    def is_consumer(self) -> bool:
        """A consumer-protocol group now (a group is either that or classic; an empty one may switch)."""
        return self.consumer is not None and bool(self.consumer.members)

    @property
    def consumer_members(self) -> dict:
        return self.consumer.members if self.consumer is not None else {}

    @property
    def described_state(self) -> str:
        return self.consumer.state if self.is_consumer else self.state

    def _now(self) -> float:
        return self.coordinator.clock()

    @property
    def gone(self) -> bool:
        """Deleted, or taken over by another broker: this object answers nothing any more."""
        return self.state == DEAD or self.record.lost

    def _check_served(self) -> None:
        if self.record.lost:
            raise GroupError(NOT_COORDINATOR)
        if self.state == DEAD:
            raise GroupError(COORDINATOR_NOT_AVAILABLE)

    @property
    def idle(self) -> bool:
        """Nothing in memory that metadata does not have: the group may be dropped and reloaded."""
        return (self.state == EMPTY and not self.members and not self.consumer_members and self._timer is None
                and self.record.settled)

    # -- rebalancing ------------------------------------------------------------------------
    def join(self, member_id: str, client_id: str, host: str, session: float, rebalance: float, protocol_type: str,
             protocols: list[tuple[str, bytes]], instance_id: str | None) -> asyncio.Future:
        self._check_served()
        if self.is_consumer:
            raise GroupError(INCONSISTENT_PROTOCOL)
        if self.members and protocol_type != self.protocol_type:
            raise GroupError(INCONSISTENT_PROTOCOL)
        if self.members and not {n for n, _ in protocols} & self._common_protocols():
            raise GroupError(INCONSISTENT_PROTOCOL)
        static = self.static_member(instance_id)
        if static is not None and not member_id:
            return self._replace_static(static, client_id, host, session, rebalance, protocols)
        if static is not None and member_id != static.member_id:
            raise GroupError(FENCED_INSTANCE_ID)
        if member_id and member_id not in self.members:
            raise GroupError(UNKNOWN_MEMBER)
        if not member_id and len(self.members) >= self.coordinator.max_group_size:
            raise GroupError(GROUP_MAX_SIZE_REACHED)  # Kafka's group.max.size: members are held in memory
        if not member_id:
            member_id = f"{instance_id or client_id or 'member'}-{uuid.uuid4()}"
        member = self.members.get(member_id)
        fut = asyncio.get_running_loop().create_future()
        if member is None:
            member = self.members[member_id] = Member(member_id, client_id, host, session, rebalance, protocols,
                                                     instance_id)
        elif member.protocols == protocols and (
                (self.state == STABLE and member.member_id != self.leader) or self.state == COMPLETING):
            # Rejoining with unchanged metadata: the generation in progress (or in force) stands.
            member.last_seen = self._now()
            fut.set_result(self._join_result(member_id))
            return fut
        member.protocols, member.session_timeout, member.rebalance_timeout = protocols, session, rebalance
        member.last_seen = self._now()
        if member.join is not None and not member.join.done():
            member.join.set_result(JoinResult(UNKNOWN_MEMBER))
        member.join = fut
        self.protocol_type = protocol_type
        self._prepare(initial=self.state == EMPTY)
        self._maybe_complete()
        return fut

    def static_member(self, instance_id: str | None) -> Member | None:
        """The member holding ``instance_id`` (KIP-345), if any."""
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def check_instance(self, member_id: str, instance_id: str | None) -> None:
        """FENCED_INSTANCE_ID when ``instance_id`` belongs to another member id than ``member_id``."""
        static = self.static_member(instance_id)
        if static is not None and static.member_id != member_id:
            raise GroupError(FENCED_INSTANCE_ID)

    def _replace_static(self, old: Member, client_id: str, host: str, session: float, rebalance: float,
                        protocols: list[tuple[str, bytes]]) -> asyncio.Future:
        """A static member restarted: a new member id takes the old one's place and assignment (KIP-345).

        In a Stable group, with the chosen protocol and the member's subscription (its
        metadata) unchanged, nobody else rebalances; the
        old member id is fenced (its pending calls answer FENCED_INSTANCE_ID).
        """
        new_id = f"{old.instance_id}-{uuid.uuid4()}"
        for fut in (old.join, old.sync):
            if fut is not None and not fut.done():
                fut.set_result(JoinResult(FENCED_INSTANCE_ID) if fut is old.join else (FENCED_INSTANCE_ID, b""))
        member = Member(new_id, client_id, host, session, rebalance, protocols, old.instance_id, old.assignment,
                        self._now())
        # Same position in the member order: the leader's assignors see the same group.
        self.members = {(new_id if k == old.member_id else k): (member if k == old.member_id else v)
                        for k, v in self.members.items()}
        if self.leader == old.member_id:
            self.leader = new_id
        log.info("kafka group %s: static member %s rejoined as %s", self.group_id, old.instance_id, new_id)
        fut = asyncio.get_running_loop().create_future()
        unchanged = (self._choose_protocol() == self.protocol
                     and same_subscription(member.metadata_for(self.protocol), old.metadata_for(self.protocol)))
        if self.state == STABLE and unchanged:
            self._answer_when_durable([(fut, self._join_result(new_id, skip_assignment=True))],
                                      lambda code: JoinResult(code))
            return fut
        member.join = fut
        self._prepare()
        self._maybe_complete()
        return fut

    def _common_protocols(self) -> set[str]:
        sets = [{n for n, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def _prepare(self, initial: bool = False) -> None:
        if self.state == PREPARING:
            return
        if self.state == COMPLETING:
            for m in self.members.values():
                if m.sync is not None and not m.sync.done():
                    m.sync.set_result((REBALANCE_IN_PROGRESS, b""))
        self.state = PREPARING
        timeout = max((m.rebalance_timeout for m in self.members.values()), default=1.0)
        delay = self.coordinator.initial_rebalance_delay
        delay = INITIAL_REBALANCE_DELAY if delay is None else delay
        self._arm(delay if initial else timeout, self._rebalance_deadline)
        self._initial_until = self._now() + (delay if initial else 0)

    def _arm(self, delay: float, callback) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay, callback)

    def _rebalance_deadline(self) -> None:
        self._timer = None
        if self.state != PREPARING:
            return
        for member_id in [m for m, v in self.members.items() if v.join is None or v.join.done()]:
            log.info("kafka group %s: member %s did not rejoin in time", self.group_id, member_id)
            del self.members[member_id]
        self._initial_until = 0
        self._complete()

    def _maybe_complete(self) -> None:
        if self.state != PREPARING or self._now() < self._initial_until:
            return
        if all(m.join is not None and not m.join.done() for m in self.members.values()):
            self._complete()

    def _complete(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.generation += 1
        if not self.members:
            self.state, self.protocol, self.leader = EMPTY, None, None
            self.coordinator.persist(self)
            return
        self.state = COMPLETING
        self.protocol = self._choose_protocol()
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        now = self._now()
        answers = []
        for member_id, member in self.members.items():
            member.last_seen = now
            member.assignment = b""
            if member.join is not None and not member.join.done():
                answers.append((member.join, self._join_result(member_id)))
            member.join = None
        log.info("kafka group %s: generation %d with %d member(s), protocol %s", self.group_id, self.generation,
                 len(self.members), self.protocol)
        # The new generation is durable before anyone learns it: a restart never hands it out twice.
        self._answer_when_durable(answers, lambda code: JoinResult(code))

    def _answer_when_durable(self, answers: list, failure, write: bool = True) -> None:
        """Resolve (future, result) pairs once the group as it is now is written; else with an error.

        ``write``: this change needs writing; else wait for the writes already asked for.
        """
        durable = self.coordinator.persist(self, wait=True) if write else self.coordinator.durable(self)

        def deliver(done: asyncio.Future) -> None:
            error = done.exception() if not done.cancelled() else None
            code = NONE if not done.cancelled() and error is None else NOT_COORDINATOR
            for fut, result in answers:
                if not fut.done():
                    fut.set_result(result if code == NONE else failure(code))

        durable.add_done_callback(deliver)

    def _choose_protocol(self) -> str:
        common = self._common_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(n for n, _ in member.protocols if n in common)
            votes[choice] = votes.get(choice, 0) + 1
        leader = self.members.get(self.leader) or next(iter(self.members.values()))
        order = [n for n, _ in leader.protocols if n in common]
        return max(order, key=lambda n: (votes.get(n, 0), -order.index(n)))

    def _join_result(self, member_id: str, skip_assignment: bool = False) -> JoinResult:
        members = []
        if member_id == self.leader:
            members = [(m.member_id, m.instance_id, m.metadata_for(self.protocol)) for m in self.members.values()]
        return JoinResult(NONE, self.generation, self.protocol_type, self.protocol, self.leader, member_id, members,
                          skip_assignment and member_id == self.leader)

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes],
             instance_id: str | None = None) -> asyncio.Future:
        member = self._check(member_id, generation, instance_id)
        fut = asyncio.get_running_loop().create_future()
        if self.state == PREPARING:
            fut.set_result((REBALANCE_IN_PROGRESS, b""))
            return fut
        member.last_seen = self._now()
        if self.state == STABLE:
            # The assignment may still be on its way to metadata: answer once it is there.
            self._answer_when_durable([(fut, (NONE, member.assignment))], lambda code: (code, b""), write=False)
            return fut
        member.sync = fut
        if member_id == self.leader:
            for mid, m in self.members.items():
                m.assignment = assignments.get(mid, b"")
            self.state = STABLE
            answers = []
            for m in self.members.values():
                if m.sync is not None and not m.sync.done():
                    answers.append((m.sync, (NONE, m.assignment)))
                m.sync = None
            self._answer_when_durable(answers, lambda code: (code, b""))
        return fut

    def heartbeat(self, member_id: str, generation: int, instance_id: str | None = None) -> int:
        member = self._check(member_id, generation, instance_id)
        member.last_seen = self._now()
        return REBALANCE_IN_PROGRESS if self.state == PREPARING else NONE

    def leave(self, member_id: str, instance_id: str | None = None) -> int:
        """A member leaves; a static one may be named by its instance id alone (KIP-345)."""
        if self.gone:
            return NOT_COORDINATOR if self.record.lost else COORDINATOR_NOT_AVAILABLE
        if instance_id is not None:
            static = self.static_member(instance_id)
            if static is None:
                return UNKNOWN_MEMBER
            if member_id and member_id != static.member_id:
                return FENCED_INSTANCE_ID
            member_id = static.member_id
        member = self.members.pop(member_id, None)
        if member is None:
            return UNKNOWN_MEMBER
        for fut in (member.join, member.sync):
            if fut is not None and not fut.done():
                fut.set_result(JoinResult(UNKNOWN_MEMBER) if fut is member.join else (UNKNOWN_MEMBER, b""))
        log.info("kafka group %s: member %s left", self.group_id, member_id)
        self._member_gone()
        return NONE

    def _member_gone(self) -> None:
        if not self.members:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self.generation += 1
            self.state, self.protocol, self.leader = EMPTY, None, None
            self.coordinator.persist(self)
        elif self.state == PREPARING:
            self._maybe_complete()
        else:
            self._prepare()

    def _check(self, member_id: str, generation: int, instance_id: str | None = None) -> Member:
        self._check_served()
        self.check_instance(member_id, instance_id)
        member = self.members.get(member_id)
        if member is None:
            raise GroupError(UNKNOWN_MEMBER)
        if generation != self.generation:
            raise GroupError(ILLEGAL_GENERATION)
        return member

    def consumer_heartbeat(self, now: float, **request) -> asyncio.Future:
        """A ConsumerGroupHeartbeat (KIP-848); answered once the changed group is durable."""
        self._check_served()
        if self.members:
            raise GroupError(GROUP_ID_NOT_FOUND)  # a classic group with members is not a consumer group
        if self.consumer is None:
            self.consumer = ConsumerGroupState()
        before = json.dumps(self.consumer.to_json(), sort_keys=True)
        answer = self.consumer.heartbeat(now=now, **request)
        fut = asyncio.get_running_loop().create_future()
        changed = json.dumps(self.consumer.to_json(), sort_keys=True) != before
        self.protocol_type = "consumer"
        if changed:
            self._answer_when_durable([(fut, answer)], lambda code: HeartbeatAnswer(code))
        else:
            fut.set_result(answer)
        return fut

    def check_fetch(self, member_id: str | None, member_epoch: int) -> int:
        """The error of an OffsetFetch (v9+) by a member of the consumer protocol at ``member_epoch``."""
        if self.gone:
            return NOT_COORDINATOR if self.record.lost else COORDINATOR_NOT_AVAILABLE
        if self.members or self.consumer is None or (not member_id and member_epoch < 0):
            return NONE  # classic groups and admin clients are not checked, as Kafka
        member = self.consumer_members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER
        return NONE if member_epoch == member.epoch else STALE_MEMBER_EPOCH

    def check_commit(self, member_id: str, generation: int, instance_id: str | None = None,
                     version: int = 9) -> int:
        """The error of an OffsetCommit (``version``) by this member at this generation / member epoch."""
        if self.gone:
            return NOT_COORDINATOR if self.record.lost else COORDINATOR_NOT_AVAILABLE
        # As Kafka: a commit without a generation (an assign()-only consumer, an admin tool) is taken
        # while the group has no members, whatever member id it names; otherwise it must be a member's.
        simple = generation < 0 and not (self.consumer_members if self.is_consumer else self.members)
        if self.is_consumer and not simple:
            member = self.consumer_members.get(member_id)
            if member is None:
                return UNKNOWN_MEMBER
            if version < 9:  # as Kafka: members of the consumer protocol commit with v9+
                return UNSUPPORTED_VERSION
            if generation != member.epoch:
                return STALE_MEMBER_EPOCH
            member.last_seen = self._now()
            return NONE
        static = self.static_member(instance_id)
        if static is not None and static.member_id != member_id:
            return FENCED_INSTANCE_ID
        if simple:
            return NONE
        member = self.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER
        if generation != self.generation:
            return ILLEGAL_GENERATION
        if self.state == COMPLETING:
            return REBALANCE_IN_PROGRESS
        member.last_seen = self._now()
        return NONE

    def expire(self, now: float) -> None:
        """Drop members whose session timed out (not those waiting in a join)."""
        if self.gone:
            return
        session = self.consumer_session_timeout or self.coordinator.consumer_session_timeout
        if self.consumer is not None and self.consumer.expire(now, session):
            self.coordinator.persist(self)
        expired = [m.member_id for m in self.members.values()
                   if (m.join is None or m.join.done()) and now - m.last_seen > m.session_timeout]
        for member_id in expired:
            log.info("kafka group %s: member %s session timed out", self.group_id, member_id)
            member = self.members.pop(member_id)
            if member.sync is not None and not member.sync.done():
                member.sync.set_result((UNKNOWN_MEMBER, b""))
        if expired:
            self._member_gone()

    def abandon(self, code: int) -> None:
        """Stop serving this group object: pending joins and syncs get ``code``, timers stop."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for member in self.members.values():
            if member.join is not None and not member.join.done():
                member.join.set_result(JoinResult(code))
            if member.sync is not None and not member.sync.done():
                member.sync.set_result((code, b""))
            member.join = member.sync = None

    # -- persistence ----------------------------------------------------------------------
    def to_json(self) -> bytes:
        return json.dumps({"state": self.state, "generation": self.generation, "protocol_type": self.protocol_type,
                           "protocol": self.protocol, "leader": self.leader,
                           "members": [m.to_json() for m in self.members.values()],
                           "consumer": self.consumer.to_json() if self.consumer is not None else None}).encode()

    def restore(self, value: bytes) -> None:
        v = json.loads(value)
        self.generation, self.protocol_type, self.protocol = v["generation"], v["protocol_type"], v["protocol"]
        self.leader = v["leader"]
        self.members = {m["id"]: Member.from_json(m) for m in v["members"]}
        if v.get("consumer") is not None:
            self.consumer = ConsumerGroupState.from_json(v["consumer"])
            for m in self.consumer.members.values():
                m.last_seen = self._now()
        if not self.members:
            self.state = EMPTY
        elif v["state"] == STABLE:
            self.state = STABLE
        else:
            # Written when a rebalance completed (or later while the next one was preparing): the
            # members know this generation, so the leader's SyncGroup completes it.
            self.state = COMPLETING
        now = self._now()
        for m in self.members.values():
            m.last_seen = now  # give members a full session to come back after a restart


__all__ = ["Group"]
