"""The stream interface (S3Stream-style): one dense offset space per stream.

Offsets count records, start at 0 and never change. An entry is a producer's batch
of ``record_count`` records carried as opaque bytes; the storage layer never looks
inside it. ``append`` returns the base offset the metadata plane assigned when the
entry's slice was committed; the call returns only once the entry is durable in an
object and its index entry is committed, so an acknowledged append is never lost.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .wal_replicas import Durability


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int  # offset of the entry's first record


@dataclass(frozen=True, slots=True)
class FetchedEntry:
    base_offset: int
    record_count: int
    data: bytes | memoryview

    @property
    def end_offset(self) -> int:
        """Offset just past this entry's last record."""
        return self.base_offset + self.record_count


@dataclass(frozen=True, slots=True)
class FetchResult:
    entries: list[FetchedEntry]
    start_offset: int  # the stream's start offset when the fetch was served
    next_offset: int  # the stream's committed end (exclusive) when the fetch was served


class Stream(abc.ABC):
    """A handle on one stream. Appends need the handle's append session."""

    __slots__ = ()  # a broker holds one handle per loaded topic: implementations keep theirs small

    stream_id: int
    name: str
    durability: "Durability"  # where its acknowledged appends live until they are in an object
    #: Whether opening this handle created the stream: nothing of it can be stored yet (no
    #: entries, and no state kept beside them), so loading it needs no reads.
    created: bool = False

    @abc.abstractmethod
    def start_offset(self) -> int:
        """The first offset still readable (records below it were trimmed)."""

    @abc.abstractmethod
    def next_offset(self) -> int:
        """The offset the next committed record will get (the committed end)."""

    @property
    @abc.abstractmethod
    def writable(self) -> bool:
        """True while this handle holds a usable append session."""

    @property
    @abc.abstractmethod
    def fencing_token(self) -> int | None:
        """The token of the append session held (None without one)."""

    @abc.abstractmethod
    async def refresh(self) -> None:
        """Re-read the start offset, and the committed end unless this handle writes, from the metadata plane."""

    @abc.abstractmethod
    async def acquire(self) -> None:
        """Take the stream's append session, fencing any other writer (token + 1)."""

    @abc.abstractmethod
    async def append(self, entry: bytes | memoryview, record_count: int) -> AppendResult:
        """Append one entry of ``record_count`` records; raises StreamFenced if taken over.

        AppendSessionLost (a StreamFenced) after an earlier append failed: nothing more
        commits under this session until ``acquire`` is called.
        """

    @abc.abstractmethod
    async def set_durability(self, durability: "Durability") -> None:
        """Send later appends to ``durability``'s WAL (the earlier ones commit first)."""

    @abc.abstractmethod
    async def fetch(self, start: int, end: int | None = None, max_bytes: int = 1 << 20) -> FetchResult:
        """Committed entries covering ``[start, end)``, whole entries only.

        The first entry returned contains ``start`` (it may begin before it). At least
        one entry is returned when ``start`` is readable, even past ``max_bytes``.
        ``start == next_offset`` gives an empty result; outside
        ``[start_offset, next_offset]`` raises OffsetOutOfRange.
        """

    @abc.abstractmethod
    async def wait_for(self, offset: int, timeout: float) -> bool:
        """Wait until ``next_offset > offset`` (for long polls); False on timeout."""

    @abc.abstractmethod
    async def trim(self, new_start: int) -> None:
        """Make records below ``new_start`` unreadable and release their storage."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Flush nothing more for this handle and release its append session."""
