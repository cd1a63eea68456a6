"""What one metadata operation costs in CPU: the embedded engine, ``nereus oxia``, and bare gRPC.

Every topic a broker creates or looks up is a chain of dependent metadata operations (about 18
for a topic's first message, ``bench/RESULTS.md``). Under load they seldom share a call, so
the cost of one lone round trip bounds how many topics a second a cluster can create. Three
figures, each timed by the CPU both ends spent (``/proc``), for sequential operations (each
awaited before the next) and for 50 at once:

1. **embedded**: gets and puts of a client of the embedded engine, in this process (what
   ``nereus standalone`` does);
2. **oxia**: the same through a ``nereus oxia`` process (its public port, with the connection
   guard it runs by default), from the broker's Oxia client;
3. **grpc**: a bare gRPC asyncio server answering a unary-stream call with its request (no
   engine, no guard), called as the Oxia client calls ``Read``: the floor any server of this
   protocol in Python pays here. The last line gives ``oxia / grpc`` per sequential get.

Also, for 1 and 2: the latency of gets one at a time while 20 writers keep the shards committing
(a lookup while topics are being created).

    .venv/bin/python bench/meta_rpc.py [--ops 3000]

The LAST line holds the figures as key=value pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _procs import cpu_seconds, free_port, wait_port  # noqa: E402

from nereus.meta import connect  # noqa: E402
from nereus.meta.embedded import Engine  # noqa: E402

AT_ONCE = 50


async def _timed(pid: int | None, count: int, step) -> tuple[float, float, float]:
    """(operations a second, server CPU us per op, this process's CPU us per op) of ``count`` ops."""
    server0 = cpu_seconds(pid) if pid is not None else 0.0
    mine0, started = cpu_seconds(), time.monotonic()
    done = 0
    while done < count:
        done += await step(done)
    elapsed = time.monotonic() - started
    server = (cpu_seconds(pid) - server0) / done * 1e6 if pid is not None else 0.0
    return done / elapsed, server, (cpu_seconds() - mine0) / done * 1e6


async def _measure(meta, pid: int | None, count: int, label: str) -> dict[str, float]:
    await meta.put("/bench/one", b"x" * 100)
    for _ in range(200):  # warm-up: connections, shard routes, code paths
        await meta.get("/bench/one")

    async def get_one(_: int) -> int:
        await meta.get("/bench/one")
        return 1

    async def get_many(done: int) -> int:
        await asyncio.gather(*(meta.get(f"/bench/k{(done + i) % 1000}") for i in range(AT_ONCE)))
        return AT_ONCE

    async def put_one(done: int) -> int:
        await meta.put(f"/bench/w{done % 100}", b"y" * 100)
        return 1

    figures = await _reads_beside_writes(meta, count, label)
    for name, step, ops in (("get", get_one, count), (f"get{AT_ONCE}", get_many, count * 5),
                            ("put", put_one, count // 4)):
        rate, server, client = await _timed(pid, ops, step)
        where = f"server {server:,.0f} us + client {client:,.0f} us" if pid is not None else f"{client:,.0f} us"
        print(f"  {label} {name}: {rate:,.0f}/s, CPU per op {where}", flush=True)
        figures.update({f"{label}_{name}_per_s": rate, f"{label}_{name}_client_us": client})
        if pid is not None:
            figures[f"{label}_{name}_server_us"] = server
    return figures


async def _reads_beside_writes(meta, count: int, label: str) -> dict[str, float]:
    """Latency of gets, one at a time, while 20 writers keep every shard committing (a lookup
    during topic creations)."""
    stop = asyncio.Event()

    async def writer(w: int) -> None:
        i = 0
        while not stop.is_set():
            await meta.put(f"/bench/busy/{w}/{i % 50}", b"z" * 100)
            i += 1

    writers = [asyncio.ensure_future(writer(w)) for w in range(20)]
    try:
        await asyncio.sleep(0.5)
        waits = []
        for _ in range(count // 3):
            started = time.monotonic()
            await meta.get("/bench/one")
            waits.append(time.monotonic() - started)
    finally:
        stop.set()
        await asyncio.gather(*writers)
    waits.sort()
    p50, p99 = waits[len(waits) // 2] * 1000, waits[int(len(waits) * 0.99)] * 1000
    print(f"  {label} get beside 20 writers: p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True)
    return {f"{label}_get_busy_p50_ms": p50, f"{label}_get_busy_p99_ms": p99}


async def _embedded(count: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as data:
        engine = Engine(data, shards=4)
        meta = engine.client("default")
        try:
            return await _measure(meta, None, count, "embedded")
        finally:
            await meta.close()
            await engine.close()


async def _oxia(port: int, pid: int, count: int) -> dict[str, float]:
    meta = connect(f"oxia://127.0.0.1:{port}")
    try:
        return await _measure(meta, pid, count, "oxia")
    finally:
        await meta.close()


def _echo_server(port: int, ready) -> None:
    import grpc
    from grpc import aio

    async def serve() -> None:
        async def echo(request, context):
            yield request

        handler = grpc.method_handlers_generic_handler("bench.Echo", {
            "Echo": grpc.unary_stream_rpc_method_handler(echo)})
        server = aio.server()
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        ready.set()
        await server.wait_for_termination()

    import uvloop
    uvloop.run(serve())


async def _grpc(port: int, pid: int, count: int) -> dict[str, float]:
    from grpc import aio

    channel = aio.insecure_channel(f"127.0.0.1:{port}")
    call = channel.unary_stream("/bench.Echo/Echo")

    async def echo_one(_: int) -> int:
        async for _answer in call(b"x" * 40):
            pass
        return 1

    try:
        for _ in range(200):
            await echo_one(0)
        rate, server, client = await _timed(pid, count, echo_one)
    finally:
        await channel.close()
    print(f"  grpc echo: {rate:,.0f}/s, CPU per call server {server:,.0f} us + client {client:,.0f} us", flush=True)
    return {"grpc_per_s": rate, "grpc_server_us": server, "grpc_client_us": client}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=3000, help="sequential operations timed per figure")
    args = parser.parse_args()
    figures: dict[str, float] = {}
    print("embedded engine, in this process:", flush=True)
    figures.update(asyncio.run(_embedded(args.ops)))

    print("nereus oxia, its own process:", flush=True)
    with tempfile.TemporaryDirectory() as data:
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "nereus.cli", "--log-level", "WARNING", "oxia",
                                   "--data-dir", data, "--port", str(port)])
        try:
            wait_port(port, server)
            figures.update(asyncio.run(_oxia(port, server.pid, args.ops)))
        finally:
            server.terminate()
            server.wait()

    print("bare gRPC (asyncio server, unary-stream echo), its own process:", flush=True)
    port = free_port()
    ready = multiprocessing.Event()
    echo = multiprocessing.Process(target=_echo_server, args=(port, ready), daemon=True)
    echo.start()
    try:
        if not ready.wait(30):
            raise RuntimeError("the gRPC echo server did not start")
        figures.update(asyncio.run(_grpc(port, echo.pid, args.ops)))
    finally:
        echo.terminate()
        echo.join()
    figures["oxia_over_grpc_server"] = figures["oxia_get_server_us"] / figures["grpc_server_us"]
    figures["oxia_over_grpc_client"] = figures["oxia_get_client_us"] / figures["grpc_client_us"]
    print(f"a sequential get through nereus oxia costs {figures['oxia_over_grpc_server']:.2f} x the server CPU "
          f"and {figures['oxia_over_grpc_client']:.2f} x the client CPU of a bare gRPC call", flush=True)
    print(" ".join(f"{k}={v:.6g}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
