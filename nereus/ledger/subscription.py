"""Subscriptions: which consumer gets which entry, and what is still unacknowledged.

Protocol-neutral state machine over a ``Cursor``. The unit of dispatch is an entry
(``base`` = offset of its first record, ``count`` records). A dispatcher asks
``choose`` for a consumer, sends, then calls ``dispatched``; acks, redeliveries and
consumer changes come back here. Nothing in this module does I/O.

Types follow Pulsar: Exclusive (one consumer), Failover (one active, chosen by
priority and name, per partition), Shared (round robin over consumers with
permits) and Key_Shared (a key always goes to one consumer, and a key's entries
are never handed to a second consumer while the first still holds unacked ones,
which keeps per-key order across consumer changes).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field

import xxhash

from .cursor import Cursor

log = logging.getLogger(__name__)

_SIZE_MEMORY = 65536  # entry sizes remembered after ack, for late duplicate acks


class SubType(enum.IntEnum):
    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3


class ConsumerBusy(Exception):
    """The subscription does not accept this consumer (exclusive, other type)."""


@dataclass(eq=False)
class ConsumerSlot:
    """The subscription's view of one attached consumer."""

    token: int  # unique within the process
    name: str
    priority: int = 0
    permits: int = 0
    handle: object = None  # the protocol-side consumer


@dataclass(slots=True)
class Pending:
    token: int
    count: int
    key: int | None = None


