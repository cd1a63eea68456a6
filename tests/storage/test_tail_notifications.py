"""Long-polls across processes: tail notifications of the metadata plane wake waiters of
every StreamStorage, and waiters never outlive their wait."""

from __future__ import annotations

import asyncio
import time

import pytest

from nereus.meta import open_engine
from nereus.meta.api import NotificationStream
from nereus.meta.errors import MetadataUnavailable
from nereus.objstore import open_object_store
from nereus.storage import StreamStorage

from .conftest import FAST


@pytest.fixture
def storage(storage_on_each_wal):
    """Each test once with the object WAL and once with WAL replicas on disk (tests/storage/conftest.py)."""
    return storage_on_each_wal


async def _pair(meta_a, meta_b, objects):
    """Two StreamStorages sharing metadata and objects: two brokers."""
    return (StreamStorage(meta_a, objects, node_id="broker-a", options=FAST),
            StreamStorage(meta_b, objects, node_id="broker-b", options=FAST))


async def _close_all(*closers) -> None:
    """Close what a test opened, in order (storages before their metadata clients)."""
    for close in closers:
        await close()


async def _wait_and_append(storage_a, storage_b, name="t", offset=1):
    """B long-polls at ``offset`` while A appends; returns (woken, seconds waited)."""
    writer = await storage_a.open_stream(name, create=True)
    await writer.append(b"first", 1)
    reader = await storage_b.open_stream(name)
    await reader.refresh()
    assert reader.next_offset() == offset
    started = time.monotonic()
    wait = asyncio.ensure_future(reader.wait_for(offset, timeout=30))
    await asyncio.sleep(0.2)  # let the reader subscribe and register (not deciding the outcome)
    assert not wait.done()
    await writer.append(b"second", 1)
    woken = await wait
    return woken, time.monotonic() - started, reader


@pytest.fixture
async def shared_objects():
    store = open_object_store("memory://")
    yield store
    await store.close()


async def test_a_commit_in_another_storage_wakes_a_waiter_long_before_its_timeout(shared_objects):
    engine = open_engine(None, shards=4)
    meta_a, meta_b = engine.client(namespace="default"), engine.client(namespace="default")
    a, b = await _pair(meta_a, meta_b, shared_objects)
    try:
        woken, waited, reader = await _wait_and_append(a, b)
        assert woken
        assert waited < 5, f"woken after {waited:.1f}s: by the timeout, not by the notification"
        assert reader.next_offset() == 2  # the wake carried the new committed end
        assert b.waiter_count() == 0
        assert b.tail_watch.subscriptions == 1
    finally:
        await _close_all(a.close, b.close, meta_a.close, meta_b.close, engine.close)


async def test_a_commit_over_the_oxia_protocol_wakes_a_waiter_in_another_client(shared_objects):
    from nereus.meta.oxia import start_oxia_server
    from nereus.meta.oxia.client import OxiaMetadataStore

    engine = open_engine(None, shards=4)
    server = await start_oxia_server(engine, port=0)
    meta_a = OxiaMetadataStore(server.address, "default")
    meta_b = OxiaMetadataStore(server.address, "default")
    a, b = await _pair(meta_a, meta_b, shared_objects)
    try:
        woken, waited, reader = await _wait_and_append(a, b)
        assert woken
        assert waited < 5, f"woken after {waited:.1f}s: by the timeout, not by the notification"
        assert reader.next_offset() == 2
    finally:
        await _close_all(a.close, b.close, meta_a.close, meta_b.close, server.stop, engine.close)


async def test_deleting_the_stream_elsewhere_wakes_its_waiters(shared_objects):
    engine = open_engine(None, shards=4)
    meta_a, meta_b = engine.client(namespace="default"), engine.client(namespace="default")
    a, b = await _pair(meta_a, meta_b, shared_objects)
    try:
        writer = await a.open_stream("doomed", create=True)
        await writer.append(b"x", 1)
        reader = await b.open_stream("doomed")
        wait = asyncio.ensure_future(reader.wait_for(1, timeout=30))
        await asyncio.sleep(0.2)
        await writer.close()
        started = time.monotonic()
        await a.delete_stream("doomed")
        assert await wait  # woken to look: its next fetch finds the stream gone
        assert time.monotonic() - started < 5
        assert b.waiter_count() == 0
    finally:
        await _close_all(a.close, b.close, meta_a.close, meta_b.close, engine.close)


