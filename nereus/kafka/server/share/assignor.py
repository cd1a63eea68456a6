"""The ``simple`` share group assignor (KIP-932): partitions spread evenly over the members.

- Members with the same subscription share out the partitions of all its topics: with no
  more members than partitions each partition goes to one member and the members' counts
  differ by one at most; with more members than partitions each member gets one partition
  and each partition is shared by as many members as balance allows.
- Members with different subscriptions: the same, topic by topic, among its subscribers.
- Sticky: a member keeps what it had as far as balance allows, so a join or a leave moves
  few partitions (records in flight stay with their acquisition locks, nothing is revoked).

Sans-I/O: member ids, topic names and partition counts in, member -> topic -> partitions out.
"""

from __future__ import annotations

from collections import defaultdict

TopicPartitions = dict[str, frozenset[int]]
_TP = tuple[str, int]


def assign(subscriptions: dict[str, frozenset[str]], counts: dict[str, int],
           previous: dict[str, TopicPartitions] | None = None) -> dict[str, TopicPartitions]:
    """Each member's partitions; ``counts``: partitions per topic, ``previous``: the last assignment."""
    previous = previous or {}
    chosen: dict[str, list[_TP]] = {m: [] for m in subscriptions}
    by_subscription: dict[frozenset[str], list[str]] = defaultdict(list)
    for member, topics in subscriptions.items():
        known = frozenset(t for t in topics if counts.get(t))
        if known:
            by_subscription[known].append(member)
    if len(by_subscription) == 1:
        ((topics, members),) = by_subscription.items()
        _spread(sorted(members), [(t, p) for t in sorted(topics) for p in range(counts[t])], previous, chosen)
    else:
        for topic in sorted({t for topics in by_subscription for t in topics}):
            members = sorted(m for topics, ms in by_subscription.items() if topic in topics for m in ms)
            _spread(members, [(topic, p) for p in range(counts[topic])], previous, chosen)
    out: dict[str, TopicPartitions] = {}
    for member, tps in chosen.items():
        topics: dict[str, set[int]] = defaultdict(set)
        for topic, index in tps:
            topics[topic].add(index)
        out[member] = {t: frozenset(ps) for t, ps in topics.items()}
    return out


def _spread(members: list[str], partitions: list[_TP], previous: dict[str, TopicPartitions],
            chosen: dict[str, list[_TP]]) -> None:
    held = {m: [tp for tp in partitions if tp[1] in previous.get(m, {}).get(tp[0], ())] for m in members}
    if len(members) <= len(partitions):
        _one_member_each(members, partitions, held, chosen)
    else:
        _one_partition_each(members, partitions, held, chosen)


def _quotas(items: list, total: int, weight) -> dict:
    """``total`` shared out over ``items`` as evenly as possible; the larger shares go to the
    items ``weight`` ranks first (those holding more now), so fewer things move."""
    base, extra = divmod(total, len(items))
    ranked = sorted(items, key=weight)
    return {item: base + (1 if i < extra else 0) for i, item in enumerate(ranked)}


def _one_member_each(members: list[str], partitions: list[_TP], held: dict[str, list[_TP]],
                     chosen: dict[str, list[_TP]]) -> None:
    quota = _quotas(members, len(partitions), lambda m: (-len(held[m]), m))
    taken: set[_TP] = set()
    mine: dict[str, list[_TP]] = {m: [] for m in members}
    for member in members:
        for tp in held[member]:
            if len(mine[member]) < quota[member] and tp not in taken:
                mine[member].append(tp)
                taken.add(tp)
    free = iter(tp for tp in partitions if tp not in taken)
    for member in members:
        while len(mine[member]) < quota[member]:
            mine[member].append(next(free))
        chosen[member].extend(mine[member])


def _one_partition_each(members: list[str], partitions: list[_TP], held: dict[str, list[_TP]],
                        chosen: dict[str, list[_TP]]) -> None:
    holders = {tp: sum(tp in held[m] for m in members) for tp in partitions}
    quota = _quotas(partitions, len(members), lambda tp: (-holders[tp], tp))
    sharing = {tp: 0 for tp in partitions}
    waiting = []
    for member in members:
        kept = next((tp for tp in held[member] if sharing[tp] < quota[tp]), None)
        if kept is None:
            waiting.append(member)
        else:
            sharing[kept] += 1
            chosen[member].append(kept)
    open_slots = iter(tp for tp in partitions for _ in range(quota[tp] - sharing[tp]))
    for member in waiting:
        chosen[member].append(next(open_slots))


__all__ = ["TopicPartitions", "assign"]
