"""Request frames whose counts or lengths claim more than the frame holds are refused before decoding."""

from __future__ import annotations

import io
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_writer
from kio.static.primitive import Records

from nereus.codec.kafka import MalformedRequest, decode_request
from nereus.codec.kafka.bounds import check_frame
from nereus.codec.kafka.protocol import SUPPORTED, request_schema

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))


def _frame(api_key: int, version: int, body) -> bytes:
    cls = request_schema(api_key, version)
    header_cls = HeaderV2 if cls.__flexible__ else HeaderV1
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=7, client_id="c"))
    entity_writer(cls)(buf, body)
    return buf.getvalue()


@pytest.mark.parametrize("api_key", sorted(SUPPORTED))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_well_formed_request_passes_the_check(api_key, data):
    _name, low, high = SUPPORTED[api_key]
    version = data.draw(st.integers(low, high))
    body = data.draw(st.from_type(request_schema(api_key, version)))
    frame = _frame(api_key, version, body)
    cls = request_schema(api_key, version)
    header_end = check_frame(HeaderV2 if cls.__flexible__ else HeaderV1, frame, 0, header=True)
    assert check_frame(cls, frame, header_end) == len(frame)
    head, decoded = decode_request(frame)
    assert (head.api_key, head.api_version, decoded) == (api_key, version, body)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


HUGE_COUNTS = {
    "legacy array": struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">i", 0x7FFFFFFF),
    "compact array": struct.pack(">hhih", 3, 9, 1, -1) + b"\x00" + _uvarint(0x7FFFFFFF),
    "legacy bytes": (struct.pack(">hhih", 0, 3, 1, -1) + struct.pack(">h", -1) + struct.pack(">hi", 1, 1000)
                     + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1)
                     + struct.pack(">i", 0) + struct.pack(">i", 0x7FFFFFF0)),
    "tagged fields": struct.pack(">hhih", 18, 3, 1, -1) + _uvarint(0x7FFFFFFF),
}


@pytest.mark.parametrize("name", sorted(HUGE_COUNTS))
def test_counts_beyond_the_frame_are_refused_without_allocating(name):
    # In a child process with little address space: decoding the frame directly would
    # allocate for the claimed count (the process aborts); checked first, it is refused.
    code = ("import resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))\n"
            "from nereus.codec.kafka import MalformedRequest, decode_request\n"
            "try:\n"
            f"    decode_request({HUGE_COUNTS[name]!r})\n"
            "except MalformedRequest as exc:\n"
            "    print('refused:', exc)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("refused:"), result.stdout
    with pytest.raises(MalformedRequest):
        decode_request(HUGE_COUNTS[name])
