"""Random, truncated, oversized and slow frames on every port of a live standalone.

While fuzzing connections hit the Pulsar, Kafka, HTTP and Oxia ports, a real
pulsar-client producer/consumer and a confluent-kafka producer/consumer keep
working: the broker stays up, its memory stays bounded, the well-behaved clients
see no error, and everything they had acknowledged reads back. The randomness is
seeded (each fuzzing thread draws the same frames on every run).
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import psutil
import pytest
from confluent_kafka import Consumer, Producer

from nereus.codec.pulsar import encode_command, pb, wrap
from tests.standalone_process import Standalone

pulsar = pytest.importorskip("pulsar")

SEED = 15
FUZZERS = 4
FUZZ_SECONDS = 8.0
RSS_GROWTH_BOUND = 400 << 20  # generous: what matters is that it does not grow with the attack

_KAFKA_API_VERSIONS = struct.pack(">hhih", 18, 0, 1, -1)
_KAFKA_METADATA = struct.pack(">hhihi", 3, 1, 2, -1, 1) + struct.pack(">h", 5) + b"fuzzy"
_HTTP_GET = b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\n"
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _kafka(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _valid_frames(port_name: str) -> list[bytes]:
    if port_name == "pulsar":
        return [encode_command(wrap(pb.CommandConnect(client_version="fuzz", protocol_version=21))),
                encode_command(wrap(pb.CommandPing()))]
    if port_name == "kafka":
        return [_kafka(_KAFKA_API_VERSIONS), _kafka(_KAFKA_METADATA)]
    if port_name == "http":
        return [_HTTP_GET, b"PUT /admin/v2/tenants/fuzz HTTP/1.1\r\nContent-Length: 9\r\n\r\n{\"a\":[1,"]
    # Oxia (gRPC over HTTP/2): the preface, then a SETTINGS frame
    return [_HTTP2_PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"]


def _attack(rng: random.Random, port_name: str) -> list[tuple[bytes, float]]:
    """(bytes to send, seconds to wait after them) of one fuzzing connection."""
    valid = rng.choice(_valid_frames(port_name))
    kind = rng.choice(["random", "truncated", "mutated", "oversized", "slow", "pipelined"])
    if kind == "random":
        return [(rng.randbytes(rng.randrange(1, 4096)), 0.0)]
    if kind == "truncated":
        return [(valid[:rng.randrange(1, len(valid))], rng.uniform(0, 0.5))]
    if kind == "mutated":
        data = bytearray(valid)
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return [(bytes(data), 0.0)]
    if kind == "oversized":
        if port_name in ("pulsar", "kafka"):
            return [(struct.pack(">i", rng.choice([1 << 30, 0x7FFFFFFF, 64 << 20])) + rng.randbytes(1024), 0.0)]
        return [(b"POST / HTTP/1.1\r\nContent-Length: 1073741824\r\n" + b"X: " + b"a" * 65536 + b"\r\n\r\n", 0.0)]
    if kind == "slow":
        cut = rng.randrange(1, len(valid))
        return [(valid[i:i + 1], rng.uniform(0.05, 0.3)) for i in range(min(cut, 6))]
    return [(valid * rng.randrange(2, 50), 0.0)]


def _fuzz(index: int, ports: dict[str, int], stop: threading.Event, counts: list[int]) -> None:
    rng = random.Random(SEED * 1000 + index)
    names = sorted(ports)
    while not stop.is_set():
        name = rng.choice(names)
        steps = _attack(rng, name)
        try:
            with socket.create_connection(("127.0.0.1", ports[name]), timeout=2) as sock:
                for data, pause in steps:
                    sock.sendall(data)
                    if pause:
                        time.sleep(pause)
                sock.settimeout(0.2)
                try:
                    while sock.recv(65536):
                        pass
                except OSError:
                    pass  # no answer (yet): the next attack
        except OSError:
            pass  # closed by the broker: that is what it is expected to do
        counts[index] += 1


def _broker_rss(proc: psutil.Process) -> int:
    return proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(recursive=True))


@pytest.fixture
def server(tmp_path):
    proc = Standalone(tmp_path / "data", ["--compaction-interval", "0", "--frame-read-timeout", "1"])
    proc.start()
    yield proc
    alive = proc.alive()
    code = proc.stop()
    assert alive and code == 0, proc.log.read_text()[-3000:]


def test_fuzzing_every_port_leaves_the_broker_and_its_clients_unharmed(server):
    broker = psutil.Process(server.proc.pid)
    client = pulsar.Client(server.pulsar_url, operation_timeout_seconds=30, io_threads=1,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    ptopic = "persistent://public/default/live-fuzz"
    consumer = client.subscribe(ptopic, "fuzz-sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(ptopic)
    kproducer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 5})
    ktopic = "live-fuzz-kafka"
    kproducer.produce(ktopic, b"warm-up")
    assert kproducer.flush(30) == 0
    kconsumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "fuzz-live",
                          "auto.offset.reset": "earliest", "enable.auto.commit": False})
    kconsumer.subscribe([ktopic])
    got: list[bytes] = []

    def consume(timeout: float) -> None:
        msg = kconsumer.poll(timeout)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    baseline = _broker_rss(broker)

    stop = threading.Event()
    counts = [0] * FUZZERS
    ports = dict(server.ports)
    fuzzers = [threading.Thread(target=_fuzz, args=(i, ports, stop, counts), daemon=True) for i in range(FUZZERS)]
    for thread in fuzzers:
        thread.start()

    pulsar_acked, kafka_acked, kafka_errors, received = [], [b"warm-up"], [], []
    peak = baseline
    deadline = time.monotonic() + FUZZ_SECONDS
    i = 0
    while time.monotonic() < deadline:
        value = b"p-%d" % i
        producer.send(value)  # raises on any error
        pulsar_acked.append(value)
        msg = consumer.receive(timeout_millis=30000)
        consumer.acknowledge(msg)
        received.append(msg.data())
        kvalue = b"k-%d" % i

        def delivered(err, _msg, kvalue=kvalue):
            (kafka_errors if err is not None else kafka_acked).append(err or kvalue)
        kproducer.produce(ktopic, kvalue, on_delivery=delivered)
        kproducer.poll(0)
        consume(0)
        peak = max(peak, _broker_rss(broker))
        i += 1
    assert kproducer.flush(30) == 0
    stop.set()
    for thread in fuzzers:
        thread.join(30)

    assert server.alive()
    assert not kafka_errors
    assert received == pulsar_acked
    assert sum(counts) > FUZZERS  # the fuzzers did connect, many times
    assert peak - baseline < RSS_GROWTH_BOUND, f"the broker grew by {(peak - baseline) >> 20} MB"

    # Everything acknowledged reads back.
    reader = client.subscribe(ptopic, "fuzz-check", initial_position=pulsar.InitialPosition.Earliest)
    assert [reader.receive(timeout_millis=30000).data() for _ in pulsar_acked] == pulsar_acked
    read_deadline = time.monotonic() + 60
    while len(got) < len(kafka_acked) and time.monotonic() < read_deadline:
        consume(1.0)  # the consumer that ran through the fuzzing catches up
    kconsumer.close()
    assert got == kafka_acked
    client.close()
    # The HTTP admin still answers.
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(_HTTP_GET.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        assert sock.recv(64).startswith(b"HTTP/1.1 200")
    log = server.log.read_text()
    assert "Traceback" not in log, log[-5000:]  # every refusal is one line, none is a crash
