"""The routing ring and topic ownership, with several in-process brokers over one metadata engine."""

from __future__ import annotations

import asyncio
import time
import collections
import contextlib

import pytest

from nereus.broker.cluster import ClusterPlacement, HashRing, Membership, node_id_for, owner_key
from nereus.ledger.naming import TopicName
from nereus.meta import MetadataUnavailable, open_engine
from nereus.meta.api import NotificationType
from nereus.objstore import open_object_store
from nereus.storage import StreamClosed, StreamFenced, StreamStorage
from nereus.topics import BrokerAddress, NotOwner, TopicRegistry


# -- the ring -----------------------------------------------------------------------------------
def _ring(names, zones=None):
    zones = zones or ["default"] * len(names)
    return HashRing({n: (z, n) for n, z in zip(names, zones)})


def test_ring_spreads_keys_evenly_and_a_new_broker_takes_only_its_share():
    keys = [f"persistent://public/default/t{i}" for i in range(6000)]
    three = _ring(["b0", "b1", "b2"])
    counts = collections.Counter(three.owner(k) for k in keys)
    assert all(1500 < c < 2500 for c in counts.values()), counts
    four = _ring(["b0", "b1", "b2", "b3"])
    moved = [k for k in keys if three.owner(k) != four.owner(k)]
    assert all(four.owner(k) == "b3" for k in moved)  # only the newcomer gains keys
    assert 0.15 < len(moved) / len(keys) < 0.35
    two = _ring(["b0", "b2"])
    moved = [k for k in keys if three.owner(k) != two.owner(k)]
    assert all(three.owner(k) == "b1" for k in moved)  # only the leaver's keys move


def test_ring_prefers_a_broker_of_the_asked_zone_and_falls_back_to_any():
    ring = _ring(["a1", "a2", "b1"], ["a", "a", "b"])
    keys = [f"k{i}" for i in range(500)]
    assert {ring.preferred(k, "b") for k in keys} == {"b1"}
    assert {ring.preferred(k, "a") for k in keys} == {"a1", "a2"}
    assert all(ring.preferred(k, "c") == ring.owner(k) for k in keys)
    assert all(ring.preferred(k, None) == ring.owner(k) for k in keys)
    assert _ring([]).owner("k") is None


# -- ownership ------------------------------------------------------------------------------------
class Broker:
    """One broker's cluster parts (no listeners): membership, placement, storage, registry."""

    def __init__(self, engine, objects, name: str, zone: str = "default", session_timeout: float = 2.0):
        self.meta = engine.client(identity=name, session_timeout=session_timeout)
        self.name, self.zone = name, zone
        self.objects = objects

    async def start(self) -> "Broker":
        node_id = await node_id_for(self.meta, self.name)
        # A listener that accepts and hangs up: lookups check that an owner's port answers.
        self.listener = await asyncio.start_server(lambda _r, w: w.close(), "127.0.0.1", 0)
        port = self.listener_port = self.listener.sockets[0].getsockname()[1]
        address = BrokerAddress(self.name, node_id, self.zone, f"pulsar://127.0.0.1:{port}", "127.0.0.1", 9092,
                                f"http://127.0.0.1:{port}")
        self.membership = Membership(self.meta, address, refresh_seconds=0.5)
        self.placement = ClusterPlacement(self.meta, self.membership, rebalance_delay=0.05, rebalance_interval=0.5,
                                          dead_owner_wait=5.0)
        self.storage = StreamStorage(self.meta, self.objects, node_id=self.name)
        self.registry = TopicRegistry(self.storage, self.meta, placement=self.placement)
        self.placement.bind(self.registry)
        self.meta.add_session_listener(lambda: asyncio.ensure_future(self.placement.session_lost()))
        await self.membership.start()
        self.placement.start()
        await self.membership.set_serving()  # its listener accepts already, as a broker's does once ready
        return self

    async def stop(self) -> None:
        self.listener.close()
        await self.placement.stop()
        await self.registry.close()
        await self.membership.stop()
        await self.storage.close()
        await self.meta.close()


