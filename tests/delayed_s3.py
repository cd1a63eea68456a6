"""S3 with S3 Standard's latency, for tests and benchmarks: a moto server behind a delaying HTTP proxy.

The proxy reads each HTTP/1.1 request whole (Content-Length or chunked body), waits for a
delay drawn for its kind, then forwards it to moto and relays the answer on the same
kept-alive connection. Requests on different connections wait independently; the proxy
runs in its own process so that its CPU never shares the broker's event loop.

Each kind's delay is lognormal, fitted to a published median and 99th percentile:
``mu = ln(p50)``, ``sigma = ln(p99 / p50) / 2.326`` (2.326: the standard normal's 99th
percentile). Figures for S3 Standard, same region, small objects:

* GET (first byte) p50 27 ms, p99 114 ms, and PUT/POST (10 KiB) p50 60 ms, p99 118 ms
  (taken as 120): the S3 Standard rows of the endive project's "Unconditional GET and
  PUT Latency Distributions" (github.com/cdouglas/endive, UNCONDITIONAL.md), GET from an
  in-region microbenchmark of 4 KiB reads (Dec 2025), PUT from an in-region benchmark
  of ~500 KiB objects (Mar 2025) brought down to 10 KiB. They agree with AWS's "Best Practices
  Design Patterns: Optimizing Amazon S3 Performance" (section "Timeouts and Retries for
  Latency-Sensitive Applications": median latencies of requests under 512 KB "often in
  the range of tens of milliseconds") and with SlateDB's tuning guide (S3 Standard
  write latency 50-100 ms).
* HEAD p50 10 ms, p99 26 ms: turbopuffer's "Tradeoffs" page gives S3 metadata
  requests p50 = 10 ms, p90 = 17 ms; p99 is that lognormal's (sigma = ln(1.7) / 1.2816).
* DELETE takes PUT's figures and LIST GET's: no published percentiles were found.

Run: ``python -m tests.delayed_s3 --target http://127.0.0.1:PORT --port N [--latency-scale X]``
(``--port 0`` picks one; the first line printed is ``port N``). ``GET /__delays__?from=I``
answers the proxy's own record of every request from the I-th on (JSON), unforwarded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.moto_server import BUCKET, CREDENTIALS, MotoServer, terminate

ROOT = Path(__file__).resolve().parents[1]
STATS_PATH = "/__delays__"
#: ``POST /__outage__?on=1`` (``on=0`` ends it): every S3 request answers 503 meanwhile, as S3 does when
#: it cannot serve (clients retry with back-off, then give up).
OUTAGE_PATH = "/__outage__"
_UNAVAILABLE = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>ServiceUnavailable</Code>"
                b"<Message>Service is unable to handle request.</Message></Error>")
Z99 = 2.326  # the standard normal distribution's 99th percentile


@dataclass(frozen=True)
class Latency:
    """A lognormal delay with median ``p50_ms`` and 99th percentile ``p99_ms``."""

    p50_ms: float
    p99_ms: float

    @property
    def sigma(self) -> float:
        return math.log(self.p99_ms / self.p50_ms) / Z99 if self.p50_ms > 0 else 0.0

    def sample_ms(self, rng: random.Random) -> float:
        if self.p50_ms <= 0:
            return 0.0
        return rng.lognormvariate(math.log(self.p50_ms), self.sigma)

    @classmethod
    def parse(cls, text: str) -> "Latency":
        """``P50:P99`` in milliseconds."""
        p50, _, p99 = text.partition(":")
        return cls(float(p50), float(p99 or p50))


#: S3 Standard, same region, small objects (sources in the module docstring).
S3_STANDARD: dict[str, Latency] = {
    "GET": Latency(27, 114),
    "PUT": Latency(60, 120),
    "HEAD": Latency(10, 26),
    "DELETE": Latency(60, 120),
    "LIST": Latency(27, 114),
}


def request_kind(method: str, target: str) -> str:
    """The latency class of a path-style S3 request: GET, PUT, HEAD, DELETE or LIST."""
    if method in ("PUT", "POST"):  # POST: multipart steps and batch deletes, writes all
        return "PUT"
    if method in ("HEAD", "DELETE"):
        return method
    path = urllib.parse.urlsplit(target).path
    # A GET of the bucket itself lists it; a GET of an object has a key after the bucket.
    return "LIST" if "/" not in path.strip("/") else "GET"


class Delays:
    """Draws each kind's delays from its own seeded stream, so one kind's sequence never
    depends on how requests of other kinds interleave with it."""

    def __init__(self, latencies: dict[str, Latency], scale: float = 1.0, seed: int = 0) -> None:
        self.latencies = latencies
        self.scale = scale
        self._rngs = {kind: random.Random(f"{seed}:{kind}") for kind in latencies}

    def next_ms(self, kind: str) -> float:
        return self.latencies[kind].sample_ms(self._rngs[kind]) * self.scale


# -- the proxy ------------------------------------------------------------------------------------
class _Closed(Exception):
    """The peer closed the connection between messages."""


def _headers(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    return lines[0], [(name.strip(), value.strip()) for name, _, value in
                      (line.partition(":") for line in lines[1:] if line)]


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def _has_token(headers: list[tuple[str, str]], name: str, token: str) -> bool:
    value = _header(headers, name)
    return value is not None and token in (t.strip().lower() for t in value.split(","))


def _rewrite_head(head: bytes, dropped: set[str], added: list[str]) -> bytes:
    lines = head.decode("latin-1").split("\r\n")[:-2]
    kept = [lines[0], *(line for line in lines[1:] if line.partition(":")[0].strip().lower() not in dropped), *added]
    return ("\r\n".join(kept) + "\r\n\r\n").encode("latin-1")


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise _Closed from exc


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body as sent, framing and trailers included (it is forwarded unchanged)."""
    parts = []
    while True:
        line = await reader.readuntil(b"\r\n")
        parts.append(line)
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while True:  # trailers, up to the empty line
                line = await reader.readuntil(b"\r\n")
                parts.append(line)
                if line == b"\r\n":
                    return b"".join(parts)
        parts.append(await reader.readexactly(size + 2))


