"""The in-memory index of a replica: what its segment files hold, rebuilt from them on open.

One code path, ``apply``, turns a record into state, whether the record was just written or
read back on open, so a replica after a restart is the replica before it. The rules:

- An ENTRY of a block that is fenced or dropped is ignored (the store refuses such appends
  before writing them; on disk they can only be leftovers of a write never acknowledged).
- A FENCE closes a block to appends; the keys it held stay readable.
- A DROP forgets the block's entries and closes it too. A dropped block is remembered while
  the segment with its DROP record exists.
- A segment may go once no block with entries in it is live (never the one being written).
  Before it goes, the records in it that still matter are written again to the newest segment
  (``carry``): the FENCE of a live block, and the DROP of a block whose entries or fence remain in
  another segment (else they would come back on the next open).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .records import DROP, ENTRY, FENCE


@dataclass(slots=True)
class Entry:
    block: str
    segment: int
    position: int  # of the data in the segment file
    length: int
    crc: int
    corrupt: bool = False


@dataclass(slots=True)
class Block:
    keys: set[str] = field(default_factory=set)
    segments: set[int] = field(default_factory=set)  # segments holding its entries
    fence_segment: int | None = None  # the segment holding its FENCE record, if fenced


@dataclass(slots=True)
class Dropped:
    segment: int  # holds the DROP record
    residue: set[int]  # other segments still holding the block's entries or FENCE


@dataclass(slots=True)
class SegmentUse:
    blocks: set[str] = field(default_factory=set)  # live blocks with entries here
    fences: set[str] = field(default_factory=set)  # live blocks whose FENCE is here
    drops: set[str] = field(default_factory=set)  # dropped blocks whose DROP is here


class Index:
    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self.blocks: dict[str, Block] = {}
        self.dropped: dict[str, Dropped] = {}
        self.segments: dict[int, SegmentUse] = {}

    def add_segment(self, segment: int) -> None:
        self.segments.setdefault(segment, SegmentUse())

    def closed(self, block: str) -> bool:
        """Whether ``block`` takes no more appends (fenced or dropped)."""
        if block in self.dropped:
            return True
        state = self.blocks.get(block)
        return state is not None and state.fence_segment is not None

    def held(self, key: str) -> Entry | None:
        entry = self.entries.get(key)
        return entry if entry is not None and not entry.corrupt else None

    def keys_of(self, block: str) -> list[str]:
        state = self.blocks.get(block)
        if state is None:
            return []
        return sorted(key for key in state.keys if not self.entries[key].corrupt)

    def held_entries(self) -> int:
        return len(self.entries)

    def apply(self, rtype: int, block: str, key: str, segment: int, position: int = 0, length: int = 0,
              crc: int = 0, corrupt: bool = False) -> bool:
        """Take in one record (its data at ``position`` of ``segment``); False if it is ignored."""
        use = self.segments.setdefault(segment, SegmentUse())
        if rtype == ENTRY:
            if self.closed(block) or (corrupt and self.held(key) is not None):
                return False
            earlier = self.entries.get(key)
            if earlier is not None and earlier.block != block:  # only a log written by another writer
                self.blocks[earlier.block].keys.discard(key)
            state = self.blocks.setdefault(block, Block())
            state.keys.add(key)
            state.segments.add(segment)
            use.blocks.add(block)
            self.entries[key] = Entry(block, segment, position, length, crc, corrupt)
        elif rtype == FENCE:
            if block in self.dropped:
                return False
            state = self.blocks.setdefault(block, Block())
            if state.fence_segment is not None:
                self.segments[state.fence_segment].fences.discard(block)
            state.fence_segment = segment
            use.fences.add(block)
        elif rtype == DROP:
            self._drop(block, segment, use)
        else:
            raise ValueError(f"unknown record type {rtype}")
        return True

    def _drop(self, block: str, segment: int, use: SegmentUse) -> None:
        gone = self.dropped.get(block)
        if gone is not None:  # a DROP written again before its old segment went
            self.segments[gone.segment].drops.discard(block)
            gone.segment = segment
        else:
            state = self.blocks.pop(block, None) or Block()
            for key in state.keys:
                del self.entries[key]
            for held in state.segments:
                self.segments[held].blocks.discard(block)
            residue = set(state.segments)
            if state.fence_segment is not None:
                self.segments[state.fence_segment].fences.discard(block)
                residue.add(state.fence_segment)
            self.dropped[block] = Dropped(segment, residue)
        use.drops.add(block)

    def deletable(self, active: int | None) -> list[int]:
        """Segments no live block has entries in, the active one apart."""
        return sorted(seq for seq, use in self.segments.items() if seq != active and not use.blocks)

    def carry(self, segment: int) -> list[tuple[int, str]]:
        """The ``(type, block)`` records to write again before ``segment`` may be deleted."""
        use = self.segments[segment]
        records = [(FENCE, block) for block in sorted(use.fences)]
        records += [(DROP, block) for block in sorted(use.drops) if self.dropped[block].residue - {segment}]
        return records

    def remove_segment(self, segment: int) -> None:
        """Forget ``segment`` (deleted) once ``carry`` records are written elsewhere."""
        use = self.segments.pop(segment)
        assert not use.blocks and not use.fences, f"segment {segment} still holds live records"
        for block in use.drops:  # their entries are nowhere else any more
            del self.dropped[block]
        for gone in self.dropped.values():
            gone.residue.discard(segment)
