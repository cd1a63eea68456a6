"""Brokers of one cluster in this process, on a background event loop.

Each broker is a full ``start_broker`` (Pulsar, Kafka and HTTP listeners on free
ports) with its own metadata client on one in-memory embedded engine and a shared
``memory://`` object store. The loop runs in a thread so that tests can drive the
brokers with blocking clients (the official pulsar-client, ``requests``) and call
into the brokers with ``cluster.run(coro)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid

from prometheus_client import CollectorRegistry

from nereus.broker.node import BrokerNode, BrokerOptions, start_broker
from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.pulsar.server import metrics
from tests.pulsar_admin.conftest import wait_until


class _PrivateMetrics:
    """Each in-process broker's Pulsar collector in a registry of its own (the global one takes one broker)."""

    def __enter__(self):
        self.saved = metrics.register, metrics.unregister
        metrics.register = self.register
        metrics.unregister = lambda collector: None
        return self

    def __exit__(self, *exc) -> None:
        metrics.register, metrics.unregister = self.saved

    @staticmethod
    def register(service):
        collector = metrics._Collector(service)
        CollectorRegistry().register(collector)
        return collector


class Cluster:
    def __init__(self, size: int) -> None:
        self.size = size
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="cluster-loop", daemon=True)
        self.nodes: list[BrokerNode] = []
        self._stacks: list[contextlib.AsyncExitStack] = []
        self.objects_url = f"memory://cluster-{uuid.uuid4().hex}"

    def run(self, coro, timeout: float = 60.0):
        """Run ``coro`` on the brokers' loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> "Cluster":
        self._metrics = _PrivateMetrics().__enter__()
        self.thread.start()
        self.run(self._start())
        self.wait_until(lambda: all(len(n.membership.brokers) == self.size for n in self.nodes))
        return self

    async def _start(self) -> None:
        self.engine = open_engine(None, shards=2)
        self.objects = open_object_store(self.objects_url)
        for i in range(self.size):
            await self.add_broker(f"b{i}")

    async def add_broker(self, name: str) -> BrokerNode:
        stack = contextlib.AsyncExitStack()
        meta = self.engine.client(identity=name, session_timeout=5.0)
        stack.push_async_callback(meta.close)
        options = BrokerOptions(bind="127.0.0.1", http_port=0, pulsar_port=0, kafka_port=0, broker_name=name,
                                compaction_interval=0, rebalance_delay=0.1, lease_poll_seconds=0.2,
                                session_timeout=5.0)
        node = await start_broker(stack, meta, self.objects, objects_url=self.objects_url, metadata_url="",
                                  options=options)
        self._stacks.append(stack)
        self.nodes.append(node)
        return node

    def stop(self) -> None:
        async def stop() -> None:
            for stack in reversed(self._stacks):
                await stack.aclose()
            await self.objects.close()
            await self.engine.close()

        try:
            self.run(stop(), timeout=120)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=30)
            self._metrics.__exit__(None, None, None)

    # -- helpers ------------------------------------------------------------------------------
    def http(self, i: int) -> str:
        return self.nodes[i].address.http_url

    def node(self, name: str) -> BrokerNode:
        return next(n for n in self.nodes if n.membership.name == name)

    def topic_for(self, broker: int, prefix: str = "t") -> str:
        """A fresh topic name the ring gives to broker ``broker``."""
        want = self.nodes[broker].membership.name
        while True:
            name = f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"
            if self.nodes[0].placement.preferred(name).name == want:
                return name

    def spread_topic(self, partitions: int, prefix: str = "t") -> str:
        """A fresh partitioned topic name whose partitions the ring gives to more than one broker."""
        placement = self.nodes[0].placement
        while True:
            name = f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"
            if len({placement.preferred(f"{name}-partition-{i}").name for i in range(partitions)}) > 1:
                return name

    @staticmethod
    def wait_until(predicate, timeout: float = 20.0, interval: float = 0.05):
        return wait_until(predicate, "the condition", timeout=timeout, interval=interval)


def rest(name: str) -> str:
    """``persistent://t/ns/x`` -> ``persistent/t/ns/x``."""
    return name.replace("://", "/", 1)
