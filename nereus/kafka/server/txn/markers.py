"""A coordinator's WriteTxnMarkers to the broker that owns a partition (broker to broker).

When a transaction ends, a partition owned by another broker gets its marker from
that broker: the coordinator sends it WriteTxnMarkers (API 27) on its PLAINTEXT Kafka
listener, as a Kafka coordinator sends markers to partition leaders. Brokers have no
credentials of their own for each other's SASL/TLS listeners, so a broker with
authorization enabled (or an owner without a PLAINTEXT listener) does not forward:
the owner's coordinator writes the marker when the decision's change notification reaches
it (``TransactionCoordinator.follow_decisions``), and the deciding coordinator closes the
record a moment later.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import logging
import struct

from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.serial import entity_reader, entity_writer

from ....tasks import wait_for
from ....topics.placement import BrokerAddress
from ....transactions.errors import MarkerNotWritten
from ....codec.kafka import make, nested
from ....codec.kafka.protocol import request_schema, response_schema
from ..catalog.catalog import Catalog

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = 27
VERSION = 1
TIMEOUT_SECONDS = 10.0
_SIZE = struct.Struct(">i")
_correlation = itertools.count(1)


def encode_request(pid: int, epoch: int, commit: bool, topic: str, index: int, correlation_id: int,
                   sequence: int = 0) -> bytes:
    """A WriteTxnMarkers v1 frame (size prefix included) with one marker for one partition.

    Its ``coordinator_epoch`` carries the transaction's sequence number: between Nereus brokers
    it names the transaction the marker ends (see ``Participants.complete_partition``)."""
    cls = request_schema(WRITE_TXN_MARKERS, VERSION)
    marker = make(nested(cls, "WritableTxnMarker"), producer_id=pid, producer_epoch=epoch, transaction_result=commit,
                  coordinator_epoch=sequence & 0x7FFFFFFF,
                  topics=(make(nested(cls, "WritableTxnMarkerTopic"), name=topic, partition_indexes=(index,)),))
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=WRITE_TXN_MARKERS, request_api_version=VERSION,
                                              correlation_id=correlation_id, client_id="nereus-txn-coordinator"))
    entity_writer(cls)(buf, make(cls, markers=(marker,)))
    body = buf.getvalue()
    return _SIZE.pack(len(body)) + body


def decode_codes(frame: bytes, correlation_id: int) -> list[int]:
    """The partition error codes of a WriteTxnMarkers v1 response frame (size prefix excluded)."""
    header, pos = entity_reader(ResponseHeader)(frame, 0)
    if header.correlation_id != correlation_id:
        raise MarkerNotWritten(f"WriteTxnMarkers answer for correlation id {header.correlation_id}, "
                               f"not {correlation_id}")
    body, _ = entity_reader(response_schema(WRITE_TXN_MARKERS, VERSION))(frame, pos)
    return [int(p.error_code) for m in body.markers for t in m.topics for p in t.partitions]


async def send_marker(owner: BrokerAddress, partition: str, pid: int, epoch: int, commit: bool,
                      sequence: int = 0) -> None:
    """Ask ``owner`` to write the marker of ``pid``'s transaction ``sequence`` into ``partition`` (a stream
    name); raises MarkerNotWritten."""
    found = Catalog.kafka_partition(partition)
    if found is None:
        raise MarkerNotWritten(f"{partition} has no Kafka name: its owner {owner.name} completes it")
    if not owner.kafka_port:
        raise MarkerNotWritten(f"{owner.name} has no PLAINTEXT Kafka listener: it completes {partition} itself")
    correlation_id = next(_correlation)
    frame = encode_request(pid, epoch, commit, found[0], found[1], correlation_id, sequence)
    try:
        reader, writer = await wait_for(asyncio.open_connection(owner.kafka_host, owner.kafka_port), TIMEOUT_SECONDS)
    except (OSError, asyncio.TimeoutError) as exc:
        raise MarkerNotWritten(f"{owner.name} at {owner.kafka_address} is not reachable: {exc}") from exc
    try:
        writer.write(frame)
        size = _SIZE.unpack(await wait_for(reader.readexactly(_SIZE.size), TIMEOUT_SECONDS))[0]
        codes = decode_codes(await wait_for(reader.readexactly(size), TIMEOUT_SECONDS), correlation_id)
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
        raise MarkerNotWritten(f"WriteTxnMarkers to {owner.name} failed: {exc}") from exc
    finally:
        writer.close()
    if codes != [0]:
        raise MarkerNotWritten(f"{owner.name} did not write the marker into {partition}: error codes {codes}")
    log.debug("%s: marker of producer %d written by its owner %s", partition, pid, owner.name)


__all__ = ["decode_codes", "encode_request", "send_marker"]