def _writes_nothing(meta) -> None:
    """Every write of ``meta``'s client fails from now on, as a killed process's would never happen."""
    async def dead(*_args, **_kwargs):
        raise MetadataUnavailable("this broker was killed")

    meta.put = meta.put_many = meta.delete = dead


async def _refuses(port: int) -> bool:
    """Does 127.0.0.1:``port`` refuse connections (its listening socket really gone)?"""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


async def wait_for(condition, timeout: float = 15.0, what: str = "condition"):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def cluster(names, zones=None, session_timeout: float = 2.0):
    engine = open_engine(None, shards=2)
    objects = open_object_store("memory://")
    brokers = [await Broker(engine, objects, n, z, session_timeout).start()
               for n, z in zip(names, zones or ["default"] * len(names))]
    try:
        await wait_for(lambda: all(len(b.membership.ring) == len(brokers) for b in brokers), what="ring of all")
        await wait_for(lambda: all(r.serving for b in brokers for r in b.membership.brokers.values()),
                       what="every broker seen serving")
        yield brokers, engine, objects
    finally:
        for b in brokers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(b.stop(), 20)
        await objects.close()
        await engine.close()


def _by_name(brokers, name):
    return next(b for b in brokers if b.name == name)


async def _owner_name(meta, topic):
    rec = await meta.get(owner_key(topic))
    return None if rec is None else __import__("json").loads(rec.value)["broker"]


@pytest.mark.asyncio
async def test_any_broker_answers_a_lookup_and_only_the_ring_owner_claims():
    async with cluster(["b0", "b1", "b2"]) as (brokers, _engine, _objects):
        topic = "persistent://public/default/lookup"
        target = brokers[0].membership.ring.owner(topic)
        others = [b for b in brokers if b.name != target]
        answer, final = await others[0].placement.lookup(topic)
        assert (answer.name, final) == (target, False)  # Redirect to the broker the ring names
        with pytest.raises(NotOwner) as refused:
            await others[0].registry.claim(topic)
        assert refused.value.owner.name == target
        owner = _by_name(brokers, target)
        answer, final = await owner.placement.lookup(topic, authoritative=True)
        assert (answer.name, final) == (target, True)
        assert await _owner_name(owner.meta, topic) == target
        for b in others:  # everyone now finds the owner through its record
            answer, final = await b.placement.lookup(topic)
            assert (answer.name, final) == (target, True)


@pytest.mark.asyncio
async def test_a_lookup_that_claims_a_new_topic_reads_its_ownership_record_once():
    async with cluster(["b0", "b1"]) as (brokers, _engine, _objects):
        topic = "persistent://public/default/new-one"
        owner = _by_name(brokers, brokers[0].membership.ring.owner(topic))
        read = owner.meta.get
        reads: list[str] = []

        async def get(key, *args, **kwargs):
            reads.append(key)
            return await read(key, *args, **kwargs)

        owner.meta.get = get
        try:
            answer, final = await owner.placement.lookup(topic, authoritative=True)
        finally:
            del owner.meta.get
        assert (answer.name, final) == (owner.name, True)
        assert reads.count(owner_key(topic)) == 1  # the lookup's; the claim creates the record unread
        assert await _owner_name(owner.meta, topic) == owner.name


@pytest.mark.asyncio
async def test_two_brokers_racing_to_claim_a_topic_leave_one_owner():
    async with cluster(["b0", "b1"]) as (brokers, _engine, _objects):
        for i in range(20):
            topic = f"persistent://public/default/race-{i}"
            results = await asyncio.gather(*(b.placement.lookup(topic, authoritative=True) for b in brokers),
                                           return_exceptions=True)
            owners = {r[0].name for r in results if not isinstance(r, Exception)}
            assert len(owners) == 1, results
            assert sum(b.placement.owns(topic) for b in brokers) == 1


