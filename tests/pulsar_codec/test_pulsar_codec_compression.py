"""Compression codecs in Pulsar's wire formats."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nereus.codec.pulsar import DecompressionFailed, UnsupportedCompression, compress, decompress, pb

CODECS = [pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]
data = st.one_of(st.binary(max_size=2000), st.binary(max_size=20).map(lambda b: b * 50))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CODECS), data)
def test_round_trip(codec, raw):
    packed = compress(codec, raw)
    assert bytes(decompress(codec, packed, len(raw))) == raw
    assert bytes(decompress(codec, memoryview(packed), len(raw))) == raw


def test_none_passes_through():
    raw = memoryview(b"abc")
    assert decompress(pb.NONE, raw, 3) is raw
    assert compress(pb.NONE, raw) == b"abc"


def test_wire_formats():
    raw = b"pulsar " * 40
    # LZ4: a raw block; no frame magic and no size prefix.
    assert not compress(pb.LZ4, raw).startswith(b"\x04\x22\x4d\x18")
    # ZLIB: a zlib stream that the standard library reads.
    assert zlib.decompress(compress(pb.ZLIB, raw)) == raw
    # ZSTD: a zstd frame.
    assert compress(pb.ZSTD, raw).startswith(b"\x28\xb5\x2f\xfd")
    # SNAPPY: raw format, which starts with the uncompressed length varint.
    assert compress(pb.SNAPPY, raw)[:2] == bytes([len(raw) & 0x7F | 0x80, len(raw) >> 7])


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("delta", [-1, 1])
def test_size_mismatch(codec, delta):
    raw = b"0123456789" * 20
    with pytest.raises(DecompressionFailed):
        decompress(codec, compress(codec, raw), len(raw) + delta)


@pytest.mark.parametrize("codec", CODECS)
def test_corrupt_input(codec):
    with pytest.raises(DecompressionFailed):
        decompress(codec, b"\xff" * 64, 1000)


@pytest.mark.parametrize("codec", CODECS)
def test_declared_size_is_capped(codec):
    with pytest.raises(DecompressionFailed):
        decompress(codec, b"", 2**31, max_size=1 << 20)


@pytest.mark.parametrize("codec", [5, 99, -1])
def test_unknown_codec(codec):
    with pytest.raises(UnsupportedCompression):
        compress(codec, b"x")
    with pytest.raises(UnsupportedCompression):
        decompress(codec, b"x", 1)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=100), st.integers(0, 500))
def test_garbage_raises_only_decompression_failed(codec, garbage, size):
    try:
        decompress(codec, garbage, size)
    except DecompressionFailed:
        pass
