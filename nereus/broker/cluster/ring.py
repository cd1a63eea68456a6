"""The routing ring: a consistent-hash ring with virtual nodes over the live brokers.

Each broker places ``vnodes`` points on a 64-bit circle (hashes of its name), so a
broker that joins takes about 1/N of the keys from the others and one that leaves
hands only its own keys on; no other key moves. A key's walk starts at its hash
and visits brokers in ring order: the first broker is its owner; the first broker
of a zone is its preferred broker in that zone (reads near the client), falling back
to the first overall when the zone has no broker.
"""

from __future__ import annotations

import bisect
from typing import Generic, Iterator, TypeVar

import xxhash

DEFAULT_VNODES = 128

T = TypeVar("T")


def _hash(text: str) -> int:
    return xxhash.xxh3_64_intdigest(text.encode())


class HashRing(Generic[T]):
    """An immutable ring over ``members`` (name -> (zone, value))."""

    def __init__(self, members: dict[str, tuple[str, T]], vnodes: int = DEFAULT_VNODES) -> None:
        self.members = dict(members)
        points = sorted((_hash(f"{name}#{i}"), name) for name in self.members for i in range(vnodes))
        self._hashes = [h for h, _ in points]
        self._names = [n for _, n in points]

    def __len__(self) -> int:
        return len(self.members)

    def walk(self, key: str) -> Iterator[str]:
        """Member names in ring order from ``key``'s position, each once."""
        if not self._names:
            return
        start = bisect.bisect_left(self._hashes, _hash(key))
        seen: set[str] = set()
        count = len(self._names)
        for i in range(count):
            name = self._names[(start + i) % count]
            if name not in seen:
                seen.add(name)
                yield name
                if len(seen) == len(self.members):
                    return

    def owner(self, key: str) -> str | None:
        """The name of the member that owns ``key`` (None on an empty ring)."""
        return next(self.walk(key), None)

    def preferred(self, key: str, zone: str | None) -> str | None:
        """The first member of ``zone`` on ``key``'s walk, else the owner."""
        if zone is not None:
            for name in self.walk(key):
                if self.members[name][0] == zone:
                    return name
        return self.owner(key)

    def value(self, name: str) -> T:
        return self.members[name][1]


__all__ = ["DEFAULT_VNODES", "HashRing"]