class _BreakableStream(NotificationStream):
    """Notifications of a real stream until ``broken`` is set: then iteration fails."""

    def __init__(self, inner: NotificationStream, broken: asyncio.Event):
        self._inner = inner
        self._broken = broken

    async def __aenter__(self):
        await self._inner.__aenter__()
        return self

    def __aiter__(self):
        return self._iterate()

    async def _iterate(self):
        broken = asyncio.ensure_future(self._broken.wait())
        items = self._inner.__aiter__()
        try:
            while True:
                nxt = asyncio.ensure_future(items.__anext__())
                await asyncio.wait({nxt, broken}, return_when=asyncio.FIRST_COMPLETED)
                if broken.done():
                    nxt.cancel()
                    raise MetadataUnavailable("notification stream broken (test)")
                yield nxt.result()
        finally:
            broken.cancel()

    async def close(self) -> None:
        await self._inner.close()


class _BreakableMeta:
    """A MetadataStore whose notification streams the test can break (and which stay
    down while ``down`` is set), delegating everything else."""

    def __init__(self, inner):
        self._inner = inner
        self.broken = asyncio.Event()
        self.down = False
        self.subscribed = 0

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def notifications(self):
        if self.down:
            raise MetadataUnavailable("metadata plane down (test)")
        self.subscribed += 1
        self.broken = asyncio.Event()
        return _BreakableStream(self._inner.notifications(), self.broken)


async def test_a_broken_notification_stream_is_resubscribed_and_every_waiter_rechecks(shared_objects):
    engine = open_engine(None, shards=4)
    meta_a = engine.client(namespace="default")
    meta_b = _BreakableMeta(engine.client(namespace="default"))
    a, b = await _pair(meta_a, meta_b, shared_objects)
    try:
        writer = await a.open_stream("t", create=True)
        await writer.append(b"first", 1)
        reader = await b.open_stream("t")
        await reader.refresh()
        wait = asyncio.ensure_future(reader.wait_for(1, timeout=30))
        await asyncio.sleep(0.2)
        assert b.tail_watch.live
        meta_b.down = True  # the stream breaks and the first re-subscriptions fail
        meta_b.broken.set()
        await asyncio.sleep(0.1)
        assert not b.tail_watch.live
        await writer.append(b"second", 1)  # committed while B hears nothing
        await asyncio.sleep(0.3)
        assert not wait.done()
        started = time.monotonic()
        meta_b.down = False
        assert await wait  # the new subscription made it re-check: it found the commit
        assert time.monotonic() - started < 5
        assert meta_b.subscribed == 2
        assert reader.next_offset() == 2
    finally:
        await _close_all(a.close, b.close, meta_a.close, meta_b._inner.close, engine.close)


async def test_timed_out_waits_leave_no_waiter_behind(storage):
    stream = await storage.open_stream("quiet", create=True)
    await stream.append(b"x", 1)
    results = await asyncio.gather(*(stream.wait_for(5, timeout=0.05) for _ in range(10_000)))
    assert not any(results)
    assert storage.waiter_count() == 0
    assert storage._waiters == {}


async def test_cancelled_waits_leave_no_waiter_behind(storage):
    stream = await storage.open_stream("quiet", create=True)
    await stream.append(b"x", 1)
    waits = [asyncio.ensure_future(stream.wait_for(5, timeout=30)) for _ in range(1000)]
    # The subscription going live makes every waiter re-check: they are uncounted while
    # they re-register, so wait for it and for all of them rather than for some time.
    deadline = time.monotonic() + 20
    while not (storage.tail_watch.live and storage.waiter_count() == 1000):
        assert not any(w.done() for w in waits), [w.exception() or w.result() for w in waits if w.done()][:3]
        assert time.monotonic() < deadline, storage.waiter_count()
        await asyncio.sleep(0.01)
    for w in waits:
        w.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    assert storage.waiter_count() == 0
    assert storage._waiters == {}


async def test_the_subscription_is_dropped_once_no_stream_is_watched(storage):
    storage.tail_watch._linger = 0.05
    stream = await storage.open_stream("quiet", create=True)
    assert not await stream.wait_for(0, timeout=0.2)
    assert storage.tail_watch.subscriptions == 1
    await asyncio.sleep(0.3)
    assert storage.tail_watch._task is None and not storage.tail_watch.live
    assert not await stream.wait_for(0, timeout=0.2)  # subscribes again on demand
    assert storage.tail_watch.subscriptions == 2
