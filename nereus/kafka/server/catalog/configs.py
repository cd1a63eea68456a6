"""The topic, group and broker configs in force on this broker.

What is set lives in the metadata plane (``nereus.topics.topic_configs``: one record
per topic, one per broker resource, changed by CAS). ``TopicConfigs`` resolves what
is in force (``config_defs``) and keeps it for ``CACHE_SECONDS``, so a change made
through another broker takes effect here within that time; a change made here
takes effect at once. Listeners hear of every topic whose configs changed (the
broker applies retention at once).
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from ....topics import topic_configs as store
from . import config_defs as defs

log = logging.getLogger(__name__)

CACHE_SECONDS = 1.0
DEFAULT_MAX_MESSAGE_BYTES = 8 << 20  # message.max.bytes unless the broker's options set it (Pulsar's 5 MiB and more)
MIN_PURGE_AT = 1_000  # topics kept before the out-of-date ones are dropped


class TopicConfigs:
    """The configs in force on this broker, for topics and for itself."""

    def __init__(self, meta, local, *, max_message_bytes: int | None, default_partitions: int, auto_create: bool,
                 static: dict[str, str] | None = None) -> None:
        self.meta = meta
        self.local = local  # routing.LocalBroker: the node id names this broker's own configs
        # ``static``: other broker configs the broker's options set (each a name of ``BROKER_DEFS``)
        self._static = {**(static or {}), "num.partitions": str(default_partitions),
                        "auto.create.topics.enable": str(auto_create).lower()}
        # Where Nereus's defaults differ from Kafka's: still defaults (DescribeConfigs' is_default), not
        # settings of this broker.
        self._defaults = {"message.max.bytes": str(DEFAULT_MAX_MESSAGE_BYTES)}
        if max_message_bytes is not None:
            self._static["message.max.bytes"] = str(max_message_bytes)
        self.listeners: list[Callable[[str], object]] = []
        self._topics: dict[str, tuple[float, dict[str, defs.Resolved]]] = {}
        self._purge_at = MIN_PURGE_AT
        self._unset: tuple[list, dict[str, defs.Resolved]] | None = None  # (broker layers, a topic's with none set)
        self._groups: dict[str, tuple[float, dict[str, defs.Resolved]]] = {}
        self._layers: tuple[float, list] | None = None

    def static(self) -> dict[str, str]:
        """The broker configs its options set (Kafka's ``STATIC_BROKER_CONFIG``)."""
        node = str(self.local.node_id)
        listeners = ",".join(f"{protocol}://{self.local.advertised_host}:{port}"
                             for protocol, port in sorted(self.local.listener_ports.items()))
        return {**self._static, "node.id": node, "broker.id": node, "advertised.listeners": listeners}

    async def broker_layers(self) -> list[tuple[int, dict[str, str]]]:
        now = time.monotonic()
        if self._layers is not None and now - self._layers[0] < CACHE_SECONDS:
            return self._layers[1]
        meta = self.meta
        own = await store.read_broker_configs(meta, str(self.local.node_id))
        cluster = await store.read_broker_configs(meta, "")
        layers = [(defs.DYNAMIC_BROKER_CONFIG, own), (defs.DYNAMIC_DEFAULT_BROKER_CONFIG, cluster),
                  (defs.STATIC_BROKER_CONFIG, self.static()), (defs.DEFAULT_CONFIG, self._defaults)]
        self._layers = (now, layers)
        return layers

    async def topic(self, topic: str) -> dict[str, defs.Resolved]:
        """Every topic config of ``topic`` as in force now."""
        now = time.monotonic()
        cached = self._topics.get(topic)
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        resolved = self._resolve(await store.read_topic_configs(self.meta, topic), await self.broker_layers())
        self._keep(topic, resolved, now)
        return resolved

    async def topics(self, topics: list[str]) -> list[dict[str, defs.Resolved]]:
        """``topic`` of each topic, the records not kept read together, and not kept either (a pass
        over every loaded topic would fill the cache with topics nobody asks about again soon)."""
        now = time.monotonic()
        out: list = [None] * len(topics)
        reading = []
        for i, topic in enumerate(topics):
            cached = self._topics.get(topic)
            if cached is not None and now - cached[0] < CACHE_SECONDS:
                out[i] = cached[1]
            else:
                reading.append(i)
        if reading:
            layers = await self.broker_layers()
            read = await store.read_many_topic_configs(self.meta, [topics[i] for i in reading])
            for i, own in zip(reading, read):
                out[i] = self._resolve(own, layers)
        return out

    def _resolve(self, own: dict[str, str], layers: list) -> dict[str, defs.Resolved]:
        if own:
            return defs.resolve_topic(own, layers)
        # Most topics set nothing: they share one resolution of the broker's layers.
        if self._unset is None or self._unset[0] is not layers:
            self._unset = (layers, defs.resolve_topic({}, layers))
        return self._unset[1]

    def _keep(self, topic: str, resolved: dict[str, defs.Resolved], now: float) -> None:
        if len(self._topics) >= self._purge_at:  # what is out of date goes (a pass over all topics fills it)
            self._topics = {t: kept for t, kept in self._topics.items() if now - kept[0] < CACHE_SECONDS}
            self._purge_at = max(MIN_PURGE_AT, 2 * len(self._topics))
        self._topics[topic] = (now, resolved)

    async def group(self, group_id: str) -> dict[str, defs.Resolved]:
        """Every group config of ``group_id`` as in force now (cached like a topic's)."""
        now = time.monotonic()
        cached = self._groups.get(group_id)
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        resolved = defs.resolve_group(await store.read_group_configs(self.meta, group_id),
                                      await self.broker_layers())
        if len(self._groups) > 10_000:
            self._groups.clear()
        self._groups[group_id] = (now, resolved)
        return resolved

    def group_changed(self, group_id: str) -> None:
        self._groups.pop(group_id, None)

    async def value(self, topic: str, name: str) -> str:
        return (await self.topic(topic))[name].value

    def changed(self, topic: str | None) -> None:
        """Forget what was cached (``None``: a broker config, every topic) and tell the listeners."""
        if topic is None:
            self._topics.clear()
            self._groups.clear()
            self._layers = None
        else:
            self._topics.pop(topic, None)
        for listener in self.listeners:
            try:
                listener(topic)
            except Exception:
                log.exception("kafka: a config listener failed")


__all__ = ["CACHE_SECONDS", "TopicConfigs"]