@pytest.mark.asyncio
async def test_a_joining_broker_takes_its_share_by_handoff_and_writes_continue():
    engine = open_engine(None, shards=2)
    objects = open_object_store("memory://")
    first = await Broker(engine, objects, "b0").start()
    joiner = None
    try:
        topics = [TopicName.parse(f"persistent://public/default/move-{i}") for i in range(12)]
        for name in topics:
            topic = await first.registry.get(name)
            await topic.ensure_writer()
            await topic.append(b"before", 1)
        joiner = await Broker(engine, objects, "b1").start()
        ring = _ring(["b0", "b1"])
        moving = [n for n in topics if ring.owner(str(n)) == "b1"]
        assert moving, "the ring should give the joiner some topics"
        await wait_for(lambda: all(not first.placement.owns(str(n)) for n in moving), what="handoffs")
        for name in moving:  # the joiner claims on first write and continues after the committed tail
            topic = await joiner.registry.get(name)
            await topic.ensure_writer()
            result = await topic.append(b"after", 1)
            assert result.base_offset == 1
            assert await _owner_name(joiner.meta, str(name)) == "b1"
        staying = [n for n in topics if n not in moving]
        assert all(first.placement.owns(str(n)) for n in staying)
    finally:
        for b in (joiner, first):
            if b is not None:
                await b.stop()
        await objects.close()
        await engine.close()


@pytest.mark.asyncio
async def test_a_dead_brokers_topics_are_adopted_and_its_streams_fenced():
    async with cluster(["b0", "b1", "b2"]) as (brokers, _engine, _objects):
        victim = brokers[0]
        names = [TopicName.parse(f"persistent://public/default/dead-{i}") for i in range(30)]
        mine = [n for n in names if victim.membership.ring.owner(str(n)) == victim.name]
        assert mine
        tokens, stale = {}, {}
        for name in mine:
            topic = stale[name] = await victim.registry.get(name)
            await topic.ensure_writer()
            await topic.append(b"x", 1)
            tokens[name] = topic.handle.fencing_token
        # Dead as after kill -9: no heartbeats, no background work; its session expires at the server.
        await victim.placement.stop()
        await victim.membership.stop()
        victim.meta._pause_heartbeats()
        survivors = brokers[1:]

        def adopted():
            return all(any(b.placement.owns(str(n)) for b in survivors) for n in mine)

        await wait_for(adopted, what="adoption of the dead broker's topics")
        for name in mine:
            adopter = next(b for b in survivors if b.placement.owns(str(name)))
            assert adopter.registry.loaded(name) is None  # claimed only: loaded when a client asks for it
            topic = await adopter.registry.get(name)  # as a client's producer would
            await topic.ensure_writer()
            assert topic.handle.fencing_token > tokens[name]  # a newer token fences the old
            assert (await topic.append(b"after", 1)).base_offset == 1
            with pytest.raises((StreamFenced, StreamClosed)):
                await stale[name].handle.append(b"zombie", 1)


