"""The record bytes of a batch, copied at most once from the socket to the WAL object and never
from the stored entry to the socket: counted through the real connection code.

A batch with one value of an unusual size goes through ``KafkaConnection.data_received`` as
a transport hands it over, the broker's answer is taken from ``writelines`` (a 3.12 selector
transport passes that list to ``sendmsg``). Copies are counted with tracemalloc: between two
consecutive profiler events (every call and return of the event loop's thread), a rise of the
traced memory's peak by about the batch's size is an allocation of a copy. (Reads are at most
256 KiB, far from the batch's size, so a transport's read buffers are not counted.)
"""

from __future__ import annotations

import asyncio
import datetime
import io
import struct
import sys
import tracemalloc

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from nereus.codec.kafka import make, nested
from nereus.codec.kafka.records import Record, build_batch
from nereus.kafka.server import KafkaService
from nereus.kafka.server.wire.connection import KafkaConnection
from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.storage import StreamStorage
from nereus.topics import TopicRegistry

VALUE_SIZE = 700_001  # under the topics' default max.message.bytes
READ_SIZE = 256 * 1024  # what an asyncio selector transport reads at most at once
TOPIC = "copies"


class CopyCounter:
    """Allocations of at least ``size`` bytes made by this thread while entered."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.copies = 0
        self.sites: list[str] = []

    def __enter__(self) -> "CopyCounter":
        tracemalloc.start()
        self._level = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        sys.setprofile(self._event)
        return self

    def _event(self, frame, event, arg) -> None:
        current, peak = tracemalloc.get_traced_memory()
        grown = int((peak - self._level) / self.size + 0.25)  # what else the interval freed blurs it a little
        if grown > 0:
            self.copies += grown
            self.sites.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {event}")
        self._level = current
        tracemalloc.reset_peak()

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)
        tracemalloc.stop()


class Transport(asyncio.Transport):
    """Takes what the connection writes, as the list it hands to ``writelines``."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[list] = []
        self.closed = False

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def writelines(self, chunks) -> None:
        self.written.append(list(chunks))

    def write(self, data) -> None:
        self.written.append([data])

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    abort = close


@pytest.fixture
async def service(tmp_path):
    engine = open_engine(None, shards=1)
    meta = engine.client(namespace="default")
    # file://: its put writes the object's chunks with writev (memory:// joins them, a copy)
    storage = StreamStorage(meta, open_object_store(f"file://{tmp_path}"), node_id="b0")
    registry = TopicRegistry(storage, meta)
    kafka = KafkaService(storage, meta, registry, port=0)
    await kafka.catalog.create(TOPIC, 1)
    yield kafka
    await registry.close()
    await storage.close()
    await meta.close()
    await engine.close()


def request(api_key: int, version: int, correlation_id: int, **fields) -> bytes:
    cls = load_request_schema(api_key, version)
    header = HeaderV2 if cls.__flexible__ else HeaderV1
    buf = io.BytesIO()
    entity_writer(header)(buf, header(request_api_key=api_key, request_api_version=version,
                                      correlation_id=correlation_id, client_id="copies"))
    entity_writer(cls)(buf, make(cls, **fields))
    return struct.pack(">i", buf.tell()) + buf.getvalue()


def produce_request(version: int, batch: bytes) -> bytes:
    cls = load_request_schema(0, version)
    part = nested(cls, "PartitionProduceData")(index=0, records=batch)
    return request(0, version, 1, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
                   topic_data=(nested(cls, "TopicProduceData")(name=TOPIC, partition_data=(part,)),))


def fetch_request(version: int) -> bytes:
    cls = load_request_schema(1, version)
    part = make(nested(cls, "FetchPartition"), partition=0, fetch_offset=0, partition_max_bytes=4 << 20,
                current_leader_epoch=-1, log_start_offset=-1, last_fetched_epoch=-1)
    return request(1, version, 2, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=8 << 20,
                   isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                   topics=(make(nested(cls, "FetchTopic"), topic=TOPIC, partitions=(part,)),), forgotten_topics_data=())


def response(api_key: int, version: int, chunks: list):
    frame = b"".join(chunks)[4:]
    cls = load_response_schema(api_key, version)
    header = 5 if cls.__flexible__ and api_key != 18 else 4  # correlation id (+ empty tagged fields)
    return entity_reader(cls)(frame, header)[0]


async def answer(conn: KafkaConnection, transport: Transport, frame: bytes, read_size: int) -> list:
    """What the broker writes for ``frame``, received in reads of ``read_size`` bytes."""
    for i in range(0, len(frame), read_size):
        conn.data_received(frame[i:i + read_size])
    for _ in range(2000):
        if transport.written:
            return transport.written.pop()
        await asyncio.sleep(0.005)
    raise AssertionError("no answer")


@pytest.mark.parametrize("produce_version, fetch_version", [(3, 4), (9, 12)])
async def test_a_batch_is_copied_once_to_the_wal_and_never_to_the_consumer(service, produce_version, fetch_version):
    batch = build_batch([Record(0, 1_700_000_000_000, b"k", b"v" * VALUE_SIZE)])
    transport = Transport()
    conn = KafkaConnection(service)
    conn.connection_made(transport)
    produce = produce_request(produce_version, batch)
    with CopyCounter(len(batch)) as produced:
        written = await answer(conn, transport, produce, len(produce))  # one read holds the frame
    (topic,) = response(0, produce_version, written).responses
    assert topic.partition_responses[0].error_code == 0
    assert produced.copies <= 1, produced.sites  # the stored entry: header and batch in one piece

    fetch = fetch_request(fetch_version)
    with CopyCounter(len(batch)) as fetched:
        chunks = await answer(conn, transport, fetch, len(fetch))
    assert fetched.copies == 0, fetched.sites
    assert any(isinstance(c, memoryview) and c.nbytes > len(batch) - 64 for c in chunks)  # a view of the entry
    records = response(1, fetch_version, chunks).responses[0].partitions[0].records
    assert records[16:] == batch[16:] and records[:8] == bytes(8)  # base offset 0, leader epoch as served
    conn.connection_lost(None)


async def test_a_frame_spanning_reads_is_joined_once_more(service):
    """The frame lands in several reads: the framer joins it, then the stored entry copies it."""
    batch = build_batch([Record(0, 1_700_000_000_000, b"k", b"v" * VALUE_SIZE)])
    transport = Transport()
    conn = KafkaConnection(service)
    conn.connection_made(transport)
    produce = produce_request(9, batch)
    with CopyCounter(len(batch)) as produced:
        await answer(conn, transport, produce, READ_SIZE)
    assert produced.copies <= 2, produced.sites
    conn.connection_lost(None)
