"""The ``cluster`` part of bench/scale.py: many topics served by a cluster of brokers, and one killed.

A ``nereus oxia`` metadata server and ``--cluster-brokers`` ``nereus broker`` processes (one
file object store, no idle unload: every topic written stays loaded) on this machine. Phases:

1. **write**: a Pulsar client (the project's asyncio one, ``--cluster-concurrency`` at once)
   opens a producer on each of ``--cluster-topics`` new topics (spread over
   ``--cluster-namespaces`` namespaces; the lookup places each on its broker), sends one
   message and closes it;
2. **read**: every topic's message is read back over the admin REST API
   (``examinemessage?initialPosition=earliest``, asked of any broker: it answers for the
   topic's owner);
3. **memory**: each broker's heap (``RssAnon``) and topics owned, the metadata server's
   ``VmRSS``, and how long a ``/metrics`` scrape of each broker takes (topic-level series are
   summed per namespace above ``topicLevelMetricsMaxTopics``);
4. **failover**: the broker that owns the most topics is killed (-9). Measured: when the
   survivors own every topic again (the sum of their ``/admin/v2/nereus/owned-topics``: they
   adopt a dead owner's topics once a lookup finds its listener refusing, or as its
   ownership records expire), and, for a sample of the dead broker's topics
   (``--cluster-sample``, all asked at once and again every 0.2 s until they answer), when each
   answers ``examinemessage`` again.

With ``--cluster-extra-owned N`` the killed broker also holds N ownership records of topics
nobody wrote (``persistent://public/scale-{i}/owned-{n}``), put by the bench just before the
kill with the value and owner index entry the broker's own claims carry, ephemeral records of
a session whose heartbeats stop at the kill (``ExtraOwnership``): they expire with the killed
broker's own. A survivor's adoption reads and claims ownership records only (each topic loads
when a client first asks for it), so they cost it what the records of written topics do: a
failover of hundreds of thousands of topics can be measured without writing them first
(writing one takes about 22 metadata operations, ~7 ms of the metadata server's CPU here).
The written topics still give the sampled answers.

Target: 1,000,000 topics; the survivors serve a killed broker's (300,000) topics again
within 30 s.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import aiohttp
from _procs import free_port, status_bytes, wait_for, wait_port  # bench/ is on sys.path
from _scale_loaded import NEREUS, _try

from nereus.broker.cluster.membership import BROKERS, BrokerRecord
from nereus.broker.cluster.owner_lookup import OWNED_BY, owner_key, owner_tag
from nereus.codec.pulsar import pb
from nereus.meta import PutOp, PutResult, connect
from nereus.pulsar.client.producer import ClusterClient, RemoteProducer

TARGET_FAILOVER_SECONDS = 30.0


def add_arguments(parser) -> None:
    parser.add_argument("--cluster-topics", type=int, default=1_000_000, help="topics written (the cluster part)")
    parser.add_argument("--cluster-brokers", type=int, default=3, help="brokers (the cluster part)")
    parser.add_argument("--cluster-namespaces", type=int, default=10, help="namespaces of public (the cluster part)")
    parser.add_argument("--cluster-concurrency", type=int, default=400,
                        help="topics written or read at once (the cluster part)")
    parser.add_argument("--cluster-sample", type=int, default=2000,
                        help="the killed broker's topics read again after the kill (the cluster part)")
    parser.add_argument("--cluster-extra-owned", type=int, default=0,
                        help="ownership records of unwritten topics given to the killed broker (see above)")
    parser.add_argument("--cluster-session-seconds", type=float, default=None,
                        help="the brokers' --session-timeout (default: theirs) (the cluster part)")


def _topic(args, i: int) -> str:
    return f"persistent://public/scale-{i % args.cluster_namespaces}/t-{i}"


class Brokers:
    """The metadata server and the brokers, each on free ports."""

    def __init__(self, workdir: Path, count: int, session_seconds: float | None) -> None:
        self.workdir = workdir
        self.log = open(workdir / "processes.log", "ab")
        self.oxia_port = free_port()
        self.oxia = subprocess.Popen([*NEREUS, "oxia", "--data-dir", str(workdir / "meta"),
                                      "--port", str(self.oxia_port)], stdout=subprocess.DEVNULL, stderr=self.log)
        wait_port(self.oxia_port, self.oxia)
        self.brokers: list[tuple[subprocess.Popen, dict[str, int]]] = []
        for _ in range(count):
            ports = {name: free_port() for name in ("pulsar", "kafka", "http")}
            extra = ["--session-timeout", str(session_seconds)] if session_seconds else []
            proc = subprocess.Popen(
                [*NEREUS, "broker", "--metadata", f"oxia://127.0.0.1:{self.oxia_port}",
                 "--object-store", (workdir / "objects").resolve().as_uri(), "--compaction-interval", "0",
                 "--topic-idle-seconds", "0", *extra, "--pulsar-port", str(ports["pulsar"]),
                 "--kafka-port", str(ports["kafka"]), "--http-port", str(ports["http"])],
                stdout=subprocess.DEVNULL, stderr=self.log)
            self.brokers.append((proc, ports))
        for proc, ports in self.brokers:
            for name in ("pulsar", "http"):
                wait_port(ports[name], proc, timeout=60)

    def alive(self) -> list[tuple[subprocess.Popen, dict[str, int]]]:
        return [(p, ports) for p, ports in self.brokers if p.poll() is None]

    def stop(self) -> None:
        for process in [p for p, _ in self.brokers] + [self.oxia]:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    process.kill()
        self.log.close()


def _metrics(http_port: int) -> tuple[str, float]:
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=120) as response:
        text = response.read().decode()
    return text, time.monotonic() - started


def _gauge(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def owned(http_port: int) -> int:
    """How many topics the broker owns (its list: cheaper to build than a scrape of /metrics, which
    polled twice a second took a third of a broker's time with tens of thousands of topics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/admin/v2/nereus/owned-topics", timeout=120) as answer:
        return len(json.loads(answer.read()))


def create_namespaces(http_port: int, count: int) -> None:
    for i in range(count):
        request = urllib.request.Request(f"http://127.0.0.1:{http_port}/admin/v2/namespaces/public/scale-{i}",
                                         data=b"", method="PUT")
        try:
            urllib.request.urlopen(request, timeout=60).close()
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise


async def write_topics(url: str, topics: list[str], concurrency: int, progress) -> list[str]:
    """One message to each topic (producer opened, one send, closed); returns the topics that failed."""
    client = ClusterClient(url, timeout=60)
    payload = b"x" * 100
    failed: list[str] = []
    done = 0
    queue = iter(topics)

    async def worker(w: int) -> None:
        nonlocal done
        for topic in queue:
            name = f"scale-{w}"
            try:
                producer = RemoteProducer(client, topic, name)
                await producer.open()
                metadata = pb.MessageMetadata(producer_name=name, sequence_id=0,
                                              publish_time=int(time.time() * 1000)).SerializeToString()
                await producer.send(metadata, payload, 0, 0, 1)
                await producer.close()
            except Exception:  # noqa: BLE001 - counted and written again by the caller
                failed.append(topic)
            done += 1
            if done % 20_000 == 0:
                progress(done)

    try:
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    finally:
        client.close()
    return failed


async def read_topics(http_ports: list[int], topics: list[str], concurrency: int, progress=None,
                      until: float | None = None) -> dict[str, float]:
    """``examinemessage`` of each topic (asked of a broker in turn) until it answers with the message;
    returns when each first answered (monotonic time). With ``until``, a topic is asked again until
    then; without, once (a failure is not recorded)."""
    answered: dict[str, float] = {}
    queue = iter(topics)
    done = 0
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def one(topic: str, port: int) -> bool:
            path = topic.replace("persistent://", "persistent/")
            url = f"http://127.0.0.1:{port}/admin/v2/{path}/examinemessage?initialPosition=earliest&messagePosition=1"
            try:
                async with session.get(url) as response:
                    body = await response.read()
                    return response.status == 200 and body.endswith(b"x" * 100)
            except (aiohttp.ClientError, asyncio.TimeoutError):
                return False

        async def worker(w: int) -> None:
            nonlocal done
            for topic in queue:
                attempt = 0
                while True:
                    if await one(topic, http_ports[(w + attempt) % len(http_ports)]):
                        answered[topic] = time.monotonic()
                        break
                    attempt += 1
                    if until is None or time.monotonic() > until:
                        break
                    await asyncio.sleep(0.2)
                done += 1
                if progress is not None and done % 20_000 == 0:
                    progress(done)

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return answered


async def owners(http_ports: list[int], topics: list[str]) -> dict[str, str]:
    """The broker URL each topic's lookup names (REST ``/lookup/v2/topic``)."""
    found: dict[str, str] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        gate = asyncio.Semaphore(64)

        async def one(topic: str) -> None:
            async with gate:
                path = topic.replace("persistent://", "persistent/")
                async with session.get(f"http://127.0.0.1:{http_ports[0]}/lookup/v2/topic/{path}") as response:
                    if response.status == 200:
                        found[topic] = (await response.json())["brokerUrl"]

        await asyncio.gather(*(one(t) for t in topics))
    return found


class ExtraOwnership:
    """``count`` ownership records naming the broker listening on ``pulsar_port`` (its current
    incarnation), put as its claims put them. They are ephemeral, held by this bench's own
    metadata session (the broker's session timeout): ``expire()`` stops its heartbeats, as a kill
    stops the broker's, so the records vanish when the broker's own would."""

    def __init__(self, oxia_port: int, pulsar_port: int, count: int, namespaces: int, session_seconds: float) -> None:
        self.topics = [f"persistent://public/scale-{n % namespaces}/owned-{n}" for n in range(count)]
        self._put, self._expire, self._close = threading.Event(), threading.Event(), threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=asyncio.run, daemon=True, args=(
            self._hold(oxia_port, pulsar_port, session_seconds),))
        self._thread.start()
        self._put.wait()
        if self._failure is not None:
            raise RuntimeError("putting the extra ownership records failed") from self._failure

    async def _hold(self, oxia_port: int, pulsar_port: int, session_seconds: float) -> None:
        meta = connect(f"oxia://127.0.0.1:{oxia_port}", session_timeout=session_seconds)
        try:
            owner = None
            async for rec in meta.range_scan(BROKERS, BROKERS + "\xff"):
                record = BrokerRecord.decode(rec.value)
                if record.address.pulsar_url.endswith(f":{pulsar_port}"):
                    owner = record
            if owner is None:
                raise RuntimeError(f"no broker registered with Pulsar port {pulsar_port}")
            value = json.dumps({"broker": owner.address.name, "incarnation": owner.incarnation}).encode()
            index = {OWNED_BY: owner_tag(owner.address.name, owner.incarnation)}
            for start in range(0, len(self.topics), 2000):
                results = await meta.put_many([PutOp(owner_key(t), value, secondary_indexes=index, ephemeral=True)
                                               for t in self.topics[start:start + 2000]])
                failed = [r for r in results if not isinstance(r, PutResult)]
                if failed:
                    raise RuntimeError(f"putting ownership records failed: {failed[0]}")
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            self._failure = exc
            self._put.set()
            await meta.close()
            return
        self._put.set()
        await asyncio.to_thread(self._expire.wait)
        meta._pause_heartbeats()
        await asyncio.to_thread(self._close.wait)
        await meta.close()

    def expire(self) -> None:
        self._expire.set()

    def close(self) -> None:
        self._expire.set()
        self._close.set()
        self._thread.join(60)


