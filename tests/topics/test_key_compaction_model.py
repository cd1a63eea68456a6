"""Key compaction under load and a crash, checked against a model through both protocols.

A real standalone process; producers write keyed updates with tombstones while
compactions run; the process is killed (SIGKILL) in the middle of a compaction
build, restarted on the same data dir and compacted again. A ``read_compacted``
Pulsar reader and a Kafka consumer from offset 0 of a ``cleanup.policy=compact``
topic then see exactly the latest value of each key at its original id, tombstoned
keys absent, and the collector leaves no orphan object.
"""

from __future__ import annotations

import uuid

import pytest

from tests import compaction_model as cm
from tests.standalone_process import Standalone

pulsar = pytest.importorskip("pulsar")
pytest.importorskip("confluent_kafka")

UPDATES, KEYS = 5000, 200
PHASE_A, CHUNK = 3000, 250


@pytest.fixture
def server(tmp_path):
    # The pending timeout must well exceed the WAL writer's 10 s reservation lifetime (a
    # shorter one takes a live writer's reserved names for a dead writer's).
    proc = Standalone(tmp_path / "data", ["--compaction-interval", "0", "--compaction-monitor-interval", "0",
                                          "--gc-interval", "0.3", "--gc-grace", "0.5", "--gc-pending-timeout", "20",
                                          "--session-timeout", "3"])
    proc.start()
    yield proc
    proc.kill()


def test_compacted_views_match_the_model_after_concurrent_writes_and_a_crash(server):
    local = f"cm-{uuid.uuid4().hex[:8]}"
    ptopic, ktopic = f"persistent://public/default/p{local}", f"k{local}"
    data = cm.updates(UPDATES, KEYS)
    cm.create_compacted_topic(server.bootstrap, ktopic, **{"delete.retention.ms": "0"})
    ids: list = [None] * UPDATES
    offsets: list = [None] * UPDATES

    # Phase A: producers of both protocols write while compactions of both topics run.
    client = pulsar.Client(server.url, operation_timeout_seconds=30)
    acked = [0]

    def produce_a():
        for first in range(0, PHASE_A, CHUNK):
            chunk = data[first:first + CHUNK]
            cm.produce_pulsar(client, ptopic, chunk, ids, first=first)
            cm.produce_kafka(server.bootstrap, ktopic, chunk, offsets, first=first)
            acked[0] = first + len(chunk)

    producers = cm.Background(produce_a)
    producers.start()
    cm.wait_until(lambda: acked[0] >= 2 * CHUNK, "the first updates")
    compactions = 0
    while True:
        running = producers.is_alive()
        for topic in (ptopic, ktopic):
            cm.compact(server.http, topic)
        compactions += 1
        if not running:
            break
    producers.result()
    assert compactions >= 2

    # Phase B: more updates, then SIGKILL while both topics' builds run.
    killed_mid_build = False
    for first in range(PHASE_A, UPDATES - 1000, 500):
        chunk = data[first:first + 500]
        cm.produce_pulsar(client, ptopic, chunk, ids, first=first)
        cm.produce_kafka(server.bootstrap, ktopic, chunk, offsets, first=first)
        cm.trigger(server.http, ptopic)
        cm.trigger(server.http, ktopic)
        if cm.compaction_status(server.http, ktopic) == "RUNNING":
            killed_mid_build = True
            break
        cm.wait_until(lambda: cm.compaction_status(server.http, ptopic) != "RUNNING", "the Pulsar build")
    client.close()
    server.kill()
    server.start()
    written = first + 500
    assert killed_mid_build, "every build finished before the kill"

    # Phase C: the rest, after the restart; then compact both again (once the dead
    # process's compaction leases expired with its metadata session).
    client = pulsar.Client(server.url, operation_timeout_seconds=30)
    try:
        cm.produce_pulsar(client, ptopic, data[written:], ids, first=written)
        cm.produce_kafka(server.bootstrap, ktopic, data[written:], offsets, first=written)
        for topic in (ptopic, ktopic):
            cm.compact(server.http, topic)

        assert cm.read_pulsar(client, pulsar, ptopic, compacted=True) == cm.model(data, ids)
        # A normal reader still gets every message once, in order.
        everything = cm.read_pulsar(client, pulsar, ptopic, compacted=False)
        assert [m[0] for m in everything] == ids
    finally:
        client.close()
    assert cm.read_kafka(server.bootstrap, ktopic) == cm.model(data, offsets)
    assert offsets == sorted(offsets) and len(set(offsets)) == UPDATES

    cm.wait_settled(f"oxia://127.0.0.1:{server.ports['oxia']}", server.data_dir / "objects")
