"""The topic registry: one load per topic however many callers race, unloads, bounded memory."""

from __future__ import annotations

import asyncio
import gc
import resource
import weakref

import pytest

from nereus.ledger.naming import TopicName
from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.storage import StreamStorage
from nereus.storage.records import stream_partition
from nereus.topics import TopicRegistry, TopicUnloaded


@pytest.fixture
async def registry():
    engine = open_engine(None, shards=4)
    meta = engine.client(namespace="default")
    objects = open_object_store("memory://")
    storage = StreamStorage(meta, objects, node_id="n")
    registry = TopicRegistry(storage, meta, idle_seconds=60)
    yield registry
    await registry.close()
    await storage.close()
    await meta.close()
    await engine.close()


def name(i: int) -> TopicName:
    return TopicName.parse(f"persistent://public/default/t-{i}")


async def test_racing_loads_give_one_topic_and_one_append_session(registry):
    topics = await asyncio.gather(*(registry.get(name(0)) for _ in range(20)))
    assert len({id(t) for t in topics}) == 1
    topic = topics[0]
    await asyncio.gather(*(topic.ensure_writer() for _ in range(20)))
    token = topic.handle.fencing_token
    assert token == 1  # one acquisition, not twenty
    results = await asyncio.gather(*(topic.append(b"x", 1) for _ in range(10)))
    assert sorted(r.base_offset for r in results) == list(range(10))


async def test_a_topic_created_on_first_use_reads_none_of_its_streams_records(registry):
    # A stream made just now has no tail, start, session, dedup snapshot, key view or time
    # marks (ids are never reused): a topic created by a producer costs writes only.
    meta = registry.storage.meta
    read = meta.get, meta.get_many
    keys: list[str] = []

    async def get(key, *args, **kwargs):
        keys.append(key)
        return await read[0](key, *args, **kwargs)

    async def get_many(many, *args, **kwargs):
        keys.extend(many)
        return await read[1](many, *args, **kwargs)

    meta.get, meta.get_many = get, get_many
    try:
        topic = await registry.get(name(2))
        await topic.ensure_writer()
        assert (await topic.append(b"a", 1)).base_offset == 0
    finally:
        del meta.get, meta.get_many
    stream_prefix = stream_partition(topic.stream_id) + "/"
    assert keys  # its name and policies were read ...
    assert [k for k in keys if k.startswith(stream_prefix)] == []  # ... and nothing of its stream
    await registry.unload(topic, "test")
    reloaded = await registry.get(name(2))  # opened, not created: its records are read
    await reloaded.ensure_writer()
    assert (await reloaded.append(b"b", 1)).base_offset == 1


async def test_an_unloaded_topic_reloads_from_the_stored_truth(registry):
    topic = await registry.get(name(1))
    await topic.ensure_writer()
    await topic.append(b"a", 1)
    unloaded = []
    topic.on_unload(unloaded.append)
    await registry.unload(topic, "test")
    assert unloaded == ["test"] and topic.closed
    with pytest.raises(TopicUnloaded):
        await topic.ensure_writer()
    again = await registry.get(name(1))
    assert again is not topic and again.handle.next_offset() == 1
    await again.ensure_writer()
    assert (await again.append(b"b", 1)).base_offset == 1
    assert again.handle.fencing_token == 2


async def test_a_lost_session_unloads_the_topic(registry):
    topic = await registry.get(name(2))
    await topic.ensure_writer()
    topic.handle._session.lose(RuntimeError("injected"))  # as after a failed flush
    with pytest.raises(Exception):
        await topic.append(b"x", 1)
    for _ in range(100):
        if registry.loaded(name(2)) is None and topic.closed:
            break
        await asyncio.sleep(0.01)
    assert topic.closed
    fresh = await registry.get(name(2))
    await fresh.ensure_writer()
    assert (await fresh.append(b"y", 1)).base_offset == 0