async def test_a_killed_brokers_session_is_ended_and_its_topics_adopted_in_batched_writes():
    """A broker seen dead (its listener refuses connections) has its metadata session ended by a
    survivor, not left to its lease (a minute here): its records go at once, in the shard's one
    deletion. Adopting then costs one batched write of the ownership records per thousand topics
    (claimed if absent), not a load of each topic (about twenty metadata operations apiece)."""
    async with cluster(["b0", "b1"], session_timeout=60.0) as (brokers, _engine, _objects):
        victim, survivor = brokers
        names = [f"persistent://public/default/batch-{i}" for i in range(3000)]
        mine = [n for n in names if victim.membership.ring.owner(n) == victim.name]
        assert len(mine) > 1000
        for name in mine:
            await victim.placement.lookup(name, authoritative=True)  # claimed, as a lookup does
        await victim.meta.put("/test/victims-own", b"x", ephemeral=True)
        calls = collections.Counter()
        for method in ("get", "get_many", "put", "put_many", "delete", "end_session_of"):
            real = getattr(survivor.meta, method)

            async def counted(*args, _real=real, _method=method, **kwargs):
                calls[_method] += 1
                return await _real(*args, **kwargs)

            setattr(survivor.meta, method, counted)
        victim.listener.close()  # kill -9: its listener refuses connections, its session lives on for now
        await victim.listener.wait_closed()
        await victim.placement.stop()
        await victim.membership.stop()
        victim.meta._pause_heartbeats()
        await survivor.membership.forget(survivor.membership.brokers[victim.name])  # seen dead by a lookup
        await wait_for(lambda: all(survivor.placement.owns(n) for n in mine), what="every topic adopted")
        assert await survivor.meta.get("/test/victims-own") is None  # its session ended, not expired
        assert 1 <= calls["end_session_of"] <= 2, calls  # one session per shard holding its records
        assert not survivor.registry.topics  # none loaded
        assert calls["put_many"] <= 2 * (len(mine) // 1000 + 1) and calls["put"] < 20, calls
        assert calls["get"] < 50, calls
        for name in mine[:5]:
            assert await _owner_name(survivor.meta, name) == survivor.name
            topic = await survivor.registry.get(TopicName.parse(name))
            await topic.ensure_writer()
            assert (await topic.append(b"after", 1)).base_offset == 0


@pytest.mark.parametrize("failure", ["whole batch", "some claims"])
async def test_claims_of_an_adoption_that_failed_for_want_of_metadata_are_made_again(failure):
    from nereus.meta.errors import MetadataUnavailable

    async with cluster(["b0", "b1"]) as (brokers, _engine, _objects):
        victim, survivor = brokers
        mine = [n for n in (f"persistent://public/default/retry-{i}" for i in range(200))
                if victim.membership.ring.owner(n) == victim.name]
        for name in mine:
            await victim.placement.lookup(name, authoritative=True)
        real, failed = survivor.meta.put_many, []

        async def flaky_put_many(ops):
            if not failed:  # the first batch meets a metadata plane that does not answer
                failed.extend(op.key for op in ops)
                if failure == "whole batch":
                    raise MetadataUnavailable("no connection to the shard leader")
                results = await real(ops[::2])
                return [results[i // 2] if i % 2 == 0 else MetadataUnavailable("timed out")
                        for i in range(len(ops))]
            return await real(ops)

        survivor.meta.put_many = flaky_put_many
        # Its records expire with its session: claimed if absent, after their deletions' notices,
        # which come once. A claim that failed is not noticed again: it must be made again.
        await victim.placement.stop()
        await victim.membership.stop()
        victim.meta._pause_heartbeats()
        await wait_for(lambda: all(survivor.placement.owns(n) for n in mine), what="every topic adopted")
        assert failed


async def test_a_topic_claimed_away_from_its_home_moves_there_though_the_ring_stayed_the_same():
    """Rebalancing looks again only at the topics claimed since its last pass while the ring stays
    the same: a claim made meanwhile on a broker that is not the topic's home is still handed over."""
    async with cluster(["b0", "b1"]) as (brokers, _engine, _objects):
        home, other = brokers
        topic = next(t for t in (f"persistent://public/default/away-{i}" for i in range(100))
                     if home.membership.ring.owner(t) == home.name)
        await other.placement.rebalance()  # the ring checked
        await other.placement._claim(topic, force=True)  # a client sent there authoritatively
        assert other.placement.owns(topic)
        await other.placement.rebalance()
        assert not other.placement.owns(topic)


async def test_a_topic_unloaded_for_idleness_is_not_adopted_again_by_anyone():
    """The deletion of a record its owner released is heard by every broker, the owner too: none
    of them takes it for a dead owner's and loads the topic again (an idle unload would undo itself)."""
    async with cluster(["b0", "b1"]) as (brokers, _engine, _objects):
        names = [TopicName.parse(f"persistent://public/default/idle-{i}") for i in range(20)]
        for name in names:
            owner = next(b for b in brokers if b.membership.ring.owner(str(name)) == b.name)
            topic = await owner.registry.get(name)
            await topic.ensure_writer()
            await topic.append(b"x", 1)
        heard = []
        for b in brokers:
            # Notifications over a network come after the deleting call returned: so here too.
            b.membership._note_listeners = [
                (prefix, (lambda note, listener=listener: asyncio.get_running_loop().call_later(0.1, listener, note)))
                for prefix, listener in b.membership._note_listeners]
            b.membership.on_note("/nereus/cluster/owners/", lambda note, b=b: note.type == NotificationType.KEY_DELETED
                                 and heard.append((b.name, note.key)))
        for b in brokers:
            b.registry.idle_seconds = 0.001
            await b.registry.unload_idle(now=asyncio.get_running_loop().time() + 3600)
        await wait_for(lambda: not any(b.placement.owned for b in brokers), what="every ownership released")
        await wait_for(lambda: len(set(heard)) >= 2 * len(names), what="every broker hearing every deletion")
        await asyncio.sleep(0.3)  # and the deferred listeners called
        for b in brokers:
            released_here = {str(n) for n in names if b.membership.ring.owner(str(n)) == b.name}
            assert not released_here & set(b.placement._orphans), b.name  # none taken for a dead owner's
            await b.placement.rebalance()
            assert not b.placement.owned and not b.registry.topics, b.name
            assert b.placement.adoptions == 0


async def test_a_zombie_that_wakes_up_drops_its_topics_rejoins_and_gets_its_share_back():
    async with cluster(["b0", "b1", "b2"]) as (brokers, _engine, _objects):
        zombie, survivors = brokers[0], brokers[1:]
        names = [TopicName.parse(f"persistent://public/default/zombie-{i}") for i in range(30)]
        mine = [n for n in names if zombie.membership.ring.owner(str(n)) == zombie.name]
        stale = {}
        for name in mine:
            topic = stale[name] = await zombie.registry.get(name)
            await topic.ensure_writer()
            await topic.append(b"x", 1)
        zombie.meta._pause_heartbeats()  # its session expires; it notices at its next ephemeral write
        fenced = set()

        async def fenced_by_survivors():  # each loaded, its append session taken, where a client is sent
            for n in set(mine) - fenced:  # (the claim alone fences nothing: a topic loads when first asked for)
                for b in survivors:
                    with contextlib.suppress(NotOwner, StreamFenced, StreamClosed):  # not its, or moved meanwhile
                        topic = await b.registry.get(n)
                        await topic.ensure_writer()
                        fenced.add(n)
                        break
            return len(fenced) == len(mine)

        # Each topic taken over at some point, not all at once: the zombie's sessions on the two metadata
        # shards expire apart, and in between it may notice the first loss and register again (a
        # session its paused heartbeats let expire too), so the others hand some topics back to it
        # before they take the rest. Bounds a hang only.
        await wait_for(fenced_by_survivors, timeout=60, what="the survivors taking the topics over")
        # It wakes up: the sessions it opens from now on are kept alive (else it would lose each
        # one again a session timeout later, dropping whatever it had loaded by then).
        zombie.meta._resume_heartbeats()
        for name in mine:  # whatever the zombie still holds cannot commit (fenced, or dropped already)
            with pytest.raises((StreamFenced, StreamClosed)):
                await stale[name].handle.append(b"zombie", 1)
        # A session it opened while paused (it re-registers as soon as it notices the loss) may expire
        # too: on a busy machine it registers a second time, a session timeout later.
        await wait_for(lambda: zombie.membership.live(zombie.name) and len(zombie.membership.ring) == 3
                       and all(len(b.membership.ring) == 3 for b in survivors), timeout=60,
                       what="the zombie re-registered")
        # Back in the ring, it gets its share again: the others hand the topics back and writes continue.
        await wait_for(lambda: zombie.placement._registered.is_set(), timeout=60, what="the zombie's recovery")
        for name in mine:
            assert zombie.membership.ring.owner(str(name)) == zombie.name

            async def written_by_the_zombie(name=name) -> bool:
                if any(b.placement.owns(str(name)) for b in survivors):
                    return False  # not handed back yet
                try:
                    topic = await zombie.registry.get(name)
                    await topic.ensure_writer()
                    return (await topic.append(b"later", 1)).base_offset >= 1
                except (StreamFenced, StreamClosed):
                    # the session of another metadata shard, lost during the pause, noticed only
                    # now: the zombie drops what it holds and registers once more, then serves again
                    return False

            await wait_for(written_by_the_zombie, what="written by the zombie again")
            assert sum(b.placement.owns(str(name)) for b in brokers) == 1


async def test_several_lost_sessions_at_once_lead_to_one_recovery():
    async with cluster(["b0", "b1"]) as (brokers, _engine, _objects):
        broker = brokers[0]
        topic = "persistent://public/default/recover"
        owner = broker if broker.membership.ring.owner(topic) == broker.name else brokers[1]
        await owner.registry.claim(topic)
        registrations = []
        original = owner.membership.register

        async def counting_register(**kwargs):
            registrations.append(kwargs)
            await original(**kwargs)

        owner.membership.register = counting_register
        before = owner.membership.incarnation
        await asyncio.gather(*(owner.placement.session_lost() for _ in range(3)))  # one per shard
        assert registrations == [{"new_incarnation": True}]
        assert owner.membership.incarnation != before and not owner.placement.owns(topic)
        await owner.registry.claim(topic)  # claims work again under the new incarnation
        assert owner.placement.owns(topic)


async def test_an_owner_that_died_is_replaced_before_its_session_expires():
    # A session long enough not to expire on a loaded machine before the checks: what is
    # checked is what happens before it does.
    async with cluster(["b0", "b1", "b2"], session_timeout=15.0) as (brokers, _engine, _objects):
        topic = "persistent://public/default/killed-owner"
        owner = next(b for b in brokers if b.membership.ring.owner(topic) == b.name)
        asker = next(b for b in brokers if b is not owner)
        await owner.placement.lookup(topic, authoritative=True)
        assert (await asker.placement.lookup(topic))[0].name == owner.name
        # kill -9: the listener is gone at once, the session only after its timeout
        owner.listener.close()
        await owner.listener.wait_closed()
        await wait_for(lambda: _refuses(owner.listener_port), what="the closed listener refusing connections")
        await owner.placement.stop()
        await owner.membership.stop()
        owner.meta._pause_heartbeats()
        _writes_nothing(owner.meta)  # a killed process: no pass of its own may register it again
        # ... and what it sent before it died has landed (a scan waits for every write queued
        # before it: a load update still on its way would otherwise look like a new sign of life).
        _ = [rec async for rec in asker.meta.range_scan("/nereus/cluster/", "/nereus/cluster/\uffff")]
        getattr(asker.placement, "_probes", {}).clear()  # forget that it answered a moment ago
        # Kafka Metadata: a live leader at once (the owner refuses connections: it is dead)
        assert (await asker.placement.owner(topic)).name != owner.name
        answer, _final = await asker.placement.lookup(topic)
        assert answer.name != owner.name
        # Removed from the registry: by this broker's lookup, or by another broker that saw it dead
        # first (heard here from the registry's change notification).
        await wait_for(lambda: owner.name not in asker.membership.brokers, what="the dead owner out of the registry")


async def test_a_broker_still_starting_is_not_taken_for_dead():
    """Registered before its listeners serve, a starting broker refuses connections for a while:
    only a broker that announced it serves is judged dead by a refusal."""
    async with cluster(["b0", "b1", "b2"]) as (brokers, _engine, _objects):
        topic = "persistent://public/default/starting-owner"
        owner = next(b for b in brokers if b.membership.ring.owner(topic) == b.name)
        asker = next(b for b in brokers if b is not owner)
        await owner.placement.lookup(topic, authoritative=True)
        owner.membership.serving = False  # as between its registration and its listeners' start
        await owner.membership.register()
        await wait_for(lambda: not asker.membership.brokers[owner.name].serving, what="seen as not serving yet")
        owner.listener.close()
        await owner.listener.wait_closed()
        asker.placement._probes.clear()
        with pytest.raises(NotOwner):  # no leader for now, rather than a dead one or a takeover
            await asker.placement.owner(topic)
        assert owner.name in asker.membership.brokers
        assert await asker.meta.get(owner_key(topic)) is not None


@pytest.mark.asyncio
async def test_an_orphan_noticed_while_a_long_adoption_ran_is_still_adopted():
    """A topic orphaned long ago (its notice came while a large adoption kept the rebalancing
    busy for longer than ORPHAN_SECONDS) is adopted by its home broker all the same."""
    from nereus.broker.cluster.rebalance import ORPHAN_SECONDS

    async with cluster(["b0", "b1"]) as (brokers, _engine, _objects):
        home = brokers[0]
        topic = next(t for t in (f"persistent://public/default/late-orphan-{i}" for i in range(100))
                     if home.membership.ring.owner(t) == home.name)
        home.placement._orphans[topic] = time.monotonic() - 2 * ORPHAN_SECONDS
        await home.placement.rebalance()
        assert home.placement.owns(topic)
        assert await _owner_name(home.meta, topic) == home.name


@pytest.mark.asyncio
async def test_lookups_held_for_an_owner_wait_on_its_record_notification_not_by_polling(monkeypatch):
    """Thousands of lookups held after a broker died must not poll the metadata plane: each reads
    the ownership record once, then once more when its change notification wakes it."""
    from nereus.broker.cluster import owner_lookup

    monkeypatch.setattr(owner_lookup, "GONE_RECHECK", 60.0, raising=False)  # only a notification wakes them
    async with cluster(["b0", "b1"]) as (brokers, _engine, _objects):
        topic = "persistent://public/default/held-lookups"
        owner = next(b for b in brokers if b.membership.ring.owner(topic) == b.name)
        asker = next(b for b in brokers if b is not owner)
        await owner.placement.lookup(topic, authoritative=True)
        key = owner_key(topic)
        version = (await asker.meta.get(key)).version.version_id
        reads = collections.Counter()
        real_get = asker.meta.get

        async def counted_get(k, *args, **kwargs):
            reads[k] += 1
            return await real_get(k, *args, **kwargs)

        monkeypatch.setattr(asker.meta, "get", counted_get)
        held = [asyncio.ensure_future(asker.placement._gone(key, version)) for _ in range(200)]
        await wait_for(lambda: reads[key] >= 200, what="every held lookup read the record once")
        await asyncio.sleep(0.2)  # a poller would read it again and again meanwhile
        assert reads[key] == 200 and not any(h.done() for h in held)
        await owner.meta.delete(key)  # released (or expired with a dead owner's session)
        assert await asyncio.wait_for(asyncio.gather(*held), 10) == [True] * 200
        assert reads[key] <= 400
        assert key not in asker.placement._record_waiters


async def test_a_refresh_that_began_before_a_broker_left_does_not_bring_it_back():
    """Two refreshes overlap (the notification follower's and a lookup's ``forget``); the one that
    read the registry before a dead broker was removed ends last: its view is not applied."""
    async with cluster(["b0", "b1", "b2"], session_timeout=15.0) as (brokers, _engine, _objects):
        asker, dead = brokers[0], brokers[2]
        real_scan = asker.meta.range_scan
        read, finish = asyncio.Event(), asyncio.Event()

        async def slow_scan(lo, hi, **kwargs):
            records = [rec async for rec in real_scan(lo, hi, **kwargs)]  # read now ...
            read.set()
            await finish.wait()  # ... handed over late
            for rec in records:
                yield rec

        asker.meta.range_scan = slow_scan
        stale = asyncio.ensure_future(asker.membership.refresh())
        await read.wait()
        asker.meta.range_scan = real_scan
        await dead.placement.stop()
        await dead.membership.stop()
        _writes_nothing(dead.meta)  # dead: it registers nothing again
        await asker.membership.forget(asker.membership.brokers[dead.name])  # removes it, refreshes
        assert dead.name not in asker.membership.brokers
        finish.set()
        await stale
        assert dead.name not in asker.membership.brokers
        assert dead.name not in {a.name for a in asker.membership.active()}


async def test_the_ring_home_passes_over_a_broker_that_refused_connections_a_moment_ago():
    """No ownership record, and the ring names a broker this one just found refusing connections
    (its registration not yet gone from this view): the next broker on the ring is named."""
    async with cluster(["b0", "b1", "b2"], session_timeout=15.0) as (brokers, _engine, _objects):
        topic = "persistent://public/default/home-refused"
        home = next(b for b in brokers if b.membership.ring.owner(topic) == b.name)
        asker = next(b for b in brokers if b is not home)
        assert (await asker.placement.owner(topic)).name == home.name
        asker.placement._probes[home.name] = (False, time.monotonic())  # refused just now
        assert (await asker.placement.owner(topic)).name not in (home.name, None)