async def _failover(survivors: list[int], sample: list[str], count: int, concurrency: int,
                    killed: float) -> tuple[float | None, dict[str, float]]:
    """(when the survivors own all ``count`` topics, when each sampled topic answered), both
    measured at once from the kill on, for up to 600 s."""
    async def all_owned() -> float | None:
        nearly = None
        while time.monotonic() < killed + 600:
            try:
                total = sum(await asyncio.gather(*(asyncio.to_thread(owned, p) for p in survivors)))
            except OSError:
                total = 0
            if nearly is None and total >= count * 0.99:
                nearly = time.monotonic()
                print(f"  the survivors own 99% of the topics {nearly - killed:.1f} s after the kill", flush=True)
            if total >= count:
                return time.monotonic()
            await asyncio.sleep(1.0)
        print(f"  {count - total:,} topics still without an owner 600 s after the kill", flush=True)
        return None

    return tuple(await asyncio.gather(all_owned(), read_topics(survivors, sample, concurrency,
                                                               until=killed + 600)))


async def run(args) -> dict[str, float]:
    """The part, for bench/scale.py (its clients run their own event loops, in a thread)."""
    return await asyncio.to_thread(run_cluster, args)


def run_cluster(args) -> dict[str, float]:
    count = args.cluster_topics
    workdir = Path(tempfile.mkdtemp(prefix="scale-cluster-", dir=args.dir))
    (workdir / "objects").mkdir()
    cluster = Brokers(workdir, args.cluster_brokers, args.cluster_session_seconds)
    http_ports = [ports["http"] for _, ports in cluster.brokers]
    url = f"pulsar://127.0.0.1:{cluster.brokers[0][1]['pulsar']}"
    figures: dict[str, float] = {"cluster_topics": count, "cluster_brokers": args.cluster_brokers}
    try:
        if wait_for(lambda: _try(lambda: create_namespaces(http_ports[0], args.cluster_namespaces)), 60, 1.0) is None:
            raise RuntimeError("the namespaces could not be created within 60 s")
        before = [status_bytes(p.pid, "RssAnon") for p, _ in cluster.brokers]
        topics = [_topic(args, i) for i in range(count)]

        started = time.monotonic()
        failed = asyncio.run(write_topics(url, topics, args.cluster_concurrency,
                                          lambda n: print(f"  {n:,} of {count:,} topics written "
                                                          f"({n / (time.monotonic() - started):,.0f}/s)", flush=True)))
        for _ in range(3):  # a write that failed (a timeout under load) is written again
            if not failed:
                break
            print(f"  writing {len(failed):,} topics again", flush=True)
            failed = asyncio.run(write_topics(url, failed, args.cluster_concurrency, lambda n: None))
        write_seconds = time.monotonic() - started
        if failed:
            raise RuntimeError(f"{len(failed)} topics could not be written")
        print(f"  wrote {count:,} topics in {write_seconds:.0f} s ({count / write_seconds:,.0f}/s)", flush=True)
        figures.update(cluster_write_seconds=write_seconds, cluster_writes_per_s=count / write_seconds)

        started = time.monotonic()
        read = asyncio.run(read_topics(http_ports, topics, args.cluster_concurrency,
                                       lambda n: print(f"  {n:,} of {count:,} topics read back", flush=True)))
        missed = [t for t in topics if t not in read]
        if missed:  # a read that timed out under load is asked again, until it answers (for 120 s)
            print(f"  reading {len(missed):,} topics again", flush=True)
            read.update(asyncio.run(read_topics(http_ports, missed, args.cluster_concurrency,
                                                until=time.monotonic() + 120)))
        read_seconds = time.monotonic() - started
        print(f"  read back {len(read):,} of {count:,} topics in {read_seconds:.0f} s ({len(missed):,} asked "
              "twice)", flush=True)
        if len(read) < count:
            raise RuntimeError(f"{count - len(read)} topics did not answer with their message")
        figures.update(cluster_read_seconds=read_seconds, cluster_read_back=len(read))

        per_broker = []
        for (proc, ports), start in zip(cluster.brokers, before):
            text, scrape = _metrics(ports["http"])
            heap = status_bytes(proc.pid, "RssAnon")
            topics_owned = int(_gauge(text, "nereus_cluster_owned_topics"))
            per_broker.append((topics_owned, heap))
            print(f"  broker :{ports['pulsar']}: owns {topics_owned:,} topics, RssAnon {start / 2**20:,.0f} -> "
                  f"{heap / 2**20:,.0f} MiB ({(heap - start) / max(1, topics_owned):,.0f} B a topic), "
                  f"/metrics {len(text) / 1024:,.0f} KiB in {scrape * 1000:,.0f} ms", flush=True)
            figures[f"cluster_scrape_ms_{ports['pulsar']}"] = scrape * 1000
        figures["cluster_heap_mib_max"] = max(h for _, h in per_broker) / 2**20
        figures["cluster_meta_rss_mib"] = status_bytes(cluster.oxia.pid, "VmRSS") / 2**20

        # Failover: kill the broker owning the most topics.
        victim_index = max(range(len(per_broker)), key=lambda i: per_broker[i][0])
        victim, victim_ports = cluster.brokers[victim_index]
        lost = per_broker[victim_index][0]
        sample_pool = random.Random(1).sample(topics, min(count, args.cluster_sample * len(cluster.brokers) * 2))
        placed = asyncio.run(owners(http_ports, sample_pool))
        sample = [t for t, broker in placed.items() if broker.endswith(f":{victim_ports['pulsar']}")]
        sample = sample[:args.cluster_sample]
        survivors = [ports["http"] for p, ports in cluster.brokers if p is not victim]
        print(f"  killing broker :{victim_ports['pulsar']} ({lost:,} topics; {len(sample):,} of them sampled)",
              flush=True)
        extra = None
        if args.cluster_extra_owned:
            started = time.monotonic()
            extra = ExtraOwnership(cluster.oxia_port, victim_ports["pulsar"], args.cluster_extra_owned,
                                   args.cluster_namespaces, args.cluster_session_seconds or 10.0)
            lost += args.cluster_extra_owned
            print(f"  gave it {args.cluster_extra_owned:,} more ownership records of unwritten topics in "
                  f"{time.monotonic() - started:.0f} s", flush=True)
        total = count + args.cluster_extra_owned
        victim.kill()
        killed = time.monotonic()
        if extra is not None:
            extra.expire()
        victim.wait()
        try:
            # Every sampled topic asked at once (each of its clients looking it up again), not in turns.
            all_owned, answered = asyncio.run(_failover(survivors, sample, total, max(1, len(sample)), killed))
        finally:
            if extra is not None:
                extra.close()
        adoption = (all_owned - killed) if all_owned else float("nan")
        served = sorted(t - killed for t in answered.values())
        p50 = served[len(served) // 2] if served else float("nan")
        p99 = served[min(len(served) - 1, int(len(served) * 0.99))] if served else float("nan")
        print(f"  the survivors own all {total:,} topics {adoption:.1f} s after the kill; the sampled topics "
              f"answered again: {len(served):,} of {len(sample):,}, p50 {p50:.1f} s, "
              f"p99 {p99:.1f} s, last {served[-1] if served else 0:.1f} s (target <= {TARGET_FAILOVER_SECONDS:g} s)",
              flush=True)
        figures.update(cluster_killed_topics=lost, cluster_adopted_all_s=adoption, cluster_sample_served=len(served),
                       cluster_sample_p99_s=p99, cluster_sample_last_s=served[-1] if served else float("nan"))
        return figures
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
