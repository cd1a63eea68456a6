"""TLS offload (``tlsOffloadProcesses``): worker processes end TLS, the broker serves the plaintext.

Official clients against a real standalone: Kafka SSL with the certificate CN as the
ACL principal, SASL_SSL login, Pulsar ``pulsar+ssl://`` with the TLS provider's role
from the CN; killed workers are replaced, and a broker killed with SIGKILL takes its
workers with it, so a restart binds the same port.
"""

from __future__ import annotations

import base64
import datetime
import os
import socket
import ssl
import struct
import time
import uuid
from pathlib import Path

import confluent_kafka
import jwt
import pulsar
import pytest
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, \
    ResourceType
from kio.index import load_request_schema

from nereus.codec.kafka import make, nested
from tests.kafka.raw import RawKafka
from tests.standalone_process import free_port
from tests.waiting import wait_until

from .certs import issue_client
from .conftest import _start

SECRET = os.urandom(32)
PROVIDERS = ("org.apache.pulsar.broker.authentication.AuthenticationProviderTls,"
             "org.apache.pulsar.broker.authentication.AuthenticationProviderToken")
FAST = {"operation_timeout_seconds": 5, "connection_timeout_ms": 3000}


@pytest.fixture(scope="module")
def offloaded(tmp_path_factory, pki):
    directory = tmp_path_factory.mktemp("offload")
    ports = {"pulsar_tls": free_port(), "kafka_ssl": free_port(), "kafka_sasl_ssl": free_port()}
    server = _start(directory, f"""
brokerServicePortTls={ports['pulsar_tls']}
tlsCertificateFilePath={pki.server_cert}
tlsKeyFilePath={pki.server_key}
tlsTrustCertsFilePath={pki.ca}
kafkaListeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:{ports['kafka_ssl']},SASL_SSL://127.0.0.1:{ports['kafka_sasl_ssl']}
saslAllowedMechanisms=PLAIN
tokenSecretKey=data:;base64,{base64.b64encode(SECRET).decode()}
authenticationEnabled=true
authenticationProviders={PROVIDERS}
authorizationEnabled=true
superUserRoles=admin
tlsOffloadProcesses=2
""")
    server.tls_ports = ports
    server.certs = {cn: issue_client(directory, pki.ca, cn) for cn in ("admin", "writer", "stranger")}
    yield server
    assert server.stop() == 0, server.log.read_text()[-3000:]


def _ssl(server, pki, cn: str | None) -> dict:
    config = {"bootstrap.servers": f"localhost:{server.tls_ports['kafka_ssl']}", "security.protocol": "SSL",
              "ssl.ca.location": str(pki.ca), "socket.timeout.ms": 5000, "message.timeout.ms": 8000,
              "log_level": 0}
    if cn is not None:
        cert, key = server.certs[cn]
        config.update({"ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
    return config


def _produce(config: dict, topic: str, values: list[bytes]) -> list:
    """The delivery errors (None: delivered) of producing ``values``."""
    outcome = []
    producer = confluent_kafka.Producer(config)
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(20)
    assert len(outcome) == len(values), "delivery reports missing"
    return outcome


def _consume(config: dict, topic: str, count: int, seconds: float = 20) -> list[bytes]:
    consumer = confluent_kafka.Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                                         "auto.offset.reset": "earliest"})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + seconds
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got.append(message.value())
        return got
    finally:
        consumer.close()


def test_kafka_ssl_through_offload_with_the_certificate_cn_as_principal(offloaded, pki):
    topic = f"offload-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(_ssl(offloaded, pki, "admin"))  # a superuser by its certificate's CN
    for future in admin.create_acls([AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                                                "User:writer", "*", AclOperation.WRITE,
                                                AclPermissionType.ALLOW)]).values():
        future.result(timeout=20)
    values = [f"m{i}".encode() * 100 for i in range(200)]
    assert _produce(_ssl(offloaded, pki, "writer"), topic, values) == [None] * len(values)
    refused = _produce(_ssl(offloaded, pki, "stranger"), topic, [b"x"])[0]
    assert refused is not None and refused.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _produce(_ssl(offloaded, pki, None), topic, [b"x"])[0].code() \
        == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED  # no certificate: no principal
    assert _consume(_ssl(offloaded, pki, "admin"), topic, len(values)) == values


