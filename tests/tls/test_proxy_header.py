"""The PROXY v2 header between TLS offload workers and the broker, and the broker's end of such a connection."""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest

from nereus.tls import peer_cert_cn
from nereus.tls_offload.inbound import OffloadedConnection
from nereus.tls_offload.proxy_header import (MAX_BLOCK, PP2_TYPE_SSL, SIGNATURE, HeaderReader, ProxyHeader,
                                             ProxyHeaderError, encode)


def _read(data: bytes) -> tuple[ProxyHeader | None, bytes]:
    reader = HeaderReader()
    return reader.receive(data), reader.rest


def test_an_ipv4_header_with_a_certificate_cn():
    data = encode(("10.1.2.3", 50123), ("127.0.0.1", 9093), tls_version="TLSv1.3", ssl_cn="writer")
    assert data.startswith(SIGNATURE) and data[12] == 0x21 and data[13] == 0x11
    assert _read(data + b"first bytes") == (
        ProxyHeader(("10.1.2.3", 50123), ("127.0.0.1", 9093), True, "TLSv1.3", "writer"), b"first bytes")


def test_ipv6_no_certificate_and_no_tls():
    assert _read(encode(("::1", 1), ("::1", 2)))[0] == ProxyHeader(("::1", 1), ("::1", 2), True, None, None)
    assert _read(encode(("::1", 1), ("::1", 2), tls=False))[0] == ProxyHeader(("::1", 1), ("::1", 2))
    mixed = _read(encode(("127.0.0.1", 5), ("::", 6)))[0]  # an IPv4 client of a dual-stack socket
    assert mixed.source == ("::ffff:7f00:1", 5)


def test_a_non_ascii_cn_arrives_byte_by_byte():
    data = encode(("192.168.0.9", 4000), ("192.168.0.1", 6651), ssl_cn="Grüße-Ω")
    reader = HeaderReader()
    for byte in data[:-1]:
        assert reader.receive(bytes([byte])) is None  # truncated: more is needed
    assert reader.receive(data[-1:] + b"x").ssl_cn == "Grüße-Ω"
    assert reader.rest == b"x"


def _header(block: bytes, version: int = 0x21, family: int = 0x11) -> bytes:
    return SIGNATURE + struct.pack(">BBH", version, family, len(block)) + block


_ADDRESSES = bytes([10, 0, 0, 1, 10, 0, 0, 2]) + struct.pack(">HH", 1, 2)


@pytest.mark.parametrize(("data", "reason"), [
    (b"GET / HTTP/1.1\r\n", "signature"),
    (b"\r\n\r\n\x00\r\nQUIX\n", "signature"),
    (_header(_ADDRESSES, version=0x20), "version/command"),  # LOCAL
    (_header(_ADDRESSES, version=0x11), "version/command"),  # version 1
    (_header(_ADDRESSES, family=0x12), "family"),  # UDP
    (_header(_ADDRESSES, family=0x31), "family"),  # unix
    (_header(_ADDRESSES[:8]), "address block"),
    (_header(_ADDRESSES + bytes([PP2_TYPE_SSL, 0x00])), "truncated TLV"),
    (_header(_ADDRESSES + bytes([PP2_TYPE_SSL, 0x00, 0x40]) + bytes(10)), "overruns"),  # oversized TLV
    (_header(_ADDRESSES + bytes([PP2_TYPE_SSL, 0x00, 0x09, 0x03, 0, 0, 0, 0, 0x22, 0x00, 0x09])), "overruns"),
    (_header(_ADDRESSES + bytes([PP2_TYPE_SSL, 0x00, 0x02, 0x01, 0x00])), "PP2_TYPE_SSL TLV of 2"),
    (_header(_ADDRESSES + bytes([PP2_TYPE_SSL, 0, 8, 3, 0, 0, 0, 0, 0x22, 0, 2])), "TLV 0x22 of 2 bytes overruns"),
    (_header(_ADDRESSES + bytes([PP2_TYPE_SSL, 0, 10, 3, 0, 0, 0, 0, 0x22, 0, 2]) + b"\xff\xfe"), "not utf-8"),
    (SIGNATURE + struct.pack(">BBH", 0x21, 0x11, MAX_BLOCK + 1), "limit"),  # refused before it is all read
])
def test_malformed_headers_are_refused(data, reason):
    with pytest.raises(ProxyHeaderError, match=reason):
        _read(data)


def test_other_tlvs_are_skipped_and_an_unverified_cn_is_not_taken():
    ssl_tlv = bytes([PP2_TYPE_SSL, 0, 13, 0x03]) + struct.pack(">I", 1) + bytes([0x22, 0, 5]) + b"eve!!"
    header = _read(_header(_ADDRESSES + bytes([0x04, 0, 3]) + b"pad" + ssl_tlv))[0]
    assert header.tls and header.ssl_cn is None  # verify != 0: the certificate was not verified


class _Recorder(asyncio.Protocol):
    def __init__(self, seen: asyncio.Queue) -> None:
        self.seen = seen

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.seen.put_nowait(("peer", transport.get_extra_info("peername"), peer_cert_cn(transport)))

    def data_received(self, data: bytes) -> None:
        self.seen.put_nowait(("data", data))
        self.transport.write(data.upper())


def test_the_broker_end_serves_a_good_header_and_closes_a_bad_one(tmp_path, caplog):
    async def scenario():
        seen: asyncio.Queue = asyncio.Queue()
        path = str(tmp_path / "b.sock")
        server = await asyncio.get_running_loop().create_unix_server(
            lambda: OffloadedConnection(lambda: _Recorder(seen), "kafka SSL"), path)
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(encode(("203.0.113.7", 4711), ("127.0.0.1", 9093), ssl_cn="writer") + b"hello")
        assert await seen.get() == ("peer", ("203.0.113.7", 4711), "writer")
        assert await seen.get() == ("data", b"hello")
        assert await reader.readexactly(5) == b"HELLO"
        writer.close()
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(b"\x00\x00\x00\x10not a proxy header")
        assert await reader.read() == b""  # closed
        writer.close()
        assert seen.empty()
        server.close()

    with caplog.at_level(logging.WARNING, logger="nereus.tls_offload"):
        asyncio.run(scenario())
    assert "bad PROXY header: no PROXY protocol v2 signature" in caplog.text
