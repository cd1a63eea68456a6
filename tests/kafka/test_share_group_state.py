"""The share group state machines without I/O: memberships and share-partition acquisitions."""

from __future__ import annotations

import pytest

from nereus.kafka.server.share.group import FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER, ShareGroupState
from nereus.kafka.server.share.partition import ACCEPT, GAP, REJECT, RELEASE, InvalidRecordState, SharePartition
from nereus.ledger.cursor import Cursor


def share_partition(start: int = 0, lock: float = 10.0, limit: int = 3, max_locks: int = 100) -> SharePartition:
    return SharePartition(Cursor.ephemeral(1, "g", initial=start), lock_seconds=lock, delivery_limit=limit,
                          max_in_flight=max_locks)


def test_acquisitions_do_not_overlap_and_count_deliveries():
    sp = share_partition()
    assert sp.acquire("a", 0, 5, budget=3, now=0) == [(0, 2, 1)]
    assert sp.acquire("b", 0, 5, budget=10, now=0) == [(3, 4, 1)]
    assert sp.acquire("b", 0, 5, budget=10, now=0) == []
    assert sp.fetched_to == 5


def test_release_accept_reject_per_offset():
    sp = share_partition()
    sp.acquire("a", 0, 4, budget=10, now=0)
    sp.check("a", 0, 3, (ACCEPT, RELEASE, REJECT, ACCEPT))
    sp.acknowledge("a", 0, 3, (ACCEPT, RELEASE, REJECT, ACCEPT))
    assert sp.cursor.acks.is_acked(0) and sp.cursor.acks.is_acked(2) and sp.cursor.acks.is_acked(3)
    assert sp.start_offset == 1
    assert sp.first_candidate(now=0) == 1
    assert sp.acquire("b", 0, 4, budget=10, now=0) == [(1, 1, 2)]  # only the released one, second delivery


def test_only_the_holder_may_acknowledge():
    sp = share_partition()
    sp.acquire("a", 0, 2, budget=10, now=0)
    with pytest.raises(InvalidRecordState):
        sp.check("b", 0, 1, (ACCEPT,))
    with pytest.raises(InvalidRecordState):
        sp.check("a", 0, 2, (ACCEPT,))  # offset 2 was never acquired
    with pytest.raises(InvalidRecordState):
        sp.check("a", 0, 1, (ACCEPT, ACCEPT, ACCEPT))  # one type per offset or one for all
    sp.check("a", 0, 1, (GAP, ACCEPT))


def test_expired_locks_are_redelivered_then_archived_at_the_limit():
    sp = share_partition(lock=1.0, limit=2)
    assert sp.acquire("a", 0, 1, budget=1, now=0) == [(0, 0, 1)]
    assert sp.acquire("b", 0, 1, budget=1, now=0.5) == []
    assert sp.first_candidate(now=1.0) == 0  # a's lock ran out
    assert sp.acquire("b", 0, 1, budget=1, now=1.0) == [(0, 0, 2)]
    sp.expire(now=2.0)  # the second delivery's lock runs out: the limit is reached
    assert sp.cursor.acks.is_acked(0)
    assert sp.in_flight == {}


def test_a_member_leaving_releases_its_records():
    sp = share_partition()
    sp.acquire("a", 0, 3, budget=10, now=0)
    assert sp.release_member("a") == 3
    assert sp.acquire("b", 0, 3, budget=10, now=0) == [(0, 2, 2)]


def test_in_flight_records_are_bounded():
    sp = share_partition(max_locks=2)
    assert sp.acquire("a", 0, 5, budget=10, now=0) == [(0, 1, 1)]
    assert sp.acquire("b", 0, 5, budget=10, now=0) == []
    sp.acknowledge("a", 0, 1, (ACCEPT,))
    assert sp.acquire("b", 0, 5, budget=10, now=0) == [(2, 3, 1)]


def test_trimmed_records_are_skipped():
    sp = share_partition()
    sp.skip_to(10)
    assert sp.start_offset == 10
    assert sp.acquire("a", 8, 12, budget=10, now=0) == [(10, 11, 1)]


