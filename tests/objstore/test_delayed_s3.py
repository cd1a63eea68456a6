"""The delaying S3 proxy: its distributions, that it delays every request by its own draw
(from its records, not from clocks), and a standalone broker producing and consuming through it."""

from __future__ import annotations

import asyncio
import http.client
import random
import statistics
import time
import urllib.parse
import uuid
from pathlib import Path

import pulsar
import pytest

from nereus.objstore import open_object_store
from tests.delayed_s3 import S3_STANDARD, Delays, DelayedS3, Latency, request_kind
from tests.moto_server import BUCKET, CREDENTIALS
from tests.standalone_process import running

# Large next to the noise of a shared machine, tight (p99 close to p50) so that few samples do.
LATENCIES = {"PUT": Latency(150, 200), "GET": Latency(300, 400), "HEAD": Latency(5, 10),
             "DELETE": Latency(5, 10), "LIST": Latency(5, 10)}
SEED = 7


@pytest.fixture(scope="module")
def delayed(tmp_path_factory: pytest.TempPathFactory):
    with DelayedS3(tmp_path_factory.mktemp("delayed-s3"), latencies=LATENCIES, seed=SEED) as pair:
        yield pair


def _store(endpoint: str):
    return open_object_store(f"s3://{BUCKET}/t-{uuid.uuid4().hex}", endpoint=endpoint, **CREDENTIALS)


def test_each_lognormal_has_its_published_median_and_99th_percentile():
    rng = random.Random(1)
    for latency in S3_STANDARD.values():
        draws = sorted(latency.sample_ms(rng) for _ in range(40_000))
        assert draws[len(draws) // 2] == pytest.approx(latency.p50_ms, rel=0.05)
        assert draws[int(len(draws) * 0.99)] == pytest.approx(latency.p99_ms, rel=0.1)


def test_a_request_kind_follows_the_method_and_whether_a_key_is_named():
    assert request_kind("PUT", "/bucket/wal/1") == "PUT"
    assert request_kind("POST", "/bucket?delete") == "PUT"
    assert request_kind("GET", "/bucket/wal/1") == "GET"
    assert request_kind("GET", "/bucket?list-type=2&prefix=wal/") == "LIST"
    assert request_kind("GET", "/bucket/") == "LIST"
    assert request_kind("HEAD", "/bucket/k") == "HEAD"
    assert request_kind("DELETE", "/bucket/k") == "DELETE"


async def test_every_request_waits_its_own_draw_before_it_is_forwarded(delayed: DelayedS3):
    before = delayed.stats()
    store = _store(delayed.endpoint)
    try:
        for i in range(4):
            await store.put_if_absent(f"k{i}", b"x" * 1024)
        assert await store.get("k1") == b"x" * 1024
        assert await store.delete("k2")
    finally:
        await store.close()
    after = delayed.stats(before["count"])
    records = after["records"]
    assert {r["kind"] for r in records} >= {"PUT", "GET", "HEAD"}
    # Each kind draws from its own seeded stream: replaying it gives every request's delay.
    replay = Delays(LATENCIES, seed=SEED)
    for r in before["records"]:
        replay.next_ms(r["kind"])
    for r in records:
        assert r["delay_ms"] == pytest.approx(replay.next_ms(r["kind"]))
        assert r["forwarded"] - r["received"] >= r["delay_ms"] / 1000 - 0.001, r
        assert r["status"] < 500, r
    # One client, one request at a time: its connection is kept alive across requests.
    assert after["connections"] - before["connections"] < len(records) / 2


async def test_a_put_through_the_proxy_takes_about_its_median_longer(delayed: DelayedS3):
    async def median_put_seconds(endpoint: str) -> float:
        store = _store(endpoint)
        try:
            await store.put_if_absent("warm", b"")  # the conditional-put probe runs outside the timing
            times = []
            for i in range(7):
                start = time.perf_counter()
                await store.put_if_absent(f"k{i}", b"x" * 1024)
                times.append(time.perf_counter() - start)
            return statistics.median(times)
        finally:
            await store.close()

    added_ms = (await median_put_seconds(delayed.endpoint) - await median_put_seconds(delayed.moto.endpoint)) * 1000
    # Loose on purpose: a shared machine's scheduling noise is in both medians.
    assert 0.5 * LATENCIES["PUT"].p50_ms < added_ms < 3 * LATENCIES["PUT"].p50_ms


async def test_requests_on_separate_connections_wait_side_by_side(delayed: DelayedS3):
    store = _store(delayed.endpoint)
    try:
        for i in range(4):
            await store.put_if_absent(f"k{i}", b"%d" % i)
        start = delayed.stats()["count"]
        assert await asyncio.gather(*(store.get(f"k{i}") for i in range(4))) == [b"0", b"1", b"2", b"3"]
    finally:
        await store.close()
    gets = [r for r in delayed.stats(start)["records"] if r["kind"] == "GET"]
    assert len(gets) == 4
    # Every GET arrived before the first of them was forwarded: the waits overlapped.
    assert max(r["received"] for r in gets) < min(r["forwarded"] for r in gets)


async def test_chunked_and_expect_continue_requests_pass_through_on_one_connection(delayed: DelayedS3):
    url = urllib.parse.urlsplit(delayed.endpoint)
    keys = [f"chunked-{uuid.uuid4().hex}" for _ in range(2)]
    body = [b"a" * 1000, b"b" * 3000]
    before = delayed.stats()["connections"]
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        for key in keys:  # moto takes unsigned writes (and refuses unsigned reads)
            connection.request("PUT", f"/{BUCKET}/{key}", body=iter(body), encode_chunked=True,
                               headers={"Expect": "100-continue"})
            response = connection.getresponse()
            response.read()
            assert response.status == 200
    finally:
        connection.close()
    assert delayed.stats()["connections"] - before == 2  # this one, kept alive, and the stats request's
    store = open_object_store(f"s3://{BUCKET}", endpoint=delayed.endpoint, **CREDENTIALS)
    try:
        for key in keys:
            assert await store.get(key) == b"".join(body)
    finally:
        await store.close()


def test_a_standalone_on_delayed_s3_produces_and_consumes(tmp_path: Path):
    with DelayedS3(tmp_path / "s3") as s3:
        args = ["--compaction-interval", "0", "--object-store", s3.store_url(f"sa-{uuid.uuid4().hex[:8]}")]
        with running(tmp_path / "data", args) as server:
            client = pulsar.Client(server.url, operation_timeout_seconds=30, io_threads=1,
                                   logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
            try:
                topic = "persistent://public/default/delayed-s3"
                consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
                producer = client.create_producer(topic)
                sent = [b"m%d" % i for i in range(20)]
                for payload in sent:
                    producer.send(payload)
                received = []
                for _ in sent:
                    message = consumer.receive(timeout_millis=30_000)
                    received.append(message.data())
                    consumer.acknowledge(message)
                assert received == sent
            finally:
                client.close()
        stats = s3.stats()
    puts = [r for r in stats["records"] if r["kind"] == "PUT"]
    assert puts and all(r["status"] < 500 for r in stats["records"])
    assert all(r["delay_ms"] > 0 for r in puts)