async def test_idle_topics_unload_many_at_once_and_one_taken_again_meanwhile_stays(registry):
    """Each unload waits on the metadata plane: a sweep overlaps them, and rechecks each topic."""
    from nereus.topics.registry import IDLE_UNLOADS_AT_ONCE

    topics = await asyncio.gather(*(registry.get(name(i)) for i in range(100)))
    in_flight, most = 0, asyncio.Event()
    taken_again = list(registry.topics.values())[-1]  # the sweep's last: checked once others unload

    async def slow_unload(topic, reason):
        nonlocal in_flight
        in_flight += 1
        taken_again.last_active = float("inf")  # a client came back while the sweep ran
        if in_flight == IDLE_UNLOADS_AT_ONCE:
            most.set()
        await most.wait()  # one at a time, the first unload would wait here for ever

    registry.unload_listeners.append(slow_unload)
    when = max(t.last_active for t in topics) + registry.idle_seconds + 1.0
    assert await asyncio.wait_for(registry.unload_idle(now=when), 30) == 99
    assert [t for t in topics if not t.closed] == [taken_again]
    assert list(registry.topics) == [str(taken_again.name)]


async def test_the_heap_is_trimmed_after_many_unloads_over_sweeps_and_when_unloads_stop(registry, monkeypatch):
    from nereus.topics import registry as module

    calls: list[str] = []
    monkeypatch.setattr(module, "TRIM_AFTER_UNLOADS", 10)
    monkeypatch.setattr(module, "collect_everything", lambda: calls.append("collect"))
    monkeypatch.setattr(module, "_trim_heap", lambda: calls.append("trim"))
    topics = await asyncio.gather(*(registry.get(name(i)) for i in range(15)))
    when = max(t.last_active for t in topics) + registry.idle_seconds + 1.0

    async def sweep_of(count: int) -> int:
        for topic in [t for t in topics if not t.closed][count:]:
            topic.last_active = float("inf")  # in use: this sweep leaves it
        unloaded = await registry.unload_idle(now=when)
        for topic in topics:
            topic.last_active = 0.0 if not topic.closed else topic.last_active
        return unloaded

    assert await sweep_of(6) == 6 and calls == []  # 6 since the last trim: more may follow
    assert await sweep_of(6) == 6 and calls == ["collect", "trim"]  # 12: many, over two sweeps
    assert await sweep_of(3) == 3 and calls == ["collect", "trim"]
    assert await sweep_of(0) == 0 and calls == ["collect", "trim", "trim"]  # they stopped: the rest
    assert await sweep_of(0) == 0 and len(calls) == 3  # nothing unloaded since


async def test_an_unloaded_topic_is_freed_without_the_cycle_collector(registry):
    class ProtocolState:  # as Pulsar's and Kafka's per-topic states: they refer back to the topic
        def __init__(self, core):
            self.core = core
            core.attachments["protocol"] = self

    topic = await registry.get(name(3))
    await topic.ensure_writer()
    ProtocolState(topic)
    gone = weakref.ref(topic)
    gc.collect()
    gc.disable()
    try:
        await registry.unload(topic, "idle")
        del topic
        for _ in range(3):
            await asyncio.sleep(0)  # the loop's handles of the finished unload
        assert gone() is None
    finally:
        gc.enable()


async def test_idle_topics_unload_so_memory_follows_the_topics_in_use(registry):
    """20,000 topics touched one after another: at most a window of them stays loaded."""
    held = 0
    refs = []
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for first in range(0, 20_000, 1000):  # 1,000 clients at a time (the engine commits in groups)
        topics = await asyncio.gather(*(registry.get(name(i)) for i in range(first, first + 1000)))
        refs.append(weakref.ref(topics[0]))
        held = max(held, len(registry.topics))
        # A second past the idle time: (last + idle) - last may round to just below idle.
        await registry.unload_idle(now=max(t.last_active for t in topics) + registry.idle_seconds + 1.0)
    del topics
    await registry.unload_idle(now=float("inf"))
    for _ in range(3):
        await asyncio.sleep(0)  # let the loop drop its handles of the finished gathers
    gc.collect()
    assert held <= 1000 and not registry.topics
    alive = [i for i, ref in enumerate(refs) if ref() is not None]
    assert not alive, alive  # unloaded topics are freed, not just forgotten
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grown_mb < 300, grown_mb  # the metadata engine's own pages, not topic handles
