"""Prometheus collectors whose values come from the metadata plane, read off the scrape path.

A scrape runs on the HTTP server's thread and must not wait on the metadata plane.
``RefreshedCollector`` answers every scrape with the last values read and, when they
are older than ``refresh_seconds``, schedules one new read on the broker's event
loop; ``register`` puts a collector in the default registry once per process.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
from typing import Generic, TypeVar

from prometheus_client import REGISTRY

log = logging.getLogger(__name__)

Value = TypeVar("Value")


class RefreshedCollector(abc.ABC, Generic[Value]):
    """A custom collector: ``families(value)`` of the last ``read()``, re-read in the background."""

    #: What the failure log line says was being read.
    what = "metrics"

    def __init__(self, empty: Value, *, refresh_seconds: float, clock=time.monotonic) -> None:
        self.value: Value = empty
        self._empty = empty
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self.read_at: float | None = None
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task | None = None
        self._scheduled = False

    @abc.abstractmethod
    async def read(self) -> Value:
        """The current value, read from the metadata plane."""

    @abc.abstractmethod
    def families(self, value: Value) -> list:
        """The metric families that show ``value``."""

    def describe(self):
        return self.families(self._empty)  # registering must not start a read

    def collect(self):
        fresh = self.read_at is not None and self.clock() - self.read_at < self.refresh_seconds
        if not fresh and not self._scheduled and not self._loop.is_closed():
            self._scheduled = True
            self._loop.call_soon_threadsafe(self._start)  # a scrape may come from any thread
        return self.families(self.value)

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = self._loop.create_task(self._refresh())

    async def _refresh(self) -> None:
        try:
            self.value = await self.read()
        except Exception as exc:  # the last values stay; the next scrape tries again
            log.warning("reading the %s failed: %s", self.what, exc)
        finally:
            self.read_at = self.clock()
            self._scheduled = False

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


def register(collector: RefreshedCollector):
    """Register ``collector``; None when this process already has one of its series (in-process clusters)."""
    try:
        REGISTRY.register(collector)
    except ValueError:
        log.debug("the %s are already registered in this process", collector.what)
        return None
    return collector


async def unregister(collector: RefreshedCollector | None) -> None:
    if collector is not None:
        REGISTRY.unregister(collector)
        await collector.close()
