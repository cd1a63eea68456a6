"""Per-topic configs under Kafka's names, one record per topic in the metadata plane.

``/nereus/kafka/topic-configs/{quoted topic}`` -> ``{"configs": {name: value},
"replication_factor": n, "replicas": {partition: [node id, ...]}}``: the configs set on
the topic (Kafka's ``DYNAMIC_TOPIC_CONFIG``), the replication factor it was created with
(absent: as many as there are live brokers) and the replica lists a client assigned to
its partitions (absent: none); every config not set is the broker's default. The Kafka topic ``t`` is the Pulsar topic
``persistent://public/default/t`` (its partitions share the record). Values are
kept as the strings Kafka clients send, already validated by the Kafka layer.
``/nereus/kafka/broker-configs/{name}`` holds dynamic broker configs the same way
(name ``""``: the cluster-wide default, else a broker's node id).

Every change is one CAS on the record (``update``); readers anywhere see it with
their next read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import quote, unquote

from ..ledger.naming import InvalidTopicName, TopicName
from ..meta import cas

TOPIC_CONFIGS_ROOT = "/nereus/kafka/topic-configs/"
KAFKA_NAMESPACE = "persistent://public/default/"  # where Kafka topics live
BROKER_CONFIGS_ROOT = "/nereus/kafka/broker-configs/"
GROUP_CONFIGS_ROOT = "/nereus/kafka/group-configs/"
_END = "\U0010ffff"


def topic_configs_key(topic: str) -> str:
    return TOPIC_CONFIGS_ROOT + quote(topic, safe="")


def broker_configs_key(name: str) -> str:
    return BROKER_CONFIGS_ROOT + (quote(name, safe="") or "-default")


def _record(value: bytes | None) -> dict:
    return json.loads(value) if value else {}


def _decode(value: bytes | None) -> dict[str, str]:
    return dict(_record(value).get("configs", {}))


def _encode(configs: dict[str, str], record: dict | None = None) -> bytes:
    return json.dumps({**(record or {}), "configs": dict(sorted(configs.items()))}).encode()


async def _read(meta, key: str) -> dict[str, str]:
    rec = await meta.get(key)
    return _decode(rec.value if rec is not None else None)


async def _update(meta, key: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
    def apply(old: bytes | None) -> bytes | None:
        before = _decode(old)
        after = change(dict(before))
        return None if after == before else _encode(after, _record(old))

    rec = await cas.update(meta, key, apply)
    return _decode(rec.value if rec is not None else None)


async def read_topic_configs(meta, topic: str) -> dict[str, str]:
    """The configs set on ``topic`` (empty when none are)."""
    return await _read(meta, topic_configs_key(topic))


async def read_many_topic_configs(meta, topics: list[str]) -> list[dict[str, str]]:
    """``read_topic_configs`` of each topic, the records read together."""
    records = await meta.get_many([topic_configs_key(topic) for topic in topics]) if topics else []
    return [_decode(rec.value if rec is not None else None) for rec in records]


async def update_topic_configs(meta, topic: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict:
    """Apply the pure ``change`` (old configs -> new configs) with one CAS; returns the new configs."""
    return await _update(meta, topic_configs_key(topic), change)


async def replace_topic_configs(meta, topic: str, configs: dict[str, str], replication_factor: int | None = None,
                                replicas: dict[int, list[int]] | None = None) -> None:
    """Set exactly ``configs`` (the replication factor, the assigned replicas) on a new ``topic``;
    none: no record."""
    extra = {} if replication_factor is None else {"replication_factor": replication_factor}
    if replicas:
        extra["replicas"] = {str(index): list(ids) for index, ids in sorted(replicas.items())}
    if configs or extra:
        await meta.put(topic_configs_key(topic), _encode(configs, extra))
    else:
        await delete_topic_configs(meta, topic)


async def assign_replicas(meta, topic: str, replicas: dict[int, list[int]]) -> None:
    """Record the replica lists assigned to new partitions of ``topic`` (its other fields are kept)."""
    def apply(old: bytes | None) -> bytes | None:
        record = _record(old)
        record["replicas"] = {**record.get("replicas", {}),
                              **{str(index): list(ids) for index, ids in replicas.items()}}
        return json.dumps({**record, "configs": record.get("configs", {})}).encode()

    if replicas:
        await cas.update(meta, topic_configs_key(topic), apply)


@dataclass(frozen=True, slots=True)
class ReplicaLayout:
    """How a topic's replicas were asked for: a factor (None: every live broker) and assigned lists."""

    factor: int | None = None
    assigned: dict[int, tuple[int, ...]] = field(default_factory=dict)


