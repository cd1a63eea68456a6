"""The arithmetic of ``docs/scale.md``: how many metadata shards and servers a topic count needs.

Pure functions of measured per-shard rates (``ShardRates``, measured by the ``simulate`` part of
``bench/scale.py``) and of targets and budgets (``Targets``); nothing here runs anything, so the
plan can be checked by a unit test and recomputed for other targets.

Counts are topic records as Pulsar lists topics: a non-partitioned topic is one, a partitioned
topic one per partition (each partition is a stream of its own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Bytes of broker heap per loaded idle topic (bench/RESULTS.md, "Scale: memory per loaded idle topic").
BYTES_PER_LOADED_TOPIC = 3_276
#: Disk per topic record of one embedded engine at 10,000,000 records (bench/RESULTS.md, "Scale: topic records").
BYTES_PER_RECORD_AT_10M = 470
#: The largest shard measured: 10,000,000 topic records in an engine of 4 shards, lookups and restart
#: within their targets (bench/RESULTS.md, "Scale: topic records"). Larger shards are not measured.
LARGEST_SHARD_MEASURED = 2_500_000
#: Cores one process's Python work can use: the loop and every shard thread of an embedded engine
#: run Python under one interpreter lock (fsync and LMDB's page writes wait outside it).
PROCESS_CORES = 1.0


@dataclass(frozen=True)
class ShardRates:
    """What one shard did when many callers kept it busy, and what a record costs on disk."""

    creates_per_s: float  # topic records created (the admin path's metadata operations for one)
    lookups_per_s: float  # lookups of owned topics (PARTITIONED_METADATA + LOOKUP reads)
    claims_per_s: float  # ownership claims (read of the owner record, ephemeral put)
    bytes_per_record: float  # engine disk per topic record
    bytes_per_owner_record: float  # engine disk per ownership record (a loaded topic)
    broker_creates_per_s: float  # topic records one broker creates through its admin code
    # CPU seconds (of the process: callers and shard thread) per creation, lookup and claim
    create_cpu_s: float
    lookup_cpu_s: float
    claim_cpu_s: float


@dataclass(frozen=True)
class Targets:
    """What the cluster must hold and do, and the budgets a shard, a server and a broker get."""

    topic_records: int = 100_000_000
    records_per_shard: int = LARGEST_SHARD_MEASURED  # size budget of a shard
    create_rate: float = 10_000.0  # topic records per second wanted while creating
    loaded_topics: int = 10_000_000  # topics loaded at once (with an ownership record each)
    broker_topic_heap: int = 4 << 30  # broker heap given to loaded topics
    bytes_per_loaded_topic: int = BYTES_PER_LOADED_TOPIC
    failover_seconds: float = 60.0  # the topics of a failed broker claimed again within this
    lookups_per_topic: float = 2.0  # clients of a topic that look it up again after its broker failed
    utilization: float = 0.5  # share of a shard's measured rates the plan uses (the rest is headroom)
    shards_per_server: int = 8  # shard replicas a metadata server hosts (a core each, one disk)
    replicas: int = 3  # copies of each shard (an Oxia cluster's replication factor)
    server_heap: int = 256 << 20  # a metadata server's own memory beside the page cache (93 MB at 10M records)
    disk_headroom: float = 2.0  # an LMDB map grows by doubling


@dataclass(frozen=True)
class Plan:
    """The shard count (the largest of what size, creation rate and failover each need), the servers
    and brokers for it, and how long creating everything and a broker's failover take."""

    shards_for_size: int
    shards_for_creates: int
    shards_for_failover: int
    shards: int
    records_per_shard: float
    bytes_per_shard: float
    servers: int
    shard_replicas_per_server: float
    disk_per_server: float  # bytes, with the map's headroom
    memory_per_server: float  # bytes: the page cache of its shards' data plus the server's heap
    brokers: int  # brokers whose heap holds the loaded topics
    failover_topics: float  # loaded topics of one broker: claimed again when it fails
    create_seconds: float  # all topic records, at the measured rates of the planned shards and brokers
    create_bound: str  # "shards" or "brokers": which of them limits the creation
    reclaim_seconds: float  # one failed broker's topics claimed and looked up again, at the measured rates
    # The same two with every shard in ONE process (one ``nereus oxia``): its Python work on one core.
    one_process_create_seconds: float
    one_process_reclaim_seconds: float

    @property
    def bound(self) -> str:
        """Which budget set the shard count."""
        sizes = {"size": self.shards_for_size, "creation rate": self.shards_for_creates,
                 "failover": self.shards_for_failover}
        return max(sizes, key=sizes.__getitem__)


