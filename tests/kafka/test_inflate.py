"""Decompression of record batches is bounded: bombs are refused before their output exists."""

from __future__ import annotations

import gzip
import struct
import tracemalloc
import zlib

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nereus.codec.kafka.batch import GZIP, LZ4, SNAPPY, ZSTD, InvalidBatch
from nereus.codec.kafka.inflate import RecordsTooLarge, check_decompressed, decompress, decompressed_bound
from nereus.codec.kafka.records import Record, build_batch

from .raw import RawKafka

MB = 1 << 20
COMPRESSORS = {
    GZIP: gzip.compress,
    SNAPPY: lambda d: bytes(cramjam.snappy.compress_raw(d)),
    LZ4: lambda d: bytes(cramjam.lz4.compress(d)),
    ZSTD: lambda d: bytes(cramjam.zstd.compress(d)),
}


def _xerial(data: bytes, block: int = 32 << 10) -> bytes:
    """Snappy in the framed form of Kafka's Java client."""
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), block):
        raw = bytes(cramjam.snappy.compress_raw(data[i:i + block]))
        out += struct.pack(">i", len(raw)) + raw
    return bytes(out)


def _zeros(codec: int, size: int) -> bytes:
    """``size`` zero bytes compressed, built a mebibyte at a time."""
    chunk = bytes(MB)
    if codec == GZIP:
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        return b"".join([packer.compress(chunk) for _ in range(size // MB)] + [packer.flush()])
    packer = (cramjam.zstd if codec == ZSTD else cramjam.lz4).Compressor()
    for _ in range(size // MB):
        packer.compress(chunk)
    return bytes(packer.finish())


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(sorted(COMPRESSORS)), data=st.binary(max_size=300_000) | st.just(bytes(700_000)))
def test_round_trip_and_bound_covers_the_output(codec, data):
    body = COMPRESSORS[codec](data)
    assert decompress(codec, body) == data
    check_decompressed(codec, body)
    if codec != GZIP:
        assert decompressed_bound(codec, body) >= len(data)


def test_other_framings():
    data = bytes(range(256)) * 2000
    assert decompress(SNAPPY, _xerial(data)) == data
    two_frames = COMPRESSORS[ZSTD](data[:1000]) + COMPRESSORS[ZSTD](data[1000:])
    assert decompress(ZSTD, two_frames) == data
    skippable = struct.pack("<II", 0x184D2A5E, 3) + b"abc"
    assert decompressed_bound(ZSTD, skippable + two_frames) == decompressed_bound(ZSTD, two_frames)
    members = gzip.compress(data[:5000]) + gzip.compress(data[5000:])
    assert decompress(GZIP, members) == data


@pytest.mark.parametrize("codec", sorted(COMPRESSORS))
def test_output_over_the_limit_is_refused(codec):
    body = COMPRESSORS[codec](bytes(2 * MB))
    with pytest.raises(RecordsTooLarge):
        decompress(codec, body, limit=MB)
    with pytest.raises(RecordsTooLarge):
        check_decompressed(codec, body, limit=MB)
    assert len(decompress(codec, body, limit=2 * MB)) == 2 * MB


@pytest.mark.parametrize("codec", [GZIP, ZSTD, LZ4])
def test_a_bomb_is_refused_without_its_output_in_memory(codec):
    body = _zeros(codec, 512 * MB)
    assert len(body) < 4 * MB
    tracemalloc.start()
    try:
        with pytest.raises(RecordsTooLarge):
            check_decompressed(codec, body)  # the default bound: 64 MiB
        with pytest.raises(RecordsTooLarge):
            decompress(codec, body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 80 * MB  # at most the bound, never the bomb's 512 MiB


@pytest.mark.parametrize("body", [b"", b"\x04\x22\x4d\x18\x40", b"\x28\xb5\x2f\xfd\x00", b"garbage!"])
def test_broken_framing_is_invalid(body):
    for codec in (LZ4, ZSTD):
        with pytest.raises(InvalidBatch):
            decompress(codec, body)


def test_produced_bomb_is_answered_corrupt_message(broker, topic):
    raw = RawKafka(broker.bootstrap)
    assert raw.metadata([topic]).topics[0].error_code == 0
    bomb = build_batch([Record(0, 1_700_000_000_000, None, bytes(200 * MB))], codec=ZSTD)
    assert len(bomb) < MB
    resp = raw.produce(topic, 0, bomb)
    assert resp.error_code == 2  # CORRUPT_MESSAGE
    assert "decompress" in (resp.error_message or "")
    fine = build_batch([Record(0, 1_700_000_000_000, b"k", bytes(MB))], codec=ZSTD)
    resp = raw.produce(topic, 0, fine)
    assert (resp.error_code, resp.base_offset) == (0, 0)  # nothing of the bomb was stored
    raw.close()
