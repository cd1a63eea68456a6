"""An ``ObjectStore`` wrapper that injects failures and latency, for tests."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from nereus.objstore._common import Payload
from nereus.objstore.api import ObjectInfo, ObjectStore
from nereus.objstore.errors import ObjectStoreError

#: An exception instance, an exception class, or a zero-argument factory.
ExcSpec = BaseException | Callable[[], BaseException]


class InjectedFault(ObjectStoreError):
    """The default failure raised by ``FaultInjectingObjectStore``."""


@dataclass
class _PutFault:
    matches: Callable[[int, str], bool]  # (1-based put number, key) -> fail it?
    exc: ExcSpec
    after: bool  # fail after the inner put succeeded (the "lost response" case)


class FaultInjectingObjectStore(ObjectStore):
    """Forwards to ``inner``, failing, delaying or holding calls as configured.

    ``calls`` counts calls per method name (``put_if_absent``, ``get``, ``head``,
    ``delete``), including the failed ones.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.hedge_slow_puts = inner.hedge_slow_puts
        self.calls: Counter[str] = Counter()
        self.put_delay = 0.0
        self.get_delay = 0.0
        self._put_faults: list[_PutFault] = []
        self.holding = False
        #: Puts held by ``hold_puts``, in arrival order; each goes on once its future is done.
        self.held: list[asyncio.Future] = []
        self._held_changed = asyncio.Event()

    def fail_put(self, n: int, exc: ExcSpec | None = None, *, after: bool = False) -> None:
        """Fail the ``n``-th put_if_absent call (counted from the wrapper's creation)."""
        exc = exc if exc is not None else _injected(f"put #{n}")
        self._put_faults.append(_PutFault(lambda i, _key: i == n, exc, after))

    def fail_puts(self, predicate: Callable[[str], bool], exc: ExcSpec | None = None, *, after: bool = False) -> None:
        """Fail every put_if_absent whose key satisfies ``predicate``.

        ``after=True`` performs the put first, then raises: the caller cannot tell
        whether it landed, as with a timeout on a real store.
        """
        exc = exc if exc is not None else _injected("put")
        self._put_faults.append(_PutFault(lambda _i, key: predicate(key), exc, after))

    def delay(self, *, puts: float | None = None, gets: float | None = None) -> None:
        """Sleep this many seconds before each put (``puts``) or get (``gets``)."""
        if puts is not None:
            self.put_delay = puts
        if gets is not None:
            self.get_delay = gets

    def hold_puts(self, hold: bool = True) -> None:
        """Hold every later put_if_absent until its future in ``held`` is done; ``False``
        stops holding and lets the held puts go on (in arrival order)."""
        self.holding = hold
        if not hold:
            for fut in self.held:
                if not fut.done():
                    fut.set_result(None)

    async def wait_held(self, n: int) -> None:
        """Return once ``n`` puts have been held in all."""
        while len(self.held) < n:
            self._held_changed.clear()
            await self._held_changed.wait()

    def clear_faults(self) -> None:
        """Remove failures and delays (counts are kept)."""
        self._put_faults.clear()
        self.put_delay = self.get_delay = 0.0

    async def put_if_absent(self, key: str, data: Payload) -> None:
        self.calls["put_if_absent"] += 1
        number = self.calls["put_if_absent"]
        fault = next((f for f in self._put_faults if f.matches(number, key)), None)
        if self.put_delay:
            await asyncio.sleep(self.put_delay)
        if self.holding:
            held = asyncio.get_running_loop().create_future()
            self.held.append(held)
            self._held_changed.set()
            await held
        if fault is not None and not fault.after:
            raise _instance(fault.exc)
        await self.inner.put_if_absent(key, data)
        if fault is not None:
            raise _instance(fault.exc)

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        self.calls["get"] += 1
        if self.get_delay:
            await asyncio.sleep(self.get_delay)
        return await self.inner.get(key, start, end)

    async def head(self, key: str) -> ObjectInfo:
        self.calls["head"] += 1
        return await self.inner.head(key)

    async def delete(self, key: str) -> bool:
        self.calls["delete"] += 1
        return await self.inner.delete(key)

    async def close(self) -> None:
        await self.inner.close()


def _injected(what: str) -> Callable[[], BaseException]:
    return lambda: InjectedFault(f"injected failure of {what}")


def _instance(exc: ExcSpec) -> BaseException:
    # Classes and factories give a fresh instance per raise, so tracebacks do not
    # pile up on one shared object.
    return exc if isinstance(exc, BaseException) else exc()