def test_membership_epochs_and_assignment():
    group = ShareGroupState("g", session_timeout=10)
    join = dict(topics=["t"], rack_id=None, client_id="c", client_host="h", partitions={"t": 2})
    a = group.heartbeat(0, member_id="a", epoch=0, **join)
    assert a.error == 0 and a.assignment == {"t": frozenset({0, 1})}
    b = group.heartbeat(1, member_id="b", epoch=0, **join)
    assert b.assignment == {"t": frozenset({1})}  # spread over the members: a keeps partition 0
    again = group.heartbeat(2, member_id="a", epoch=a.epoch, topics=None, rack_id=None, client_id="c",
                            client_host="h", partitions={"t": 2})
    assert again.error == 0 and again.epoch == group.epoch and again.assignment == {"t": frozenset({0})}
    again = group.heartbeat(2, member_id="a", epoch=again.epoch, topics=None, rack_id=None, client_id="c",
                            client_host="h", partitions={"t": 2})
    assert again.error == 0 and again.epoch == group.epoch and again.assignment is None  # unchanged
    assert group.heartbeat(2, member_id="a", epoch=a.epoch - 1, topics=None, rack_id=None, client_id="c",
                           client_host="h", partitions={"t": 2}).error == FENCED_MEMBER_EPOCH
    assert group.heartbeat(2, member_id="zz", epoch=3, topics=None, rack_id=None, client_id="c",
                           client_host="h", partitions={}).error == UNKNOWN_MEMBER
    grown = group.heartbeat(3, member_id="a", epoch=again.epoch, topics=None, rack_id=None, client_id="c",
                            client_host="h", partitions={"t": 3})
    assert grown.assignment == {"t": frozenset({0, 2})}
    assert group.heartbeat(4, member_id="a", epoch=-1, topics=None, rack_id=None, client_id="c", client_host="h",
                           partitions={}).epoch == -1
    assert set(group.members) == {"b"}
    alone = group.heartbeat(5, member_id="b", epoch=b.epoch, topics=None, rack_id=None, client_id="c",
                            client_host="h", partitions={"t": 3})
    assert alone.assignment == {"t": frozenset({0, 1, 2})}  # a's partitions go to the member left
    assert group.expire(now=100) == ["b"] and group.state == "Empty"


def test_offsets_without_a_deliverable_record_are_archived():
    sp = share_partition()
    sp.archive_fresh(0, 2)  # e.g. transaction markers
    assert sp.start_offset == 2 and sp.fetched_to == 2
    assert sp.acquire("a", 0, 4, budget=10, now=0) == [(2, 3, 1)]


def test_renew_extends_the_lock_of_held_records_only():
    from nereus.kafka.server.share.partition import RENEW

    sp = share_partition(lock=10.0)
    sp.acquire("a", 0, 2, budget=10, now=0)
    sp.check("a", 0, 1, (RENEW,))
    sp.acknowledge("a", 0, 1, (RENEW,), now=8.0)
    assert sp.expire(now=15.0) == 0 and sp.next_deadline() == 18.0  # renewed at 8: held until 18
    with pytest.raises(InvalidRecordState):
        sp.check("b", 0, 0, (RENEW,))
    assert sp.expire(now=18.0) == 2


def test_saved_delivery_counts_come_back_with_a_new_copy():
    sp = share_partition(limit=3)
    sp.acquire("a", 0, 4, budget=10, now=0)
    sp.acknowledge("a", 0, 0, (ACCEPT,))
    sp.acknowledge("a", 1, 1, (RELEASE,))
    sp.acquire("b", 0, 4, budget=10, now=0)  # offset 1 again: count 2
    sp.save_state()
    again = SharePartition(sp.cursor, lock_seconds=10.0, delivery_limit=3)
    assert again.fetched_to == 4 and again.start_offset == 1
    assert again.acquire("c", 0, 4, budget=10, now=0) == [(1, 1, 3), (2, 3, 2)]
    again.save_state()
    at_limit = SharePartition(sp.cursor, lock_seconds=10.0, delivery_limit=3)  # offset 1 was held at the limit
    assert at_limit.start_offset == 2 and at_limit.acquire("d", 0, 4, budget=10, now=0) == [(2, 3, 3)]
