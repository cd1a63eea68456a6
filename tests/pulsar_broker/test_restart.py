"""kill -9 during produce/consume, restart on the same data dir: nothing acknowledged is lost."""

from __future__ import annotations

import threading
import time

import pytest

from .conftest import receive_all

TOPIC = "persistent://public/default/restart"


@pytest.mark.slow
def test_kill_during_produce_and_consume(fresh_standalone, make_client, pulsar):
    server = fresh_standalone
    server.start()
    client = make_client(server.url, operation_timeout_seconds=60)

    # Phase 1: a cursor acked up to m9, then closed cleanly.
    producer = client.create_producer(TOPIC, producer_name="restart-producer", batching_enabled=True,
                                      batching_max_publish_delay_ms=5, send_timeout_millis=120_000,
                                      block_if_queue_full=True)
    # Unbatched, so that a cumulative ack of m9 is exact (the client would ack only
    # whole batches otherwise, as against Pulsar).
    single = client.create_producer(TOPIC, producer_name="restart-single", batching_enabled=False)
    for i in range(20):
        single.send(f"{i:06d}".encode())
    single.close()
    cur = client.subscribe(TOPIC, "cur", initial_position=pulsar.InitialPosition.Earliest)
    first = receive_all(cur, 10)
    cur.acknowledge_cumulative(first[-1])
    cur.close()

    # Phase 2: a live producer and a live consumer; the broker is killed mid-way.
    live = client.subscribe(TOPIC, "live", initial_position=pulsar.InitialPosition.Earliest,
                            consumer_type=pulsar.ConsumerType.Shared)
    receipted: list[int] = []
    lock = threading.Lock()

    def sent(result, _msg_id, i):
        if result == pulsar.Result.Ok:
            with lock:
                receipted.append(i)

    total = 3000
    consumed = set()
    stop = threading.Event()

    def consume():
        while not stop.is_set():
            try:
                msg = live.receive(timeout_millis=200)
            except Exception:
                continue
            consumed.add(int(msg.data()))
            live.acknowledge(msg)

    reader_thread = threading.Thread(target=consume, daemon=True)
    reader_thread.start()
    for i in range(20, total):
        producer.send_async(f"{i:06d}".encode(), lambda r, m, i=i: sent(r, m, i))
        if i == 800:
            deadline = time.monotonic() + 30
            while len(receipted) < 300 and time.monotonic() < deadline:
                time.sleep(0.01)
            server.kill()
            server.start()
    producer.flush()
    assert sorted(receipted) == list(range(20, total)), "every send eventually succeeded"

    # Every acknowledged message is stored exactly once, in the producer's order.
    reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
    stored = []
    while reader.has_message_available():
        stored.append(int(reader.read_next(10_000).data()))
    assert stored == list(range(total))

    # The live subscription loses nothing (at-least-once for what it had not acked).
    deadline = time.monotonic() + 60
    while len(consumed) < total and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    reader_thread.join()
    assert consumed == set(range(total))

    # The cursor closed before the crash resumes after m9.
    cur = client.subscribe(TOPIC, "cur")
    assert int(cur.receive(timeout_millis=10_000).data()) == 10