async def _read_body(reader: asyncio.StreamReader, headers: list[tuple[str, str]]) -> bytes | None:
    """The body framed by the headers; None: none is framed, it runs to the end of the connection."""
    if _has_token(headers, "transfer-encoding", "chunked"):
        return await _read_chunked(reader)
    length = _header(headers, "content-length")
    if length is not None:
        return await reader.readexactly(int(length))
    return None


class DelayProxy:
    """Delays each request by ``delays.next_ms(kind)`` then forwards it to ``target`` (``host``, ``port``)."""

    def __init__(self, target: tuple[str, int], delays: Delays) -> None:
        self.target = target
        self.delays = delays
        # (kind, method, status, delay ms, upstream ms, received, forwarded): monotonic seconds,
        # comparable across processes on Linux.
        self.records: list[tuple] = []
        self.connections = 0
        self.outage = False
        self.refused = 0  # requests answered 503 during an outage

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                head = await _read_head(reader)
                request_line, headers = _headers(head)
                method, target, _version = request_line.split(" ", 2)
                if target.startswith(STATS_PATH):
                    self._answer_stats(writer, target)
                    continue
                if target.startswith(OUTAGE_PATH):
                    await _read_body(reader, headers)
                    self.outage = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query).get("on") == ["1"]
                    writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
                    continue
                if _has_token(headers, "expect", "100-continue"):
                    # Answered here: moto then never sees a request that waits for it.
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    head = _rewrite_head(head, {"expect"}, [])
                body = await _read_body(reader, headers)
                if self.outage:
                    self.refused += 1
                    writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(_UNAVAILABLE) + _UNAVAILABLE)
                    await writer.drain()
                    continue
                received = time.monotonic()
                kind = request_kind(method, target)
                delay_ms = self.delays.next_ms(kind)
                await asyncio.sleep(delay_ms / 1000)
                forwarded = time.monotonic()
                upstream, status_head = await self._send(upstream, head + (body or b""))
                status_line, response_headers = _headers(status_head)
                status = int(status_line.split(" ", 2)[1])
                if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
                    response_body: bytes | None = b""
                else:
                    response_body = await _read_body(upstream[0], response_headers)
                upstream_closes = response_body is None or _has_token(response_headers, "connection", "close")
                added = []
                if response_body is None:  # delimited by the close: the client gets it with a length
                    response_body = await upstream[0].read()
                    added.append(f"Content-Length: {len(response_body)}")
                if upstream_closes:
                    upstream[1].close()
                    upstream = None
                # moto closes every connection after its answer; the client's stays open, as S3's would.
                writer.write(_rewrite_head(status_head, {"connection", "keep-alive"}, added) + response_body)
                await writer.drain()
                self.records.append((kind, method, status, delay_ms, (time.monotonic() - forwarded) * 1000,
                                     received, forwarded))
                if _has_token(headers, "connection", "close"):
                    break
        except (_Closed, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            if upstream is not None:
                upstream[1].close()

    async def _send(self, upstream, request: bytes) -> tuple[tuple[asyncio.StreamReader, asyncio.StreamWriter], bytes]:
        """Send ``request`` upstream; returns the connection used and the response's head.

        A kept-alive upstream connection the server has closed meanwhile fails before any answer:
        the request is sent again once, on a new connection.
        """
        if upstream is not None:
            try:
                upstream[1].write(request)
                return upstream, await _read_head(upstream[0])
            except (_Closed, ConnectionError):
                upstream[1].close()
        upstream = await asyncio.open_connection(*self.target, limit=1 << 20)
        upstream[1].write(request)
        return upstream, await _read_head(upstream[0])

    def _answer_stats(self, writer: asyncio.StreamWriter, target: str) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query)
        start = int(query.get("from", ["0"])[0])
        fields = ("kind", "method", "status", "delay_ms", "upstream_ms", "received", "forwarded")
        body = json.dumps({
            "count": len(self.records), "connections": self.connections, "scale": self.delays.scale,
            "outage": self.outage, "refused": self.refused,
            "latencies": {k: [v.p50_ms, v.p99_ms] for k, v in self.delays.latencies.items()},
            "records": [dict(zip(fields, r)) for r in self.records[start:]],
        }).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                     % len(body) + body)