def _sasl_ssl(server, pki, password: str) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{server.tls_ports['kafka_sasl_ssl']}", "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "PLAIN", "sasl.username": "admin", "sasl.password": password,
            "ssl.ca.location": str(pki.ca), "ssl.endpoint.identification.algorithm": "none",
            "socket.timeout.ms": 5000, "message.timeout.ms": 8000, "log_level": 0}


def test_kafka_sasl_ssl_login_through_offload(offloaded, pki):
    topic = f"offload-sasl-{uuid.uuid4().hex[:8]}"
    token = jwt.encode({"sub": "admin"}, SECRET, algorithm="HS256")
    config = _sasl_ssl(offloaded, pki, f"token:{token}")
    assert _produce(config, topic, [b"a", b"b"]) == [None, None]
    assert _consume(config, topic, 2) == [b"a", b"b"]
    wrong = jwt.encode({"sub": "admin"}, os.urandom(32), algorithm="HS256")
    assert _produce(_sasl_ssl(offloaded, pki, f"token:{wrong}"), topic, [b"c"])[0] is not None


def _pulsar(server, pki, cn: str):
    cert, key = server.certs[cn]
    return pulsar.Client(f"pulsar+ssl://localhost:{server.tls_ports['pulsar_tls']}",
                         tls_trust_certs_file_path=str(pki.ca), tls_validate_hostname=True,
                         authentication=pulsar.AuthenticationTLS(str(cert), str(key)), **FAST)


def test_pulsar_tls_through_offload_with_the_role_of_the_certificate_cn(offloaded, pki):
    topic = f"persistent://public/default/offload-{uuid.uuid4().hex[:8]}"
    client = _pulsar(offloaded, pki, "admin")
    try:
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        for i in range(50):
            producer.send(f"p{i}".encode() * 300)
        assert [consumer.receive(10_000).data() for _ in range(50)] == [f"p{i}".encode() * 300 for i in range(50)]
    finally:
        client.close()
    stranger = _pulsar(offloaded, pki, "stranger")  # authenticated by its CN, but granted nothing
    try:
        with pytest.raises(pulsar.AuthorizationError):
            stranger.create_producer(topic)
    finally:
        stranger.close()


# -- lifecycle --------------------------------------------------------------------------------------

def _workers(pid: int) -> set[int]:
    """The TLS offload workers among ``pid``'s children (live ones)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z" and int(fields[1]) == pid and b"nereus.tls_offload.worker" in cmdline:
            found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_workers_are_replaced_and_leave_with_a_killed_broker(tmp_path, pki):
    port = free_port()
    server = _start(tmp_path, f"""
tlsCertificateFilePath={pki.server_cert}
tlsKeyFilePath={pki.server_key}
kafkaListeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:{port}
tlsOffloadProcesses=2
""")
    config = {"bootstrap.servers": f"localhost:{port}", "security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
              "socket.timeout.ms": 5000, "message.timeout.ms": 8000, "log_level": 0}
    try:
        workers = wait_until(lambda: len(_workers(server.proc.pid)) == 2 and _workers(server.proc.pid), "two workers")
        victim = min(workers)
        os.kill(victim, 9)
        wait_until(lambda: victim not in _workers(server.proc.pid) and len(_workers(server.proc.pid)) == 2,
              "a replacement worker")
        for _ in range(3):  # new connections, whichever worker accepts them
            assert _produce(config, "after-worker-kill", [b"v"]) == [None]
        workers = _workers(server.proc.pid)
        server.kill()
        wait_until(lambda: not any(_alive(pid) for pid in workers), "the workers to exit after the broker's SIGKILL")
        server.start()  # the same ports
        assert _produce(config, "after-broker-kill", [b"w"]) == [None]
        assert _consume(config, "after-broker-kill", 1) == [b"w"]
        assert "exited with code" in server.log.read_text()  # the replaced worker was logged
    finally:
        server.kill()


def _api_versions(port: int, ca: Path, source: str) -> bytes:
    """What the broker answers a Kafka ApiVersions request on a TLS connection from ``source`` (b"": closed)."""
    context = ssl.create_default_context(cafile=str(ca))
    raw = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    sock = context.wrap_socket(raw, server_hostname="localhost")
    request = struct.pack(">hhih", 18, 0, 7, 4) + b"test"
    try:
        sock.sendall(struct.pack(">i", len(request)) + request)
        return sock.recv(4096)
    except (ConnectionError, ssl.SSLError):
        return b""
    finally:
        OPEN.append(sock)  # held open: it counts against its address until the test ends


OPEN: list = []


def test_connection_limits_count_the_client_address_not_the_worker(tmp_path, pki):
    port = free_port()
    server = _start(tmp_path, f"""
