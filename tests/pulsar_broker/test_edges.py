"""The edges users hit: cut connections under load, racing producers, fully trimmed topics.

Each test drives a real standalone with the official client, through a proxy that
cuts connections or from several client processes at once, then reads back the
stored stream with a reader of its own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from tests.cutting_proxy import CuttingProxy
from tests.pulsar_admin.conftest import Admin

from .conftest import assert_no_more


def stored_payloads(make_client, url: str, topic: str, expected: int, timeout: float = 60.0) -> list[bytes]:
    """Every stored message of ``topic``, in offset order (waits for ``expected``, then for any extra)."""
    import pulsar

    reader = make_client(url).create_reader(topic, pulsar.MessageId.earliest)
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        try:
            out.append(reader.read_next(timeout_millis=1000).data())
        except pulsar.Timeout:
            pass
    while True:  # anything beyond what was sent is a duplicate
        try:
            out.append(reader.read_next(timeout_millis=1000).data())
        except pulsar.Timeout:
            return out


def take_over_stream(standalone, topic: str) -> None:
    """Take the topic's append session from another process (what a second broker does)."""
    script = textwrap.dedent(f"""
        import asyncio
        from nereus.meta import connect
        from nereus.objstore import open_object_store
        from nereus.storage import StreamStorage
        async def main():
            meta = connect("oxia://127.0.0.1:{standalone.ports['oxia']}")
            objects = open_object_store({(standalone.data_dir / 'objects').resolve().as_uri()!r})
            storage = StreamStorage(meta, objects, node_id="usurper")
            handle = await storage.open_stream({topic!r})
            await handle.acquire()
            await storage.close(); await meta.close(); await objects.close()
        asyncio.run(main())
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def test_cut_connections_under_send_async_store_each_message_once_in_order(standalone, make_client, pulsar,
                                                                          topic):
    """Deduplication holds across reconnects: the stored stream is the sent sequence, once."""
    proxy = CuttingProxy("127.0.0.1", standalone.pulsar_port, seed=7)
    try:
        client = make_client(f"pulsar://{proxy.url}", operation_timeout_seconds=30)
        producer = client.create_producer(topic, send_timeout_millis=0, batching_enabled=True,
                                          batching_max_messages=20, batching_max_publish_delay_ms=2,
                                          max_pending_messages=200, block_if_queue_full=True)
        acked, errors = [], []
        proxy.start_cutting(0.05, 0.4, limit=8)
        for i in range(1000):
            producer.send_async(b"%d" % i, lambda res, mid, i=i: (acked if res == pulsar.Result.Ok else errors)
                                .append(i))
            if i % 50 == 0:
                time.sleep(0.02)  # spread the load over the cuts
            if i in (300, 700):  # appends in flight fail: the broker must not store their resends twice
                take_over_stream(standalone, topic)
        producer.flush()
        proxy.stop_cutting()
        deadline = time.monotonic() + 120
        while len(acked) + len(errors) < 1000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not errors and sorted(acked) == list(range(1000)), (len(acked), errors[:5])
        assert proxy.cuts >= 1
    finally:
        proxy.close()
    stored = stored_payloads(make_client, standalone.url, topic, 1000)
    assert stored == [b"%d" % i for i in range(1000)], (len(stored), stored[:3])

    consumer = make_client(standalone.url).subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
                                                     initial_position=pulsar.InitialPosition.Earliest)
    seen = []
    for _ in range(1000):
        msg = consumer.receive(timeout_millis=20000)
        seen.append(msg.data())
        consumer.acknowledge(msg)
    assert sorted(seen, key=int) == [b"%d" % i for i in range(1000)]
    assert_no_more(consumer, pulsar)


_RACER = textwrap.dedent("""
    import os, sys, time, pulsar
    url, topic, name, count, go = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    client = pulsar.Client(url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    while not os.path.exists(go):
        time.sleep(0.001)
    kwargs = {"producer_name": name} if name != "-" else {}
    producer = client.create_producer(topic, send_timeout_millis=0, batching_enabled=False, **kwargs)
    results = []
    for i in range(count):
        seq = {"sequence_id": i} if name != "-" else {}
        producer.send_async(("%s-%d-%d" % (name, os.getpid(), i)).encode(), lambda res, mid: results.append(res),
                            **seq)
    producer.flush()
    while len(results) < count:
        time.sleep(0.01)
    bad = [r for r in results if r != pulsar.Result.Ok]
    print("acked", count - len(bad), flush=True)
    client.close()
    sys.exit(1 if bad else 0)
""")


@pytest.mark.parametrize("named", [False, True], ids=["generated-names", "named-with-sequence-ids"])
def test_two_producers_racing_onto_a_fresh_topic_store_each_message_once(standalone, make_client, tmp_path, named):
    rounds = 4
    for r in range(rounds):
        topic = f"persistent://public/default/race-{uuid.uuid4().hex[:8]}"
        go = tmp_path / f"go-{r}"
        names = ["writer-a", "writer-b"] if named else ["-", "-"]
        procs = [subprocess.Popen([sys.executable, "-c", _RACER, standalone.url, topic, n, "150", str(go)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in names]
        time.sleep(0.5)  # both clients connected and waiting (a head start only; the go file starts them)
        go.touch()
        outputs = [p.communicate(timeout=120) for p in procs]
        for p, (out, err) in zip(procs, outputs):
            assert p.returncode == 0, (out, err[-2000:])
        stored = stored_payloads(make_client, standalone.url, topic, 300)
        assert len(stored) == 300 and len(set(stored)) == 300, (r, len(stored), len(set(stored)))


def test_reader_of_a_topic_whose_messages_were_all_trimmed(standalone, make_client, pulsar):
    ns = f"public/trimmed-{uuid.uuid4().hex[:6]}"
    admin = Admin(standalone.http)
    admin.ok("PUT", f"/namespaces/{ns}")
    topic = f"persistent://{ns}/t"
    client = make_client(standalone.url)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(b"m%d" % i)
    admin.ok("POST", f"/namespaces/{ns}/retention", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
    path = "/persistent/" + topic[len("persistent://"):]
    admin.ok("POST", path + "/trim")
    deadline = time.monotonic() + 30
    while admin.ok("GET", path + "/internalStats")["startOffset"] < 5:
        assert time.monotonic() < deadline, "retention did not trim the topic"
        time.sleep(0.1)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()
    with pytest.raises(pulsar.Timeout):
        reader.read_next(timeout_millis=300)
    producer.send(b"after")
    assert reader.has_message_available()
    assert reader.read_next(timeout_millis=10000).data() == b"after"


def test_a_producer_and_consumer_survive_their_topic_being_unloaded(standalone, make_client, pulsar, topic):
    """A stream taken over elsewhere unloads the topic; the clients reconnect by themselves."""
    client = make_client(standalone.url)
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
    consumer = client.subscribe(topic, "s")
    producer.send(b"before")
    first = consumer.receive(timeout_millis=10000)
    assert first.data() == b"before"
    consumer.acknowledge(first)
    take_over_stream(standalone, topic)  # as another broker would
    producer.send(b"after")  # fenced on the broker: the producer is told to reconnect and resends
    received = consumer.receive(timeout_millis=20000).data()
    if received == b"before":  # its ack may not have been stored before the unload: redelivered
        received = consumer.receive(timeout_millis=20000).data()
    assert received == b"after"
    assert stored_payloads(make_client, standalone.url, topic, 2) == [b"before", b"after"]
