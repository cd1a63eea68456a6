"""A small blocking Pulsar client with transactions, built on nereus.codec.pulsar.

The official Python client has no transaction API, so tests drive the transaction
commands with this one, in the order the official Java client sends them:
PARTITIONED_METADATA and LOOKUP of the coordinator topic, TC_CLIENT_CONNECT_REQUEST,
NEW_TXN, ADD_PARTITION_TO_TXN before the first SEND to a partition,
ADD_SUBSCRIPTION_TO_TXN before the first ACK on a subscription, END_TXN.
"""

from __future__ import annotations

import itertools
import socket
import time
from collections import deque

from nereus.codec.pulsar import FrameDecoder, encode_command, encode_payload_command, pb, type_name, wrap

TC_ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"


class ServerError(Exception):
    """The broker answered a request with an error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{pb.ServerError.Name(code)}: {message}")
        self.code = code


class TxnClient:
    """One connection; ``request`` sends a command and waits for the answer with its request id."""

    def __init__(self, port: int, *, timeout: float = 10.0, token: str | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.timeout = timeout
        self.decoder = FrameDecoder()
        self._ids = itertools.count(1)
        self._frames: deque = deque()  # received, not yet taken
        connect = pb.CommandConnect(client_version="nereus-txn-test", protocol_version=21)
        if token is not None:
            connect.auth_method_name, connect.auth_data = "token", token.encode()
        self._send(wrap(connect))
        self._take(lambda f: type_name(f.type) == "CONNECTED")

    # -- plumbing ---------------------------------------------------------------------------
    def _send(self, command) -> None:
        self.sock.sendall(encode_command(command))

    def _read_more(self, deadline: float) -> None:
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = self.sock.recv(1 << 16)
        except socket.timeout:
            return
        if not data:
            raise ConnectionError("the broker closed the connection")
        self.decoder.receive_data(data)
        while (frame := self.decoder.next_frame()) is not None:
            if type_name(frame.type) == "PING":
                self._send(wrap(pb.CommandPong()))
            else:
                self._frames.append(frame)

    def _take(self, match, timeout: float | None = None):
        """The first received frame ``match`` accepts (waiting for it), or None on timeout."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            for frame in self._frames:
                if match(frame):
                    self._frames.remove(frame)
                    return frame
            if time.monotonic() >= deadline:
                return None
            self._read_more(deadline)

    def request(self, sub, answer: str):
        """Send ``sub`` with a fresh request id; the body of its ``answer`` frame (or ERROR raises)."""
        request_id = next(self._ids)
        sub.request_id = request_id
        self._send(wrap(sub))

        def match(frame) -> bool:
            name = type_name(frame.type)
            return name in (answer, "ERROR") and getattr(frame.body, "request_id", None) == request_id

        frame = self._take(match)
        assert frame is not None, f"no {answer} for request {request_id}"
        body = frame.body
        if type_name(frame.type) == "ERROR":
            raise ServerError(body.error, body.message)
        if body.HasField("error") if "error" in body.DESCRIPTOR.fields_by_name else False:
            raise ServerError(body.error, body.message)
        return body

    # -- the transaction coordinator ------------------------------------------------------
    def connect_coordinator(self) -> int:
        """Find the coordinators as the Java client does; returns how many there are."""
        meta = self.request(pb.CommandPartitionedTopicMetadata(topic=TC_ASSIGN_TOPIC), "PARTITIONED_METADATA_RESPONSE")
        for tc in range(meta.partitions):
            lookup = self.request(pb.CommandLookupTopic(topic=f"{TC_ASSIGN_TOPIC}-partition-{tc}"),
                                  "LOOKUP_RESPONSE")
            assert lookup.response == pb.CommandLookupTopicResponse.Connect, lookup
            self.request(pb.CommandTcClientConnectRequest(tc_id=tc), "TC_CLIENT_CONNECT_RESPONSE")
        return meta.partitions

    def new_txn(self, timeout_ms: int = 60_000, tc_id: int = 0) -> tuple[int, int]:
        r = self.request(pb.CommandNewTxn(txn_ttl_seconds=timeout_ms, tc_id=tc_id), "NEW_TXN_RESPONSE")
        return r.txnid_most_bits, r.txnid_least_bits

    def add_partitions(self, txn: tuple[int, int], partitions: list[str]) -> None:
        self.request(pb.CommandAddPartitionToTxn(txnid_most_bits=txn[0], txnid_least_bits=txn[1],
                                                 partitions=partitions), "ADD_PARTITION_TO_TXN_RESPONSE")

    def add_subscription(self, txn: tuple[int, int], topic: str, subscription: str) -> None:
        self.request(pb.CommandAddSubscriptionToTxn(
            txnid_most_bits=txn[0], txnid_least_bits=txn[1],
            subscription=[pb.Subscription(topic=topic, subscription=subscription)]), "ADD_SUBSCRIPTION_TO_TXN_RESPONSE")

    def end_txn(self, txn: tuple[int, int], commit: bool) -> None:
        self.request(pb.CommandEndTxn(txnid_most_bits=txn[0], txnid_least_bits=txn[1],
                                      txn_action=pb.COMMIT if commit else pb.ABORT), "END_TXN_RESPONSE")

    # -- producing ----------------------------------------------------------------------------
    def create_producer(self, topic: str) -> "TxnProducer":
        producer_id = next(self._ids)
        self.request(pb.CommandProducer(topic=topic, producer_id=producer_id), "PRODUCER_SUCCESS")
        return TxnProducer(self, topic, producer_id)

    # -- consuming ----------------------------------------------------------------------------
    def subscribe(self, topic: str, subscription: str, sub_type: int = pb.CommandSubscribe.Shared,
                  permits: int = 1000) -> "TxnConsumer":
        consumer_id = next(self._ids)
        self.request(pb.CommandSubscribe(topic=topic, subscription=subscription, subType=sub_type,
                                         consumer_id=consumer_id, initialPosition=pb.CommandSubscribe.Earliest),
                     "SUCCESS")
        self._send(wrap(pb.CommandFlow(consumer_id=consumer_id, messagePermits=permits)))
        return TxnConsumer(self, topic, subscription, consumer_id)

    def close(self) -> None:
        self.sock.close()


