"""The arithmetic of docs/scale.md (``bench/_scale_plan.py``): shard, server and broker counts from
per-shard rates and targets. Nothing here measures anything."""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "_scale_plan.py"
_SPEC = importlib.util.spec_from_file_location("_scale_plan", _PATH)
scale_plan = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("_scale_plan", scale_plan)  # dataclasses look their module up by name
_SPEC.loader.exec_module(scale_plan)

RATES = scale_plan.ShardRates(creates_per_s=5_000, lookups_per_s=10_000, claims_per_s=10_000,
                              bytes_per_record=500, bytes_per_owner_record=400, broker_creates_per_s=4_000,
                              create_cpu_s=100e-6, lookup_cpu_s=50e-6, claim_cpu_s=40e-6)


def test_a_size_bound_plan():
    t = scale_plan.Targets(topic_records=100_000_000, records_per_shard=2_500_000, create_rate=10_000,
                           loaded_topics=10_000_000, broker_topic_heap=10_000_000 * 6_000 // 10,
                           bytes_per_loaded_topic=6_000, failover_seconds=60, lookups_per_topic=2, utilization=0.5,
                           shards_per_server=8, replicas=3, server_heap=0, disk_headroom=2)
    p = scale_plan.plan(RATES, t)
    assert p.shards_for_size == 40
    assert p.shards_for_creates == 4  # 10,000/s at half of 5,000/s a shard
    assert p.brokers == 10 and p.failover_topics == 1_000_000
    # A million claims (100 shard-seconds) and two million lookups (200): 300 shard-seconds in 30.
    assert p.shards_for_failover == 10
    assert p.shards == 40 and p.bound == "size"
    assert p.records_per_shard == 2_500_000
    assert p.bytes_per_shard == (100_000_000 * 500 + 10_000_000 * 400) / 40
    assert p.servers == 15 and p.shard_replicas_per_server == 8
    assert p.disk_per_server == p.bytes_per_shard * 8 * 2
    assert p.memory_per_server == p.bytes_per_shard * 8
    # 40 shards create 200,000/s, 10 brokers 40,000/s: the brokers bound it.
    assert p.create_bound == "brokers" and p.create_seconds == 100_000_000 / 40_000
    assert p.reclaim_seconds == pytest.approx(300 / 40)
    # One process: one core at 100 us a creation is 10,000/s; 25,000 claims/s and 20,000 lookups/s.
    assert p.one_process_create_seconds == pytest.approx(100_000_000 / 10_000)
    assert p.one_process_reclaim_seconds == pytest.approx(1_000_000 / 25_000 + 2_000_000 / 20_000)


def test_rate_budgets_raise_the_shard_count():
    t = scale_plan.Targets(topic_records=1_000_000, create_rate=100_000)
    p = scale_plan.plan(RATES, t)
    assert p.shards_for_size == 1
    assert p.shards == p.shards_for_creates == 40 and p.bound == "creation rate"
    slow_claims = scale_plan.plan(replace(RATES, claims_per_s=100), scale_plan.Targets(topic_records=1_000_000))
    assert slow_claims.bound == "failover" and slow_claims.shards == slow_claims.shards_for_failover


def test_at_least_one_server_per_replica():
    small = scale_plan.Targets(topic_records=1_000, loaded_topics=1_000, create_rate=1_000)
    p = scale_plan.plan(RATES, small)
    assert p.shards == 1 and p.servers == 3 and p.shard_replicas_per_server == 1
    assert scale_plan.plan(RATES, replace(small, replicas=1)).servers == 1


def test_machine_rate_is_fsync_bound_until_the_core_is_used_up():
    assert scale_plan.machine_rate(2, 1_000, 100e-6) == (2_000, "fsync-bound")
    assert scale_plan.machine_rate(8, 3_000, 100e-6) == (pytest.approx(10_000), "CPU-bound")
    assert scale_plan.machine_rate(8, 3_000, 100e-6, cores=2) == (pytest.approx(20_000), "CPU-bound")


def test_spread_limit_and_tolerance():
    assert scale_plan.spread_limit(10_000) == pytest.approx(1.04)
    assert scale_plan.spread_limit(2_500_000) < 1.003
    assert scale_plan.within(90, 100, 0.1) and not scale_plan.within(89, 100, 0.1)
    assert not math.isnan(scale_plan.spread_limit(1))
