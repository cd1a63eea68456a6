"""Brokers leave and join under load: rolling restarts and scaling out and in move topics, never data."""

from __future__ import annotations

import time

from nereus.broker.cluster.ring import HashRing

from .clients import PUBLIC, PulsarLoad, PulsarSubscriber, assert_exactly_once, pulsar_client, read_all
from .harness import Cluster


def _check_loads(client, loads: list[PulsarLoad]) -> None:
    for load in loads:
        load.stop()
        assert not load.errors, load.errors[:5]
        assert_exactly_once(read_all(client, load.topic), load.acked, load.topic)


def _progress(loads: list[PulsarLoad], more: int = 50, timeout: float = 90.0) -> None:
    targets = [(load, load.acked_count + more) for load in loads]
    for load, target in targets:
        load.wait_acked(target, timeout)


def test_rolling_restart_under_pulsar_load(make_cluster):
    cluster = make_cluster(["a", "a", "b"])
    topics = [f"{PUBLIC}rolling-{i}" for i in range(6)]
    client = pulsar_client(cluster.service_url(), cluster.root, "rolling")
    try:
        loads = [PulsarLoad(client, t, f"r{i}", pace=0.01).start() for i, t in enumerate(topics)]
        _progress(loads, 100)
        assert len({cluster.owner(t) for t in topics}) > 1, cluster.owners()
        for broker in cluster.brokers_list:
            owned = [t for t in topics if cluster.owner(t) == broker.name]
            started = time.monotonic()
            code = broker.stop()
            assert code == 0, f"{broker.name} exited with {code} on SIGTERM"
            # Drained: its topics are served elsewhere while it is down.
            cluster.wait_for(lambda: all(cluster.owner(t) not in (None, broker.name) for t in owned), 60,
                             f"{owned} served by other brokers while {broker.name} is down")
            _progress(loads)
            down = time.monotonic()
            broker.launch()
            broker.wait_ready()
            cluster.wait_ring_settled()
            _progress(loads)
            print(f"{broker.name}: stopped and its topics served elsewhere in {down - started:.1f}s, "
                  f"back and every producer going in {time.monotonic() - down:.1f}s")
        _check_loads(client, loads)
    finally:
        client.close()


def _ring(cluster: Cluster) -> HashRing:
    return HashRing({b.name: (b.zone, b.name) for b in cluster.running})


def _settled(cluster: Cluster, topics: list[str]) -> bool:
    ring, owners = _ring(cluster), cluster.owners()
    return all(owners.get(t) == ring.owner(t) for t in topics)


def test_scale_out_and_in_moves_topics_and_writes_no_object(make_cluster):
    cluster = make_cluster(["a", "a", "b"])
    topics = [f"{PUBLIC}scale-{i}" for i in range(12)]
    client = pulsar_client(cluster.service_url(), cluster.root, "scale")
    subscribers = []
    try:
        loads = [PulsarLoad(client, t, f"s{i}", pace=0.01).start() for i, t in enumerate(topics)]
        subscribers = [PulsarSubscriber(client, t, "scale") for t in topics]
        _progress(loads, 100)
        cluster.wait_for(lambda: _settled(cluster, topics), 60, "topics on their ring owners")

        def quiesce() -> dict[str, float]:
            for load in loads:
                load.pause()
            for load, sub in zip(loads, subscribers):
                cluster.wait_for(lambda: sub.has_all(load.acked), 90, f"{load.topic}: everything consumed")
            for sub in subscribers:
                sub.pause()  # after it has everything: a paused listener is handed nothing more
            return cluster.objects()

        def move(change, what: str) -> dict[str, str]:
            before_owners = {t: cluster.owner(t) for t in topics}
            started = time.monotonic()
            before = quiesce()
            quiet = time.monotonic()
            change()
            changed = time.monotonic()
            cluster.wait_for(lambda: _settled(cluster, topics), 90, f"topics on their ring owners after {what}")
            print(f"{what}: quiesced in {quiet - started:.1f}s, changed in {changed - quiet:.1f}s, "
                  f"settled in {time.monotonic() - changed:.1f}s")
            after = cluster.objects()
            new = sorted(set(after) - set(before))
            assert not new, f"{what} wrote {len(new)} object(s) while no client produced: {new[:10]}"
            moved = {t: (before_owners[t], cluster.owner(t)) for t in topics if cluster.owner(t) != before_owners[t]}
            assert moved, f"{what} moved no topic"
            for load in loads:
                load.resume()
            for sub in subscribers:
                sub.resume()
            _progress(loads)
            return moved

        # 3 -> 4: the new broker takes its share of the ring; only those topics move.
        moved = move(lambda: cluster.add_broker("b"), "adding b4")
        assert {new for _old, new in moved.values()} == {"b4"}, moved

        # 4 -> 2: two brokers drain and stop; their topics go to the two left.
        b1, b2 = cluster.broker("b1"), cluster.broker("b2")

        def shrink() -> None:
            assert b1.stop() == 0 and b2.stop() == 0
            cluster.wait_ring_settled()
        moved = move(shrink, "stopping b1 and b2")
        assert {old for old, _new in moved.values()} <= {"b1", "b2"}, moved
        assert set(cluster.owners()[t] for t in topics) <= {"b3", "b4"}

        _check_loads(client, loads)
        for load, sub in zip(loads, subscribers):
            cluster.wait_for(lambda: sub.has_all(load.acked), 60, f"{load.topic}: everything consumed")
    finally:
        for sub in subscribers:
            sub.close()
        client.close()