class TxnProducer:
    def __init__(self, client: TxnClient, topic: str, producer_id: int) -> None:
        self.client, self.topic, self.producer_id = client, topic, producer_id
        self._seq = itertools.count(0)
        self._added: set[tuple[int, int]] = set()

    def send(self, payload: bytes, txn: tuple[int, int] | None = None) -> pb.MessageIdData:
        """Send one message (in ``txn``, adding the partition to it first); its message id."""
        client = self.client
        if txn is not None and txn not in self._added:
            client.add_partitions(txn, [self.topic])
            self._added.add(txn)
        seq = next(self._seq)
        meta = pb.MessageMetadata(producer_name=f"txn-test-{self.producer_id}", sequence_id=seq,
                                  publish_time=int(time.time() * 1000))
        cmd = pb.CommandSend(producer_id=self.producer_id, sequence_id=seq)
        if txn is not None:
            cmd.txnid_most_bits, cmd.txnid_least_bits = txn
            meta.txnid_most_bits, meta.txnid_least_bits = txn
        client.sock.sendall(b"".join(bytes(p) for p in encode_payload_command(wrap(cmd), meta, payload)))

        def match(frame) -> bool:
            return (type_name(frame.type) in ("SEND_RECEIPT", "SEND_ERROR")
                    and frame.body.producer_id == self.producer_id and frame.body.sequence_id == seq)

        frame = client._take(match)
        assert frame is not None, f"no receipt for message {seq}"
        if type_name(frame.type) == "SEND_ERROR":
            raise ServerError(frame.body.error, frame.body.message)
        return frame.body.message_id


class TxnConsumer:
    def __init__(self, client: TxnClient, topic: str, subscription: str, consumer_id: int) -> None:
        self.client, self.topic, self.subscription, self.consumer_id = client, topic, subscription, consumer_id
        self._added: set[tuple[int, int]] = set()

    def receive(self, timeout: float = 10.0):
        """(message id, payload) of the next MESSAGE, or None after ``timeout``."""
        frame = self.client._take(lambda f: type_name(f.type) == "MESSAGE"
                                  and f.body.consumer_id == self.consumer_id, timeout)
        if frame is None:
            return None
        return frame.body.message_id, bytes(frame.payload)

    def ack(self, message_id: pb.MessageIdData, txn: tuple[int, int] | None = None, *,
            cumulative: bool = False) -> None:
        """Acknowledge one message (or all through it); in ``txn``, adding the subscription first
        and waiting for ACK_RESPONSE."""
        client = self.client
        ack_type = pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual
        cmd = pb.CommandAck(consumer_id=self.consumer_id, ack_type=ack_type,
                            message_id=[pb.MessageIdData(ledgerId=message_id.ledgerId, entryId=message_id.entryId)])
        if txn is None:
            client.request(cmd, "ACK_RESPONSE")
            return
        if txn not in self._added:
            client.add_subscription(txn, self.topic, self.subscription)
            self._added.add(txn)
        cmd.txnid_most_bits, cmd.txnid_least_bits = txn
        client.request(cmd, "ACK_RESPONSE")

    def redeliver_unacked(self) -> None:
        self.client._send(wrap(pb.CommandRedeliverUnacknowledgedMessages(consumer_id=self.consumer_id)))

    def close(self) -> None:
        self.client.request(pb.CommandCloseConsumer(consumer_id=self.consumer_id), "SUCCESS")