def plan(rates: ShardRates, targets: Targets = Targets()) -> Plan:
    """The shards, metadata servers and brokers ``targets`` need at ``rates``."""
    t = targets
    brokers = max(1, math.ceil(t.loaded_topics * t.bytes_per_loaded_topic / t.broker_topic_heap))
    failover_topics = t.loaded_topics / brokers
    # Shard-seconds of work when a broker fails: its topics claimed, and looked up by their clients.
    failover_work = failover_topics * (1 / rates.claims_per_s + t.lookups_per_topic / rates.lookups_per_s)
    shards_for_size = math.ceil(t.topic_records / t.records_per_shard)
    shards_for_creates = math.ceil(t.create_rate / (rates.creates_per_s * t.utilization))
    shards_for_failover = math.ceil(failover_work / (t.failover_seconds * t.utilization))
    shards = max(shards_for_size, shards_for_creates, shards_for_failover, 1)

    data = t.topic_records * rates.bytes_per_record + t.loaded_topics * rates.bytes_per_owner_record
    bytes_per_shard = data / shards
    servers = max(t.replicas, math.ceil(shards * t.replicas / t.shards_per_server))
    per_server = shards * t.replicas / servers

    by_shards = shards * rates.creates_per_s
    by_brokers = brokers * rates.broker_creates_per_s
    one_process = {kind: machine_rate(shards, rate, cpu)[0] for kind, rate, cpu in (
        ("create", rates.creates_per_s, rates.create_cpu_s), ("lookup", rates.lookups_per_s, rates.lookup_cpu_s),
        ("claim", rates.claims_per_s, rates.claim_cpu_s))}
    return Plan(
        shards_for_size=shards_for_size, shards_for_creates=shards_for_creates,
        shards_for_failover=shards_for_failover, shards=shards,
        records_per_shard=t.topic_records / shards, bytes_per_shard=bytes_per_shard,
        servers=servers, shard_replicas_per_server=per_server,
        disk_per_server=bytes_per_shard * per_server * t.disk_headroom,
        memory_per_server=bytes_per_shard * per_server + t.server_heap,
        brokers=brokers, failover_topics=failover_topics,
        create_seconds=t.topic_records / min(by_shards, by_brokers),
        create_bound="shards" if by_shards <= by_brokers else "brokers",
        reclaim_seconds=failover_work / shards,
        one_process_create_seconds=t.topic_records / min(one_process["create"], by_brokers),
        one_process_reclaim_seconds=failover_topics * (1 / one_process["claim"]
                                                       + t.lookups_per_topic / one_process["lookup"]),
    )


def machine_rate(shards: int, one_shard_rate: float, cpu_seconds_per_item: float,
                 cores: float = PROCESS_CORES) -> tuple[float, str]:
    """The rate ``shards`` shards of one embedded engine reach on this machine, and what bounds it.

    Each shard waits on its own fsync'd group commits, so while the process has CPU to spare,
    shards add up (``shards * one_shard_rate``: fsync-bound); the process's Python work (the
    callers' and every shard thread's) shares ``cores``, which caps the sum (CPU-bound).
    """
    fsync_bound = shards * one_shard_rate
    cpu_bound = cores / cpu_seconds_per_item
    return (fsync_bound, "fsync-bound") if fsync_bound <= cpu_bound else (cpu_bound, "CPU-bound")


def spread_limit(mean_per_shard: float, sigmas: float = 4.0) -> float:
    """The max/mean records per shard that hashing keys into even ranges stays under: counts per shard
    are binomial, so the largest lies within a few standard deviations (sqrt of the mean) of it."""
    return 1 + sigmas / math.sqrt(mean_per_shard)


def within(measured: float, predicted: float, tolerance: float) -> bool:
    """True when ``measured`` is within ``tolerance`` (a fraction) of ``predicted``."""
    return abs(measured - predicted) <= tolerance * predicted