tlsCertificateFilePath={pki.server_cert}
tlsKeyFilePath={pki.server_key}
kafkaListeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:{port}
maxConnectionsPerIp=1
tlsOffloadProcesses=1
""")
    try:
        def served_first() -> bool:  # answered: its correlation id
            if _api_versions(port, pki.ca, "127.0.0.1")[4:8] == struct.pack(">i", 7):
                return True
            OPEN.pop().close()  # refused: the start-up check's connection to the Kafka port may still count
            return False

        wait_until(served_first, "the first connection from 127.0.0.1 to be served")
        assert _api_versions(port, pki.ca, "127.0.0.1") == b""  # a second one from 127.0.0.1: refused
        assert _api_versions(port, pki.ca, "127.0.0.2")[4:8] == struct.pack(">i", 7)  # another address: served
        for sock in OPEN:  # the clients close: the broker hears of it and releases their addresses
            sock.close()
        OPEN.clear()

        def served_again() -> bool:
            if _api_versions(port, pki.ca, "127.0.0.1")[4:8] == struct.pack(">i", 7):
                return True
            OPEN.pop().close()  # refused: the old connection still counts
            return False

        wait_until(served_again, "the closed connection to be released")
        # The broker closes a connection (a frame of -1 bytes): the client sees the end of it.
        context = ssl.create_default_context(cafile=str(pki.ca))
        with context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(
                "127.0.0.3", 0)), server_hostname="localhost") as sock:
            sock.sendall(struct.pack(">i", -1))
            try:
                assert sock.recv(100) == b""
            except ConnectionResetError:
                pass
    finally:
        for sock in OPEN:
            sock.close()
        OPEN.clear()
        assert server.stop() == 0, server.log.read_text()[-3000:]


# -- flow control -------------------------------------------------------------------------------------

def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _read_frame(sock) -> int:
    """Read one size-prefixed Kafka response whole; its size."""
    head = bytearray()
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    size = struct.unpack(">i", head)[0]
    body, got = bytearray(size), 0
    view = memoryview(body)
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        assert n, "closed by the broker"
        got += n
    return size


def test_a_client_that_reads_nothing_is_not_buffered_by_the_worker(tmp_path, pki):
    """The relay reads from the broker only while the client takes what it is sent: 20 responses
    of 10 MB for a client that reads nothing stay with the broker (its connection stops reading
    requests), not in the worker's memory; read later, all of them arrive whole."""
    port = free_port()
    server = _start(tmp_path, f"""
tlsCertificateFilePath={pki.server_cert}
tlsKeyFilePath={pki.server_key}
kafkaListeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:{port}
tlsOffloadProcesses=1
""")
    topic = f"flow-{uuid.uuid4().hex[:8]}"
    sock = None
    try:
        assert _produce({"bootstrap.servers": server.bootstrap, "log_level": 0}, topic,
                        [os.urandom(100_000) for _ in range(100)]) == [None] * 100
        (worker,) = wait_until(lambda: _workers(server.proc.pid), "the worker")
        before = _rss_mib(worker)
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.connect(("127.0.0.1", port))
        sock = ssl.create_default_context(cafile=str(pki.ca)).wrap_socket(raw, server_hostname="localhost")
        kafka = RawKafka.over(sock)
        cls = load_request_schema(1, 12)
        part = make(nested(cls, "FetchPartition"), partition=0, current_leader_epoch=-1, fetch_offset=0,
                    last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=64 << 20)
        frames = [kafka.frame(1, 12, cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
                              max_bytes=64 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                              topics=(make(nested(cls, "FetchTopic"), topic=topic, partitions=(part,)),),
                              forgotten_topics_data=(), rack_id="") for _ in range(20)]
        sock.sendall(b"".join(frames))
        # Unbounded relaying would take the 200 MB of responses into the worker within this
        # window; bounded, it holds about its write limit. (The window only looks for growth:
        # a slow machine cannot make it fail wrongly.)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert _rss_mib(worker) - before < 50, "the worker buffers what its client does not read"
            time.sleep(0.1)
        sizes = [_read_frame(sock) for _ in frames]
        assert all(size > 10_000_000 for size in sizes), sizes
    finally:
        if sock is not None:
            sock.close()
        server.kill()
