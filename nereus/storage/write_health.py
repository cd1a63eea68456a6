"""Whether storage takes writes: refused while the disk (or the store) is out of space.

A write that fails for lack of space (ENOSPC, a quota, the metadata engine's "No space
left on device") puts storage in the *refusing* state: the protocols then refuse new
producers (Pulsar ``PersistenceError``, Kafka ``KAFKA_STORAGE_ERROR``) instead of
accepting them only for their first write to fail, the health check fails with the
reason, and ``nereus_storage_writes_refused`` is 1. A probe writes (and deletes) an
object as large as the write that failed, and a metadata key, every ``probe_interval``
seconds; the first that succeeds ends the state. Nothing already committed is touched: reads go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import time

from prometheus_client import Gauge

log = logging.getLogger(__name__)

WRITES_REFUSED = Gauge("nereus_storage_writes_refused", "1 while storage refuses writes for lack of space")
PROBE_INTERVAL = 1.0
PROBE_MAX_BYTES = 16 << 20  # the largest probe: about the largest WAL object a flush writes
_NO_SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_NO_SPACE_TEXT = ("no space left on device", "disk quota exceeded")


def out_of_space(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the storage is full."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in _NO_SPACE_ERRNOS:
            return True
        if any(text in str(exc).lower() for text in _NO_SPACE_TEXT):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class WriteHealth:
    """The refusing state of one broker's storage, and the probe that ends it."""

    def __init__(self, meta, objects, *, node_id: str, probe_interval: float = PROBE_INTERVAL,
                 probe=None) -> None:
        """``probe(size)``: a write of ``size`` bytes where the writes that failed go (default: an
        object in the store and a metadata key); it raises while that place is still full."""
        self.probe = probe
        self.meta = meta
        self.objects = objects
        self.node_id = node_id
        self.probe_interval = probe_interval
        self.refusal: str | None = None  # why writes are refused; None: they are taken
        self.since: float | None = None
        self._probe: asyncio.Task | None = None
        self._probe_bytes = 0

    def failed(self, exc: BaseException, size: int = 0) -> None:
        """A write of ``size`` bytes failed; out of space: refuse writes until a probe of that size
        (at most ``PROBE_MAX_BYTES``) succeeds. A smaller probe would succeed while the write that
        failed still could not, and producers would be let in only to fail again."""
        if not out_of_space(exc):
            return
        self._probe_bytes = max(self._probe_bytes, min(max(size, 4096), PROBE_MAX_BYTES))
        if self.refusal is None:
            self.refusal, self.since = f"storage is out of space ({exc})", time.monotonic()
            WRITES_REFUSED.set(1)
            log.error("refusing writes: %s; new producers are refused until a write succeeds", self.refusal)
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._probe_until_writable())

    def succeeded(self) -> None:
        """A write went through: whatever refused writes is over."""
        if self.refusal is not None:
            log.warning("writes are taken again (refused for %.1f s)", time.monotonic() - (self.since or 0))
        self.refusal = self.since = None
        self._probe_bytes = 0
        WRITES_REFUSED.set(0)

    async def _probe_until_writable(self) -> None:
        while self.refusal is not None:
            await asyncio.sleep(self.probe_interval)
            try:
                if self.probe is not None:
                    await self.probe(self._probe_bytes)
                else:
                    await self._probe_store()
            except Exception as exc:  # noqa: BLE001 - still refusing: tried again next interval
                log.debug("write probe failed: %s", exc)
                continue
            self.succeeded()

    async def _probe_store(self) -> None:
        key = f"probe/{self.node_id}-{time.time_ns()}"
        await self.objects.put_if_absent(key, bytes(self._probe_bytes))
        with contextlib.suppress(Exception):
            await self.objects.delete(key)
        await self.meta.put(f"/nereus/probe/{self.node_id}", b"ok")

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe


__all__ = ["PROBE_INTERVAL", "PROBE_MAX_BYTES", "WRITES_REFUSED", "WriteHealth", "out_of_space"]
