"""Fixtures for the Pulsar codec tests.

``FakeBroker`` is a tiny asyncio TCP server that speaks only through
nereus.codec.pulsar: it decodes what a real client sends and answers with
frames our encoders build. It exists so the official ``pulsar-client``
(C++ core) can check our codec; it is not a broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from nereus.codec.pulsar import FrameDecoder, encode_command, pb, type_name, wrap

SERVER_PROTOCOL_VERSION = 21


class FakeBroker:
    """Answers the handshake, lookups, producer and consumer set-up.

    ``frames`` records every frame received, in order. ``on_flow`` (if set)
    is called with the StreamWriter the first time a consumer sends FLOW, so
    a test can push MESSAGE frames. ``acks`` collects ACK commands.
    """

    def __init__(self) -> None:
        self.frames: list = []
        self.acks: list[pb.CommandAck] = []
        self.on_flow: Callable[[asyncio.StreamWriter, int], None] | None = None
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        self.connections = 0
        self.acked = asyncio.Event()
        self._flowed = False

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    def of_type(self, name: str) -> list:
        return [f for f in self.frames if type_name(f.type) == name]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                decoder.receive_data(data)
                for frame in decoder:
                    self.frames.append(frame)
                    reply = self._reply(frame, writer)
                    if reply is not None:
                        writer.write(encode_command(reply))
                    if type_name(frame.type) == "CONNECT":
                        # Probe keep-alive: the client must answer PONG.
                        writer.write(encode_command(wrap(pb.CommandPing())))
        except ConnectionError:
            pass
        finally:
            writer.close()

    def _reply(self, frame, writer: asyncio.StreamWriter) -> pb.BaseCommand | None:
        name = type_name(frame.type)
        cmd = frame.body
        if name == "CONNECT":
            return wrap(
                pb.CommandConnected(
                    server_version="nereus-test",
                    protocol_version=min(cmd.protocol_version, SERVER_PROTOCOL_VERSION),
                    max_message_size=5 * 1024 * 1024,
                )
            )
        if name == "PARTITIONED_METADATA":
            return wrap(
                pb.CommandPartitionedTopicMetadataResponse(
                    request_id=cmd.request_id,
                    partitions=0,
                    response=pb.CommandPartitionedTopicMetadataResponse.Success,
                )
            )
        if name == "LOOKUP":
            return wrap(
                pb.CommandLookupTopicResponse(
                    request_id=cmd.request_id,
                    response=pb.CommandLookupTopicResponse.Connect,
                    brokerServiceUrl=self.url,
                    authoritative=True,
                )
            )
        if name == "PRODUCER":
            return wrap(
                pb.CommandProducerSuccess(request_id=cmd.request_id, producer_name="nereus-prod", last_sequence_id=-1)
            )
        if name == "SEND":
            # Message ids encode the sequence id so tests can check the
            # client read our receipt: ledger 7, entry = sequence id.
            return wrap(
                pb.CommandSendReceipt(
                    producer_id=cmd.producer_id,
                    sequence_id=cmd.sequence_id,
                    message_id=pb.MessageIdData(ledgerId=7, entryId=cmd.sequence_id),
                )
            )
        if name in ("SUBSCRIBE", "CLOSE_PRODUCER", "CLOSE_CONSUMER", "UNSUBSCRIBE", "SEEK"):
            return wrap(pb.CommandSuccess(request_id=cmd.request_id))
        if name == "PING":
            return wrap(pb.CommandPong())
        if name == "FLOW" and not self._flowed and self.on_flow is not None:
            self._flowed = True
            self.on_flow(writer, cmd.consumer_id)
        if name == "ACK":
            self.acks.append(cmd)
            self.acked.set()
        return None


@pytest.fixture
async def fake_broker():
    broker = FakeBroker()
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


@pytest.fixture(scope="session")
def pulsar_lib():
    """The official ``pulsar-client`` package (skips if it is not installed)."""
    pulsar = pytest.importorskip("pulsar")
    if not hasattr(pulsar, "Client"):
        # Run from inside tests/, 'import pulsar' finds this test package.
        pytest.skip(f"'import pulsar' found {pulsar.__file__}, not pulsar-client: run pytest from the repo root")
    return pulsar


@pytest.fixture(scope="session")
def pulsar_client_factory(pulsar_lib):
    """Build official-client instances aimed at a FakeBroker."""
    pulsar = pulsar_lib

    def make(url: str):
        return pulsar.Client(
            url,
            operation_timeout_seconds=5,
            connection_timeout_ms=3000,
            io_threads=1,
            message_listener_threads=1,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )

    return make
