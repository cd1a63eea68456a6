"""Connections to one remote cluster, topic lookups there, and producers on its topics.

``ClusterClient`` keeps one connection per remote broker URL (shared by every
producer to it), follows lookup redirects as Pulsar's clients do, and asks for
partitioned metadata. ``RemoteProducer`` sends prepared entries (metadata and
payload as stored) and hands out each SEND's receipt in order.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl

from ...codec.pulsar import Frame, encode_payload_command, pb, wrap
from .connection import ClientConnection, ClientError, ConnectionClosed, parse_service_url

log = logging.getLogger(__name__)

MAX_REDIRECTS = 20
_T = pb.BaseCommand.Type
_RECEIPT, _SEND_ERROR = _T.Value("SEND_RECEIPT"), _T.Value("SEND_ERROR")


class ClusterClient:
    """What a broker needs to reach one remote cluster: its URL, credentials and connections."""

    def __init__(self, service_url: str, *, token: str | None = None, ssl_context: ssl.SSLContext | None = None,
                 timeout: float = 10.0) -> None:
        self.service_url = service_url
        self.tls = parse_service_url(service_url)[1]
        self.token = token
        self.ssl_context = ssl_context
        self.timeout = timeout
        self.cluster = None  # the caller's record of the cluster, if it keeps one here
        self._connections: dict[tuple[str, str | None], asyncio.Future] = {}

    async def connection(self, url: str, proxy_to: str | None = None) -> ClientConnection:
        """The open connection to ``url`` (opened once, shared; a closed one is replaced)."""
        key = (url, proxy_to)
        opening = self._connections.get(key)
        if opening is not None and opening.done() and (opening.exception() is not None
                                                       or opening.result().closed.done()):
            opening = None
        if opening is None:
            opening = self._connections[key] = asyncio.ensure_future(ClientConnection.open(
                url, token=self.token, ssl_context=self.ssl_context, timeout=self.timeout,
                proxy_to_broker_url=proxy_to))
        return await asyncio.shield(opening)

    async def lookup(self, topic: str) -> ClientConnection:
        """A connection to the broker that serves ``topic`` in the remote cluster."""
        url, authoritative = self.service_url, False
        for _ in range(MAX_REDIRECTS):
            conn = await self.connection(url)
            answer = (await conn.request(lambda rid: pb.CommandLookupTopic(
                topic=topic, request_id=rid, authoritative=authoritative), self.timeout)).body
            if answer.response == pb.CommandLookupTopicResponse.Failed:
                raise ClientError(f"lookup of {topic} failed: {answer.message}", answer.error)
            target = (answer.brokerServiceUrlTls if self.tls and answer.brokerServiceUrlTls
                      else answer.brokerServiceUrl) or url
            if answer.proxy_through_service_url:
                return await self.connection(self.service_url, proxy_to=target)
            if answer.response == pb.CommandLookupTopicResponse.Connect:
                return await self.connection(target)
            url, authoritative = target, answer.authoritative
        raise ClientError(f"lookup of {topic}: too many redirects")

    async def partitions(self, topic: str) -> int:
        """The partition count of ``topic`` in the remote cluster (0: not partitioned)."""
        conn = await self.connection(self.service_url)
        answer = (await conn.request(lambda rid: pb.CommandPartitionedTopicMetadata(
            topic=topic, request_id=rid), self.timeout)).body
        if answer.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
            raise ClientError(f"partitioned metadata of {topic}: {answer.message}", answer.error)
        return answer.partitions

    def close(self) -> None:
        for opening in self._connections.values():
            if opening.done() and opening.exception() is None:
                opening.result().close()
            else:
                opening.cancel()
        self._connections.clear()


class RemoteProducer:
    """A named producer on a remote topic; ``send`` returns a future of the receipt's MessageIdData."""

    def __init__(self, client: ClusterClient, topic: str, name: str) -> None:
        self.client = client
        self.topic = topic
        self.name = name
        self.conn: ClientConnection | None = None
        self.producer_id = 0
        self._pending: collections.deque[tuple[int, asyncio.Future]] = collections.deque()
        self.failed: Exception | None = None
        #: Done (with the reason) once the producer cannot send any more: its connection was
        #: lost, the broker closed it or refused a send.
        self.lost: asyncio.Future = asyncio.get_running_loop().create_future()

    async def open(self) -> int:
        """Create the producer; returns the highest sequence id the remote holds from this name."""
        self.conn = conn = await self.client.lookup(self.topic)
        self.producer_id = conn.next_producer_id()
        conn.producers[self.producer_id] = self._on_frame
        try:
            answer = (await conn.request(lambda rid: pb.CommandProducer(
                topic=self.topic, producer_id=self.producer_id, request_id=rid, producer_name=self.name,
                user_provided_producer_name=True), self.client.timeout)).body
        except BaseException:
            conn.producers.pop(self.producer_id, None)
            raise
        return answer.last_sequence_id

    async def schema_version(self, schema: pb.Schema) -> bytes:
        """The remote topic's version of ``schema``, registering it there if it is new (or ClientError)."""
        if self.conn is None:
            raise ConnectionClosed("producer not open")
        answer = (await self.conn.request(lambda rid: pb.CommandGetOrCreateSchema(
            request_id=rid, topic=self.topic, schema=schema), self.client.timeout)).body
        if answer.HasField("error_code") and answer.error_code:
            raise ClientError(f"schema of {self.topic} refused: {answer.error_message}", answer.error_code)
        return answer.schema_version

    def send(self, metadata: bytes, payload, sequence_id: int, highest_sequence_id: int,
             count: int) -> asyncio.Future:
        """Send one entry now; its receipt (or failure) completes the returned future."""
        future = asyncio.get_running_loop().create_future()
        if self.failed is not None or self.conn is None:
            future.set_exception(self.failed or ConnectionClosed("producer not open"))
            return future
        command = pb.CommandSend(producer_id=self.producer_id, sequence_id=sequence_id, num_messages=count,
                                 highest_sequence_id=highest_sequence_id)
        self.conn.write(encode_payload_command(wrap(command), metadata, payload))
        self._pending.append((sequence_id, future))
        return future

    async def drain(self) -> None:
        if self.conn is not None:
            await self.conn.drain()

    def _on_frame(self, frame: Frame | None) -> None:
        if frame is not None and frame.type == _RECEIPT:
            body = frame.body
            while self._pending:
                sequence_id, future = self._pending[0]
                if sequence_id > body.sequence_id:
                    break  # a receipt of an earlier resend
                self._pending.popleft()
                if not future.done():
                    future.set_result(body.message_id if sequence_id == body.sequence_id else None)
            return
        if frame is None:
            reason: Exception = ConnectionClosed("connection to the remote cluster lost")
        elif frame.type == _SEND_ERROR:
            reason = ClientError(f"send refused: {frame.body.message}", frame.body.error)
        else:  # CLOSE_PRODUCER: the topic moved; look it up again
            reason = ConnectionClosed("the remote broker closed the producer")
        self._fail(reason)

    def _fail(self, reason: Exception) -> None:
        self.failed = self.failed or reason
        if not self.lost.done():
            self.lost.set_result(self.failed)
        if self.conn is not None:
            self.conn.producers.pop(self.producer_id, None)
        while self._pending:
            _, future = self._pending.popleft()
            if not future.done():
                future.set_exception(reason)

    async def close(self) -> None:
        """Close the producer on the remote broker (the shared connection stays)."""
        conn = self.conn
        self._fail(ConnectionClosed("producer closed"))
        if conn is not None and not conn.closed.done():
            try:
                await conn.request(lambda rid: pb.CommandCloseProducer(producer_id=self.producer_id,
                                                                       request_id=rid), 5.0)
            except (ClientError, asyncio.TimeoutError):
                pass


__all__ = ["ClusterClient", "RemoteProducer"]
