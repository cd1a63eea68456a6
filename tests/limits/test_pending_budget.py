"""maxPendingBytesPerBroker: the bytes pending over all Pulsar and Kafka connections stop their reading."""

from __future__ import annotations

import asyncio
import struct

from nereus.kafka.server.wire.connection import KafkaConnection
from nereus.kafka.server.security.quota_store import QuotaStore
from nereus.kafka.server.security.quotas import ConnectionRates
from nereus.meta import connect
from nereus.net_limits import ConnectionLimits, PendingBudget
from nereus.pulsar.server.connection import ServerConnection

BROKER_LIMIT = 100_000


class Transport:
    """What the connections use of an asyncio transport, recording whether they read."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reading = True

    def get_extra_info(self, name, default=None):
        return ("10.0.0.1", self.port) if name == "peername" else default

    def set_write_buffer_limits(self, high=None) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def write(self, data) -> None:
        pass

    def close(self) -> None:
        pass

    abort = close


class Service:
    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.connections = set()
        self.max_request_size = 1 << 20
        self.max_message_size = 1 << 20
        self.keepalive = 3600
        self.sasl = None
        self.authenticator = None
        self.quotas = QuotaStore(connect("embedded://"))  # Kafka's client quotas: none set
        self.connection_rates = ConnectionRates(self.quotas)


def _request(size: int) -> bytes:
    return struct.pack(">i", size) + b"\0" * size  # only framed here: no request is served in these tests


def test_many_connections_within_their_own_limits_are_stopped_by_the_broker_limit():
    async def run():
        budget = PendingBudget(BROKER_LIMIT)
        kafka = Service(ConnectionLimits(max_pending_bytes=1 << 20, protocol="kafka", budget=budget))
        pulsar = Service(ConnectionLimits(max_pending_bytes=1 << 20, protocol="pulsar", budget=budget))
        conns, transports = [], []
        for i in range(3):
            conn, transport = KafkaConnection(kafka), Transport(i)
            conn.connection_made(transport)
            conns.append(conn)
            transports.append(transport)
        producer, producer_transport = ServerConnection(pulsar), Transport(9)
        producer.connection_made(producer_transport)
        try:
            conns[0].data_received(_request(30_000))
            conns[1].data_received(_request(30_000))
            producer.send_started(30_000)  # a Pulsar SEND waiting for storage
            assert budget.total == 90_008 and all(t.reading for t in transports + [producer_transport])
            conns[2].data_received(_request(30_000))  # each connection is far below its own 1 MiB
            assert not transports[2].reading and budget.pauses == 1
            producer.send_started(10)
            assert not producer_transport.reading  # the other protocol's connections stop too
            conns[0].connection_lost(None)  # what a closed connection had pending leaves the total
            assert budget.total == 90_018 and not transports[2].reading
            producer.send_finished(30_000)
            producer.send_finished(10)
            assert budget.total == 60_008 and not transports[2].reading  # above half the limit
            conns[1].connection_lost(None)
            assert budget.total == 30_004
            assert transports[2].reading and producer_transport.reading  # below half: read again
        finally:
            for conn in conns[1:]:
                conn.connection_lost(None)
            producer.connection_lost(None)
        await asyncio.sleep(0)

    asyncio.run(run())
