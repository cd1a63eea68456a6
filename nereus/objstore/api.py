"""The object-store interface: immutable objects, named once, read by range.

Objects are never overwritten: ``put_if_absent`` publishes a complete object
atomically under a new name or raises ``ObjectExists``. Readers never see a partial
object.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int


class ObjectStore(abc.ABC):
    """A bucket-like namespace of immutable objects addressed by ``/``-separated keys.

    Malformed keys raise ``InvalidObjectKey``; every store failure is an ``ObjectStoreError``.
    """

    #: Whether a put that is slow for this store is best raced by a second put of the same
    #: bytes under another name: true of remote stores, whose slow requests are mostly
    #: independent of each other; a local disk's slow write would only be made slower.
    hedge_slow_puts: bool = False

    @abc.abstractmethod
    async def put_if_absent(self, key: str, data: bytes | memoryview | list[bytes]) -> None:
        """Durably store ``data`` (or the concatenation of a list of chunks) under ``key``.

        Returns only once the object is durable. Raises ``ObjectExists`` if ``key``
        is already taken (the existing object is left unchanged).

        Chunks may be any contiguous buffers; they must not change during the call
        and may be reused after it. If the call is cancelled or fails with another
        error, the object may or may not have been published.
        """

    @abc.abstractmethod
    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the object (to its end when ``end`` is None).

        Raises ``ObjectNotFound``; a range past the end is clipped to the object size,
        a negative or inverted range raises ``InvalidRange``.
        """

    @abc.abstractmethod
    async def head(self, key: str) -> ObjectInfo:
        """Size of the object; raises ``ObjectNotFound``."""

    @abc.abstractmethod
    async def delete(self, key: str) -> bool:
        """Delete the object; False if it did not exist."""

    async def close(self) -> None:
        """Release connections and threads."""

    async def __aenter__(self) -> "ObjectStore":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
