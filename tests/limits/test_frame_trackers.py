"""Where HTTP request headers and HTTP/2 or TLS frames end, as the slow-loris guards follow them."""

from __future__ import annotations

from nereus.http_limits import RequestHeaders
from nereus.meta.oxia.guard import StreamFrames


def test_request_headers_skip_bodies_by_content_length_and_follow_pipelined_requests():
    headers = RequestHeaders()
    assert not headers.feed(b"POST /a HTTP/1.1\r\nContent-Length: 5\r\n")
    assert headers.partial
    assert headers.feed(b"\r\nhel")  # header complete, body under way: no header is partial
    assert not headers.partial
    assert headers.feed(b"loGET /b HTTP/1.1\r\n\r\nGET /c HTTP/1.1\r\n")  # the body's end, one header, a third
    assert headers.partial
    assert headers.feed(b"\r") is False and headers.partial
    assert headers.feed(b"\n") and not headers.partial


def test_a_chunked_request_is_not_followed_past_its_header():
    headers = RequestHeaders()
    assert headers.feed(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
    assert not headers.partial and not headers.feed(b"GET / HTTP/1.1\r\n")


def test_http2_frames_after_the_preface():
    frames = StreamFrames()
    assert not frames.feed(b"PRI * HTTP/2.0\r\n")
    assert frames.partial
    settings = b"\0\0\0\x04\0\0\0\0\0"
    assert frames.feed(b"\r\nSM\r\n\r\n" + settings + b"\0\0\x08\x06")  # preface, SETTINGS, half a PING header
    assert frames.partial
    assert not frames.feed(b"\0\0\0\0\0" + b"1234567")
    assert frames.feed(b"8") and not frames.partial


def test_tls_records():
    frames = StreamFrames()
    assert not frames.feed(b"\x16\x03\x01\x00\x04ab")
    assert frames.partial
    assert frames.feed(b"cd\x17\x03") and frames.partial
    assert frames.feed(b"\x03\x00\x00") and not frames.partial  # an empty record
