"""The PROXY protocol version 2 header (sans-io): what a TLS worker tells the broker first.

A TLS offload worker opens one connection to the broker per client connection and
sends this header before the client's bytes: the client's address, the public
address it connected to, and (in a ``PP2_TYPE_SSL`` TLV) whether TLS was used and
the common name of the client certificate it verified. The binary format: a 12-byte
signature, the version and command byte (``0x21``: version 2, PROXY), the family and
transport byte (``0x11`` TCP over IPv4, ``0x21`` TCP over IPv6), the big-endian
length of what follows, the addresses and ports, then type-length-value records.

The parser is strict: it accepts only what a worker sends (a PROXY command for TCP
over IPv4 or IPv6, well-formed TLVs, a bounded length) and raises ``ProxyHeaderError``
on anything else.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
_VERSION_PROXY = 0x21  # version 2, command PROXY
_TCP4, _TCP6 = 0x11, 0x21
_ADDRESSES = {_TCP4: struct.Struct(">4s4sHH"), _TCP6: struct.Struct(">16s16sHH")}
_PREFIX = struct.Struct(">12sBBH")
_TLV = struct.Struct(">BH")
_SSL = struct.Struct(">BI")

PP2_TYPE_SSL = 0x20
PP2_SUBTYPE_SSL_VERSION = 0x21
PP2_SUBTYPE_SSL_CN = 0x22
PP2_CLIENT_SSL = 0x01
PP2_CLIENT_CERT_CONN = 0x02

#: The longest address-and-TLV block accepted (a worker's is well under it).
MAX_BLOCK = 1024


class ProxyHeaderError(ValueError):
    """A PROXY v2 header that is malformed or not one a TLS worker sends."""


@dataclass(frozen=True)
class ProxyHeader:
    """What the header says about the client's connection."""

    source: tuple[str, int]  # the client's address and port
    destination: tuple[str, int]  # the public address and port it connected to
    tls: bool = False  # the worker terminated TLS for this connection
    tls_version: str | None = None
    ssl_cn: str | None = None  # the CN of the client certificate the worker verified (None: none)


def encode(source: tuple[str, int], destination: tuple[str, int], *, tls: bool = True,
           tls_version: str | None = None, ssl_cn: str | None = None) -> bytes:
    """The header for a TCP connection from ``source`` to ``destination``."""
    src, dst = ipaddress.ip_address(source[0]), ipaddress.ip_address(destination[0])
    if src.version != dst.version:  # an IPv4 client on a dual-stack socket: both as IPv6
        src, dst = _as_v6(src), _as_v6(dst)
    family = _TCP4 if src.version == 4 else _TCP6
    block = _ADDRESSES[family].pack(src.packed, dst.packed, source[1], destination[1])
    if tls:
        subs = b""
        if tls_version:
            subs += _tlv(PP2_SUBTYPE_SSL_VERSION, tls_version.encode("ascii"))
        client = PP2_CLIENT_SSL
        if ssl_cn is not None:
            client |= PP2_CLIENT_CERT_CONN
            subs += _tlv(PP2_SUBTYPE_SSL_CN, ssl_cn.encode("utf-8"))
        # verify = 0: the presented certificate was verified (a worker passes only verified ones' CN).
        block += _tlv(PP2_TYPE_SSL, _SSL.pack(client, 0) + subs)
    if len(block) > MAX_BLOCK:
        raise ProxyHeaderError(f"header of {len(block)} bytes is over {MAX_BLOCK}")
    return _PREFIX.pack(SIGNATURE, _VERSION_PROXY, family, len(block)) + block


def _as_v6(address):
    return address if address.version == 6 else ipaddress.IPv6Address(f"::ffff:{address}")


def _tlv(kind: int, value: bytes) -> bytes:
    return _TLV.pack(kind, len(value)) + value


class HeaderReader:
    """Receives a connection's first bytes until its header is complete.

    ``receive(data)`` returns None while more bytes are needed, then the header;
    ``rest`` is what followed it (the client's first bytes).
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self.rest = b""

    def receive(self, data: bytes) -> ProxyHeader | None:
        self._buf += data
        buf = self._buf
        if buf[:len(SIGNATURE)] != SIGNATURE[:len(buf)]:
            raise ProxyHeaderError("no PROXY protocol v2 signature")
        if len(buf) < _PREFIX.size:
            return None
        _sig, version, family, length = _PREFIX.unpack_from(buf)
        if version != _VERSION_PROXY:
            raise ProxyHeaderError(f"version/command byte 0x{version:02x} (expected 0x21: v2 PROXY)")
        if family not in _ADDRESSES:
            raise ProxyHeaderError(f"family/transport byte 0x{family:02x} (expected TCP over IPv4 or IPv6)")
        if length > MAX_BLOCK:
            raise ProxyHeaderError(f"header block of {length} bytes (limit {MAX_BLOCK})")
        if len(buf) < _PREFIX.size + length:
            return None
        header = parse_block(family, bytes(buf[_PREFIX.size:_PREFIX.size + length]))
        self.rest = bytes(buf[_PREFIX.size + length:])
        self._buf = bytearray()
        return header


def parse_block(family: int, block: bytes) -> ProxyHeader:
    """The header of an address-and-TLV ``block`` of ``family`` (TCP4 / TCP6)."""
    addresses = _ADDRESSES[family]
    if len(block) < addresses.size:
        raise ProxyHeaderError(f"address block of {len(block)} bytes (needs {addresses.size})")
    src, dst, src_port, dst_port = addresses.unpack_from(block)
    make = ipaddress.IPv4Address if family == _TCP4 else ipaddress.IPv6Address
    tls, version, cn = False, None, None
    for kind, value in _tlvs(block[addresses.size:]):
        if kind != PP2_TYPE_SSL:
            continue  # other TLVs (ALPN, authority, ...) carry nothing the broker uses
        if tls:
            raise ProxyHeaderError("more than one PP2_TYPE_SSL TLV")
        if len(value) < _SSL.size:
            raise ProxyHeaderError(f"PP2_TYPE_SSL TLV of {len(value)} bytes")
        client, verify = _SSL.unpack_from(value)
        tls = bool(client & PP2_CLIENT_SSL)
        for sub, sub_value in _tlvs(value[_SSL.size:]):
            if sub == PP2_SUBTYPE_SSL_VERSION:
                version = _text(sub_value, "ascii", "TLS version")
            elif sub == PP2_SUBTYPE_SSL_CN and client & PP2_CLIENT_CERT_CONN and verify == 0:
                cn = _text(sub_value, "utf-8", "certificate CN")
    return ProxyHeader((str(make(src)), src_port), (str(make(dst)), dst_port), tls, version, cn)


def _tlvs(data: bytes):
    offset = 0
    while offset < len(data):
        if len(data) - offset < _TLV.size:
            raise ProxyHeaderError(f"truncated TLV at byte {offset}")
        kind, length = _TLV.unpack_from(data, offset)
        offset += _TLV.size
        if length > len(data) - offset:
            raise ProxyHeaderError(f"TLV 0x{kind:02x} of {length} bytes overruns the header by "
                                   f"{length - (len(data) - offset)}")
        yield kind, data[offset:offset + length]
        offset += length


def _text(value: bytes, encoding: str, what: str) -> str:
    try:
        return value.decode(encoding)
    except UnicodeDecodeError:
        raise ProxyHeaderError(f"the {what} is not {encoding}") from None


__all__ = ["HeaderReader", "MAX_BLOCK", "ProxyHeader", "ProxyHeaderError", "SIGNATURE", "encode", "parse_block"]
