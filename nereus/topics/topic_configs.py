"""Per-topic configs under Kafka's names, one record per topic in the metadata plane.

``/nereus/kafka/topic-configs/{quoted topic}`` -> ``{"configs": {name: value},
"replication_factor": n}``: the configs set on the topic (Kafka's
``DYNAMIC_TOPIC_CONFIG``) and the replication factor it was created with (absent:
as many as there are live brokers); every config not set is
the broker's default. The Kafka topic ``t`` is the Pulsar topic
``persistent://public/default/t`` (its partitions share the record). Values are
kept as the strings Kafka clients send, already validated by the Kafka layer.
``/nereus/kafka/broker-configs/{name}`` holds dynamic broker configs the same way
(name ``""``: the cluster-wide default, else a broker's node id).

Every change is one CAS on the record (``update``); readers anywhere see it with
their next read.
"""

from __future__ import annotations

import asyncio
import json
from typing import Callable
from urllib.parse import quote, unquote

from ..meta import cas

TOPIC_CONFIGS_ROOT = "/nereus/kafka/topic-configs/"
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


async def update_topic_configs(meta, topic: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict:
    """Apply the pure ``change`` (old configs -> new configs) with one CAS; returns the new configs."""
    return await _update(meta, topic_configs_key(topic), change)


async def replace_topic_configs(meta, topic: str, configs: dict[str, str],
                                replication_factor: int | None = None) -> None:
    """Set exactly ``configs`` (and the replication factor) on a new ``topic``; none: no record."""
    if configs or replication_factor is not None:
        extra = {} if replication_factor is None else {"replication_factor": replication_factor}
        await meta.put(topic_configs_key(topic), _encode(configs, extra))
    else:
        await delete_topic_configs(meta, topic)


async def replication_factors(meta, topics) -> dict[str, int | None]:
    """The replication factor each topic was created with (None: not given)."""
    topics = list(topics)
    records = await asyncio.gather(*(meta.get(topic_configs_key(topic)) for topic in topics))
    return {topic: _record(rec.value if rec is not None else None).get("replication_factor")
            for topic, rec in zip(topics, records)}


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

__all__ = ["BROKER_CONFIGS_ROOT", "GROUP_CONFIGS_ROOT", "TOPIC_CONFIGS_ROOT", "all_topic_configs",
           "broker_configs_key", "delete_topic_configs", "read_broker_configs", "read_group_configs",
           "read_topic_configs", "replace_topic_configs", "replication_factors", "topic_configs_key",
           "update_broker_configs", "update_group_configs", "update_topic_configs"]