@dataclass
class Subscription:
    name: str
    type: SubType
    cursor: Cursor
    partition_index: int = -1
    consumers: dict[int, ConsumerSlot] = field(default_factory=dict)
    pending: dict[int, Pending] = field(default_factory=dict)
    replay: set[int] = field(default_factory=set)
    redeliveries: dict[int, int] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    _key_holders: dict[int, dict[int, int]] = field(default_factory=dict)
    _rr: int = 0
    _active: int | None = None

    # -- membership -----------------------------------------------------------------
    def check(self, sub_type: SubType) -> None:
        """Raise ConsumerBusy if a consumer of ``sub_type`` may not join now."""
        if sub_type != self.type and self.consumers:
            raise ConsumerBusy(f"subscription {self.name} is of type {self.type.name}, not {sub_type.name}")
        if sub_type == SubType.EXCLUSIVE and self.consumers:
            raise ConsumerBusy(f"exclusive subscription {self.name} already has a consumer")

    def add(self, slot: ConsumerSlot, sub_type: SubType) -> list[tuple[ConsumerSlot, bool]]:
        """Attach a consumer; returns the (consumer, is_active) notices to send (Failover)."""
        self.check(sub_type)
        self.type = sub_type
        self.consumers[slot.token] = slot
        return self._elect()

    def remove(self, token: int) -> list[tuple[ConsumerSlot, bool]]:
        """Detach a consumer; its unacked entries go back to the replay set."""
        slot = self.consumers.pop(token, None)
        if slot is None:
            return []
        self._requeue([b for b, p in self.pending.items() if p.token == token], count_redelivery=True)
        return self._elect()

    def active(self) -> ConsumerSlot | None:
        """The consumer allowed to receive (Exclusive/Failover)."""
        return self.consumers.get(self._active) if self._active is not None else None

    def _elect(self) -> list[tuple[ConsumerSlot, bool]]:
        if self.type not in (SubType.FAILOVER, SubType.EXCLUSIVE):
            self._active = None
            return []
        ordered = sorted(self.consumers.values(), key=lambda s: (s.priority, s.name, s.token))
        new = None
        if ordered:
            index = self.partition_index % len(ordered) if self.partition_index >= 0 else 0
            new = ordered[index].token
        changed = new != self._active
        if changed and self._active is not None:
            # The old active consumer's unacked entries go to the new one, in order.
            self._requeue([b for b, p in self.pending.items() if p.token == self._active], count_redelivery=False)
        self._active = new
        if self.type != SubType.FAILOVER:
            return []
        return [(s, s.token == new) for s in ordered]

    # -- dispatch ---------------------------------------------------------------------
    def has_permits(self) -> bool:
        return any(s.permits > 0 for s in self.consumers.values())

    def choose(self, key: int | None = None) -> ConsumerSlot | None:
        """The consumer for the next entry (``key``: sticky hash, Key_Shared), or None to wait."""
        if self.type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            slot = self.active()
            return slot if slot is not None and slot.permits > 0 else None
        if not self.consumers:
            return None
        if self.type == SubType.KEY_SHARED:
            slot = self._owner(key or 0)
            holders = self._key_holders.get(key or 0)
            if holders and any(t != slot.token for t in holders):
                return None  # an earlier consumer still holds this key's entries
            return slot if slot.permits > 0 else None
        ready = [s for s in self.consumers.values() if s.permits > 0]
        if not ready:
            return None
        best = min(s.priority for s in ready)
        ready = [s for s in ready if s.priority == best]
        self._rr += 1
        return ready[self._rr % len(ready)]

    def _owner(self, key: int) -> ConsumerSlot:
        # Rendezvous hashing: a consumer joining or leaving moves only its share of keys.
        return max(self.consumers.values(),
                   key=lambda s: xxhash.xxh64_intdigest(f"{key}/{s.name}/{s.token}".encode()))

    def dispatched(self, slot: ConsumerSlot, base: int, count: int, key: int | None = None,
                   permits: int | None = None) -> int:
        """Record an entry sent to ``slot``; returns its redelivery count.

        ``permits``: the messages the client counts in what was sent, when that is not
        the entry's record count (a batch compaction shortened).
        """
        slot.permits -= count if permits is None else permits
        self.pending[base] = Pending(slot.token, count, key)
        self.remember_size(base, count)
        self.replay.discard(base)
        if self.type == SubType.KEY_SHARED:
            holders = self._key_holders.setdefault(key or 0, {})
            holders[slot.token] = holders.get(slot.token, 0) + 1
        return self.redeliveries.get(base, 0)

    def remember_size(self, base: int, count: int) -> None:
        if len(self.sizes) >= _SIZE_MEMORY:
            for old in list(self.sizes)[: _SIZE_MEMORY // 4]:
                del self.sizes[old]
        self.sizes[base] = count

    def entry_size(self, base: int) -> int | None:
        pending = self.pending.get(base)
        return pending.count if pending is not None else self.sizes.get(base)

    def fully_acked(self, base: int, count: int) -> bool:
        return self.cursor.acks.acked_count_between(base, base + count) == count

    # -- acknowledgements ---------------------------------------------------------------
    def ack_entry(self, base: int, count: int) -> None:
        self.cursor.ack(base, base + count)
        self._settle([base])

    def ack_offsets(self, base: int, offsets: list[int]) -> None:
        """Batch-index acks: some records of one entry."""
        for o in offsets:
            self.cursor.ack(o, o + 1)
        self._settle([base])

    def ack_cumulative(self, upto_inclusive: int) -> None:
        self.cursor.ack_cumulative(upto_inclusive)
        self._settle([b for b in self.pending if b <= upto_inclusive])

    def settle_bases(self, bases: list[int]) -> None:
        """Forget the entries among ``bases`` whose records are all acknowledged now."""
        self._settle(bases)

    def release(self, base: int) -> None:
        """Forget a dispatched entry without acknowledging it: a pending transaction holds its acks,
        so it is neither redelivered nor counted against its consumer."""
        pending = self.pending.get(base)
        if pending is not None:
            self._forget(base, pending)
            self.redeliveries.pop(base, None)
        self.replay.discard(base)

    def _settle(self, bases: list[int]) -> None:
        for base in bases:
            pending = self.pending.get(base)
            if pending is None:
                if base in self.replay and self.fully_acked(base, self.sizes.get(base, 1)):
                    self.replay.discard(base)
                continue
            if self.fully_acked(base, pending.count):
                self._forget(base, pending)
                self.redeliveries.pop(base, None)

    def _forget(self, base: int, pending: Pending) -> None:
        del self.pending[base]
        if pending.key is not None or self.type == SubType.KEY_SHARED:
            holders = self._key_holders.get(pending.key or 0)
            if holders is not None:
                left = holders.get(pending.token, 0) - 1
                if left > 0:
                    holders[pending.token] = left
                else:
                    holders.pop(pending.token, None)
                    if not holders:
                        del self._key_holders[pending.key or 0]

    # -- redelivery and seeks ------------------------------------------------------------
    def redeliver(self, token: int, bases: list[int] | None = None) -> int:
        """Send ``bases`` (all of the consumer's unacked entries if None) again; returns how many."""
        if bases is None:
            mine = [b for b, p in self.pending.items() if p.token == token]
        else:
            mine = [b for b in bases if b in self.pending and self.pending[b].token == token]
        self._requeue(mine, count_redelivery=True)
        return len(mine)

    def _requeue(self, bases: list[int], *, count_redelivery: bool) -> None:
        for base in bases:
            pending = self.pending[base]
            self._forget(base, pending)
            self.remember_size(base, pending.count)
            self.replay.add(base)
            if count_redelivery:
                self.redeliveries[base] = self.redeliveries.get(base, 0) + 1

    def rewind(self) -> None:
        """Read again from the first unacknowledged record: every unacked entry goes out
        again, in order (Pulsar's cursor rewind, for Exclusive/Failover)."""
        for base, pending in list(self.pending.items()):
            self._forget(base, pending)
        self.replay.clear()
        self.cursor.read_position = self.cursor.acks.acked_below

    def reset(self, position: int) -> None:
        """Seek: forget every unacked entry and restart reading at ``position``."""
        for base, pending in list(self.pending.items()):
            self._forget(base, pending)
        self.replay.clear()
        self.redeliveries.clear()
        self.cursor.reset(position)

    def backlog(self, end: int) -> int:
        """Records not acknowledged below ``end`` (the stream's next offset)."""
        below = self.cursor.acks.acked_below
        return max(0, end - below - self.cursor.acks.acked_count_between(below, end))


def sticky_hash(key: bytes | str) -> int:
    """Stable 16-bit hash of an ordering key (Pulsar also hashes keys into 0..65535)."""
    data = key.encode() if isinstance(key, str) else bytes(key)
    return xxhash.xxh32_intdigest(data) & 0xFFFF


__all__ = ["ConsumerBusy", "ConsumerSlot", "Pending", "SubType", "Subscription", "sticky_hash"]
