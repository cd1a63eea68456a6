"""A client that sends requests and does not read the answers is not read either."""

from __future__ import annotations

import datetime
import socket
import time

import psutil
import pytest
from kio.index import load_request_schema

from nereus.codec.kafka import make, nested
from nereus.codec.kafka.records import Record, build_batch
from tests.kafka.raw import RawKafka
from tests.standalone_process import Standalone

VALUE = 64 << 10
RECORDS = 4  # 256 KiB answered by each Fetch
FETCHES = 400  # about 100 MB of answers if they were all buffered


@pytest.fixture
def server(tmp_path):
    proc = Standalone(tmp_path / "data")
    proc.start()
    yield proc
    alive = proc.alive()
    code = proc.stop()
    assert alive and code == 0, proc.log.read_text()[-3000:]


def _fetch_frame(raw: RawKafka, topic: str) -> bytes:
    cls = load_request_schema(1, 4)
    part = make(nested(cls, "FetchPartition"), partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    return raw.frame(1, 4, replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
                     max_bytes=1 << 20, isolation_level=0,
                     topics=(make(nested(cls, "FetchTopic"), topic=topic, partitions=(part,)),))


def test_unread_fetch_answers_stop_the_reading_not_grow_the_broker(server):
    raw = RawKafka(server.bootstrap)
    topic = "backpressure"
    assert raw.metadata([topic]).topics[0].error_code == 0
    batch = build_batch([Record(i, 1_700_000_000_000, b"k", bytes([i]) * VALUE) for i in range(RECORDS)])
    assert raw.produce(topic, 0, batch).error_code == 0
    broker = psutil.Process(server.proc.pid)
    baseline = broker.memory_info().rss
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    frames = b"".join(_fetch_frame(raw, topic) for _ in range(FETCHES))
    raw.sock.setblocking(False)
    sent, peak = 0, baseline
    deadline = time.monotonic() + 5  # the broker gets this long to read and answer what it will
    while time.monotonic() < deadline:
        if sent < len(frames):
            try:
                sent += raw.sock.send(frames[sent:sent + 65536])
            except BlockingIOError:
                pass
        peak = max(peak, broker.memory_info().rss)
        time.sleep(0.01)
    assert peak - baseline < 48 << 20, f"the broker grew by {(peak - baseline) >> 20} MB"
    raw.sock.setblocking(True)
    raw.sock.settimeout(60)
    if sent < len(frames):
        raw.sock.sendall(frames[sent:])  # it reads again as the answers are taken
    for _ in range(FETCHES):
        frame = raw.recv_frame()
        assert len(frame) > RECORDS * VALUE
    assert raw.metadata([topic]).topics[0].error_code == 0
    raw.close()