def _assignable(topic: str) -> tuple[str, int] | None:
    """(Kafka topic, partition index) of a partition topic that may carry an assignment."""
    try:
        name = TopicName.parse(topic)
    except InvalidTopicName:
        return None
    base = str(name.base)
    if name.partition_index < 0 or not base.startswith(KAFKA_NAMESPACE):
        return None
    return base[len(KAFKA_NAMESPACE):], name.partition_index


def _first_replica(value: bytes | None, index: int) -> int | None:
    ids = _record(value).get("replicas", {}).get(str(index))
    return ids[0] if ids else None


def may_prefer_a_leader(topic: str) -> bool:
    """Can a client have assigned ``topic`` a preferred leader (is it a Kafka topic's partition)?"""
    return _assignable(topic) is not None


async def preferred_leader(meta, topic: str) -> int | None:
    """The node id a Kafka client assigned first among the replicas of partition topic ``topic``
    (its preferred leader), or None when none was assigned."""
    found = _assignable(topic)
    if found is None:
        return None
    rec = await meta.get(topic_configs_key(found[0]))
    return _first_replica(rec.value if rec is not None else None, found[1])


async def preferred_leaders(meta, topics: list[str]) -> list[int | None]:
    """``preferred_leader`` of each topic, every record read once (partitions share theirs)."""
    found = [_assignable(topic) for topic in topics]
    keys = list(dict.fromkeys(topic_configs_key(f[0]) for f in found if f is not None))
    values = {key: rec.value if rec is not None else None
              for key, rec in zip(keys, await meta.get_many(keys) if keys else [])}
    return [None if f is None else _first_replica(values[topic_configs_key(f[0])], f[1]) for f in found]


async def replica_layouts(meta, topics) -> dict[str, ReplicaLayout]:
    """Each topic's replica layout as created (and grown)."""
    topics = list(topics)
    records = await meta.get_many([topic_configs_key(topic) for topic in topics])
    out = {}
    for topic, rec in zip(topics, records):
        record = _record(rec.value if rec is not None else None)
        assigned = {int(index): tuple(ids) for index, ids in record.get("replicas", {}).items()}
        out[topic] = ReplicaLayout(record.get("replication_factor"), assigned)
    return out


async def delete_topic_configs(meta, topic: str) -> None:
    await meta.delete(topic_configs_key(topic))


async def all_topic_configs(meta) -> dict[str, dict[str, str]]:
    """Every topic with configs set: topic -> its configs."""
    found = {}
    async for rec in meta.range_scan(TOPIC_CONFIGS_ROOT, TOPIC_CONFIGS_ROOT + _END):
        found[unquote(rec.key[len(TOPIC_CONFIGS_ROOT):])] = _decode(rec.value)
    return found


async def read_broker_configs(meta, name: str) -> dict[str, str]:
    """Dynamic configs of broker ``name`` (``""``: the cluster-wide default)."""
    return await _read(meta, broker_configs_key(name))


async def update_broker_configs(meta, name: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict:
    return await _update(meta, broker_configs_key(name), change)



async def read_group_configs(meta, group: str) -> dict[str, str]:
    """Configs set on Kafka group ``group`` (KIP-848/932 group configs)."""
    return await _read(meta, GROUP_CONFIGS_ROOT + quote(group, safe=""))


async def update_group_configs(meta, group: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict:
    return await _update(meta, GROUP_CONFIGS_ROOT + quote(group, safe=""), change)


async def configured_groups(meta) -> list[str]:
    """The groups with configs set, in key order."""
    return [unquote(key[len(GROUP_CONFIGS_ROOT):]) async for key in meta.list(GROUP_CONFIGS_ROOT,
                                                                              GROUP_CONFIGS_ROOT + _END)]

__all__ = ["BROKER_CONFIGS_ROOT", "GROUP_CONFIGS_ROOT", "ReplicaLayout", "TOPIC_CONFIGS_ROOT", "all_topic_configs",
           "assign_replicas", "broker_configs_key", "configured_groups", "may_prefer_a_leader", "preferred_leader", "preferred_leaders", "read_many_topic_configs", "delete_topic_configs", "read_broker_configs", "read_group_configs",
           "read_topic_configs", "replace_topic_configs", "replica_layouts", "topic_configs_key",
           "update_broker_configs", "update_group_configs", "update_topic_configs"]
