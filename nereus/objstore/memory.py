"""In-process object store (``memory://``) for tests of the layers above.

Stores opened with the same name share one bucket (so a test can "restart" a
component against the same data); an unnamed store is private.
"""

from __future__ import annotations

import asyncio
import threading

from nereus.objstore._common import Payload, as_chunks, check_range, clip_range, validate_key
from nereus.objstore.api import ObjectInfo, ObjectStore
from nereus.objstore.errors import ObjectExists, ObjectNotFound, ObjectStoreError


class _Bucket:
    def __init__(self) -> None:
        # A thread lock, not an asyncio one: stores may be shared across event loops
        # and threads, and no operation awaits while holding it.
        self.lock = threading.Lock()
        self.objects: dict[str, bytes] = {}


_named: dict[str, _Bucket] = {}
_named_lock = threading.Lock()


def drop_named_bucket(name: str) -> None:
    """Forget the shared bucket ``memory://name`` (open stores keep their data)."""
    with _named_lock:
        _named.pop(name, None)


class MemoryObjectStore(ObjectStore):
    """Objects held as immutable ``bytes`` in a dict."""

    def __init__(self, name: str | None = None) -> None:
        if name:
            with _named_lock:
                self._bucket = _named.setdefault(name, _Bucket())
        else:
            self._bucket = _Bucket()
        self.name = name
        self._closed = False

    def __repr__(self) -> str:
        return f"MemoryObjectStore({self.name!r})"

    async def _enter(self, key: str) -> _Bucket:
        validate_key(key)
        if self._closed:
            raise ObjectStoreError(f"{self!r} is closed")
        # Yield once so callers see the same interleavings as with real I/O.
        await asyncio.sleep(0)
        return self._bucket

    async def put_if_absent(self, key: str, data: Payload) -> None:
        chunks = as_chunks(data)
        bucket = await self._enter(key)
        blob = b"".join(chunks)  # copy: the caller may reuse its buffers
        with bucket.lock:
            if key in bucket.objects:
                raise ObjectExists(key)
            bucket.objects[key] = blob

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        check_range(start, end)
        bucket = await self._enter(key)
        with bucket.lock:
            blob = bucket.objects.get(key)
        if blob is None:
            raise ObjectNotFound(key)
        lo, hi = clip_range(start, end, len(blob))
        return blob if (lo, hi) == (0, len(blob)) else blob[lo:hi]

    async def head(self, key: str) -> ObjectInfo:
        bucket = await self._enter(key)
        with bucket.lock:
            blob = bucket.objects.get(key)
        if blob is None:
            raise ObjectNotFound(key)
        return ObjectInfo(key, len(blob))

    async def delete(self, key: str) -> bool:
        bucket = await self._enter(key)
        with bucket.lock:
            return bucket.objects.pop(key, None) is not None

    def keys(self) -> list[str]:
        """Sorted keys currently stored (test helper)."""
        with self._bucket.lock:
            return sorted(self._bucket.objects)

    async def close(self) -> None:
        self._closed = True
