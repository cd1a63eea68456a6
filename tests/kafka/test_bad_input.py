"""Malformed frames, unknown APIs, oversized requests, corrupt batches and bad sequences."""

from __future__ import annotations

import struct

import pytest

from nereus.codec.kafka.records import Record, build_batch

from .raw import RawKafka


def _batch(n: int = 3, **kw) -> bytes:
    return build_batch([Record(i, 1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i) for i in range(n)], **kw)


def _closed(raw: RawKafka) -> bool:
    try:
        raw.recv_frame()
    except (ConnectionError, OSError):
        return True
    return False


def test_api_versions_and_unknown_version(broker):
    raw = RawKafka(broker.bootstrap)
    resp = raw.request(18, 3, client_software_name="raw", client_software_version="1")
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert resp.error_code == 0 and keys[0] == (3, 13) and keys[1] == (4, 17)
    # ApiVersions v99: answered in v0 with UNSUPPORTED_VERSION (35)
    raw.send_raw(struct.pack(">ihhih", 10, 18, 99, 77, -1))
    frame = raw.recv_frame()
    assert struct.unpack_from(">ih", frame, 0) == (77, 35)
    raw.close()


@pytest.mark.parametrize("frame", [
    struct.pack(">ihhih", 10, 999, 0, 1, -1),  # unknown API key
    struct.pack(">ihhih", 10, 0, 99, 1, -1),  # unknown Produce version
    struct.pack(">i", 12) + b"\x00\x03\x00\x09" + b"\xff" * 8,  # garbage Metadata body
    struct.pack(">i", 1 << 30),  # oversized
    struct.pack(">i", -5),
    # Metadata requests of a few bytes claiming 2**31-1 and 2**32-2 topics: decoding them as
    # they are allocates 16 and 32 GiB (the process aborts where that much cannot be had)
    struct.pack(">ihhih", 14, 3, 1, 1, -1) + struct.pack(">i", 0x7FFFFFFF),
    struct.pack(">ihhihb", 16, 3, 9, 1, -1, 0) + b"\xff\xff\xff\xff\x0f",
])
def test_bad_frames_close_the_connection(broker, frame):
    raw = RawKafka(broker.bootstrap)
    raw.send_raw(frame)
    assert _closed(raw)
    ok = RawKafka(broker.bootstrap)  # the broker is still serving
    assert ok.request(18, 3, client_software_name="raw", client_software_version="1").error_code == 0
    ok.close()


def test_corrupt_batch_is_rejected_and_nothing_stored(broker, topic):
    raw = RawKafka(broker.bootstrap)
    assert raw.metadata([topic]).topics[0].error_code == 0
    good = _batch()
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # breaks the CRC-32C
    assert raw.produce(topic, 0, bytes(bad)).error_code == 2  # CORRUPT_MESSAGE
    assert raw.produce(topic, 0, good[:40]).error_code == 2  # truncated
    old = bytearray(good)
    old[16] = 1  # magic v1
    assert raw.produce(topic, 0, bytes(old)).error_code in (2, 43)
    resp = raw.produce(topic, 0, good)
    assert resp.error_code == 0 and resp.base_offset == 0  # nothing was stored before
    assert raw.produce(topic, 7, good).error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    raw.close()


def test_idempotent_sequences(broker, topic):
    raw = RawKafka(broker.bootstrap)
    raw.metadata([topic])
    pid = raw.request(22, 4, transactional_id=None, transaction_timeout=__import__("datetime").timedelta(seconds=60),
                      producer_id=-1, producer_epoch=-1)
    assert pid.error_code == 0 and pid.producer_id >= 0
    p, e = pid.producer_id, pid.producer_epoch
    first = raw.produce(topic, 0, _batch(3, producer_id=p, producer_epoch=e, base_sequence=0))
    assert (first.error_code, first.base_offset) == (0, 0)
    again = raw.produce(topic, 0, _batch(3, producer_id=p, producer_epoch=e, base_sequence=0))
    assert (again.error_code, again.base_offset) == (0, 0)  # a retry: the original's offset
    gap = raw.produce(topic, 0, _batch(2, producer_id=p, producer_epoch=e, base_sequence=10))
    assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    nxt = raw.produce(topic, 0, _batch(2, producer_id=p, producer_epoch=e, base_sequence=3))
    assert (nxt.error_code, nxt.base_offset) == (0, 3)
    for s in range(5, 35, 5):  # push the first batches out of the duplicate cache
        assert raw.produce(topic, 0, _batch(5, producer_id=p, producer_epoch=e, base_sequence=s)).error_code == 0
    old = raw.produce(topic, 0, _batch(2, producer_id=p, producer_epoch=e, base_sequence=1))
    assert old.error_code == 46  # DUPLICATE_SEQUENCE_NUMBER
    bumped = raw.request(22, 4, transactional_id=None, transaction_timeout=__import__("datetime").timedelta(seconds=60),
                         producer_id=p, producer_epoch=e)
    assert (bumped.producer_id, bumped.producer_epoch) == (p, e + 1)
    new = raw.produce(topic, 0, _batch(1, producer_id=p, producer_epoch=e + 1, base_sequence=0))
    assert new.error_code == 0
    fenced = raw.produce(topic, 0, _batch(1, producer_id=p, producer_epoch=e, base_sequence=35))
    assert fenced.error_code == 47  # INVALID_PRODUCER_EPOCH
    raw.close()


@pytest.mark.parametrize("frame", [
    # Produce v3: transactional_id null, acks -1, timeout 1000, topic_data null (i32 -1)
    struct.pack(">hhihhhii", 0, 3, 41, -1, -1, -1, 1000, -1),
    # Produce v9 (flexible): compact null transactional_id and topic_data (varint 0)
    struct.pack(">hhihbbhibb", 0, 9, 42, -1, 0, 0, -1, 1000, 0, 0),
    # Fetch v4: topics null
    struct.pack(">hhihiiiibi", 1, 4, 43, -1, -1, 500, 1, 1 << 20, 0, -1),
])
def test_null_in_a_non_nullable_array_is_malformed(broker, frame):
    raw = RawKafka(broker.bootstrap)
    raw.send_raw(struct.pack(">i", len(frame)) + frame)
    assert _closed(raw)
    ok = RawKafka(broker.bootstrap)
    assert ok.request(18, 3, client_software_name="raw", client_software_version="1").error_code == 0
    ok.close()
    log = broker.log.read_text()
    assert "not nullable" in log
    assert "Traceback" not in log, log[-3000:]