async def _main(args: argparse.Namespace) -> None:
    latencies = dict(S3_STANDARD)
    for item in args.latency:
        kind, _, figures = item.partition("=")
        latencies[kind.upper()] = Latency.parse(figures)
    target = urllib.parse.urlsplit(args.target)
    proxy = DelayProxy((target.hostname, target.port), Delays(latencies, args.latency_scale, args.seed))
    server = await asyncio.start_server(proxy.serve, args.host, args.port, limit=1 << 20)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", required=True, help="the S3 endpoint to forward to: http://host:port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument("--latency-scale", type=float, default=1.0,
                        help="multiplies every delay (0: no delay, to measure the proxy itself)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency", action="append", default=[], metavar="KIND=P50:P99",
                        help="milliseconds for GET, PUT, HEAD, DELETE or LIST instead of S3 Standard's")
    args = parser.parse_args(argv)
    try:
        import uvloop
    except ImportError:
        asyncio.run(_main(args))
    else:
        uvloop.run(_main(args))


# -- the pair, for tests and benchmarks --------------------------------------------------------------
class DelayedS3:
    """A moto server and a delaying proxy in front of it, each its own process; ``endpoint`` is the proxy's."""

    def __init__(self, workdir: Path, *, latency_scale: float = 1.0, seed: int = 0,
                 latencies: dict[str, Latency] | None = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.latency_scale = latency_scale
        self.seed = seed
        self.latencies = latencies or {}
        self.moto = MotoServer(self.workdir / "moto.log")
        self.proxy: subprocess.Popen | None = None
        self.endpoint = ""

    def start(self) -> str:
        self.moto.start()
        args = [sys.executable, "-m", "tests.delayed_s3", "--target", self.moto.endpoint,
                "--latency-scale", str(self.latency_scale), "--seed", str(self.seed)]
        for kind, latency in self.latencies.items():
            args += ["--latency", f"{kind}={latency.p50_ms}:{latency.p99_ms}"]
        self.proxy = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=open(self.workdir / "delayed_s3.log", "ab"), text=True)
        line = self.proxy.stdout.readline()
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"the delaying proxy did not start: {(self.workdir / 'delayed_s3.log').read_text()}")
        self.endpoint = f"http://127.0.0.1:{int(line.split()[1])}"
        return self.endpoint

    def store_url(self, prefix: str) -> str:
        """An ``s3://`` object store URL for nereus: the bucket under ``prefix``, through the proxy."""
        query = urllib.parse.urlencode({"endpoint": self.endpoint, **CREDENTIALS})
        return f"s3://{BUCKET}/{prefix}?{query}"

    def stats(self, start: int = 0) -> dict:
        """The proxy's records of requests from the ``start``-th on, with its totals."""
        with urllib.request.urlopen(f"{self.endpoint}{STATS_PATH}?from={start}", timeout=30) as response:
            return json.loads(response.read())

    def outage(self, on: bool) -> None:
        """Make the store answer every request with 503 (``on``) or serve again."""
        request = urllib.request.Request(f"{self.endpoint}{OUTAGE_PATH}?on={int(on)}", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=30):
            pass

    def stop(self) -> None:
        if self.proxy is not None:
            terminate(self.proxy)
            self.proxy.stdout.close()
            self.proxy = None
        self.moto.stop()

    def __enter__(self) -> "DelayedS3":
        self.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.stop()


if __name__ == "__main__":
    main()
