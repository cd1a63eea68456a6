"""Record batches built by the codec: plain, transactional and control batches read back as written."""

from __future__ import annotations

import struct

from nereus.codec.kafka.batch import split_batches
from nereus.codec.kafka.records import Record, build_batch, decode_records
from nereus.transactions import control_batch


def test_batch_flags_read_back():
    records = [Record(0, 1_000, b"k", b"v", [("h", b"x")]), Record(1, 1_005, None, b"w")]
    for transactional, control in ((False, False), (True, False), (False, True)):
        data = build_batch(records, producer_id=7, producer_epoch=2, base_sequence=3,
                           transactional=transactional, control=control)
        [(header, _)] = split_batches(data)  # checks the CRC-32C and the record count
        assert (header.transactional, header.control) == (transactional or control, control)
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 3)
        assert (header.base_timestamp, header.max_timestamp, header.record_count) == (1_000, 1_005, 2)
        _, back = decode_records(data)
        assert [(r.offset_delta, r.timestamp, r.key, r.value) for r in back] == \
            [(r.offset_delta, r.timestamp, r.key, r.value) for r in records]


def test_marker_is_a_control_batch():
    data = control_batch(12345, 3, True, timestamp_ms=1_700_000_000_000, coordinator_epoch=9)
    [(header, _)] = split_batches(data)
    assert header.control and header.transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.record_count) == (12345, 3, -1, 1)
    _, [marker] = decode_records(data)
    assert struct.unpack(">hh", marker.key) == (0, 1)  # version 0, COMMIT
    assert struct.unpack(">hi", marker.value) == (0, 9)  # version 0, coordinator epoch
