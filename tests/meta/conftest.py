"""Backends for the MetadataStore contract suite.

To add a backend, subclass ``Backend`` and add it to ``BACKENDS``; every test in
test_contract.py then runs against it. ``oxia`` is the Oxia-protocol client
against a ``nereus oxia`` server process shared by the session (one namespace
per test keeps the tests apart).
"""

from __future__ import annotations

import asyncio
import itertools
import tempfile

import pytest

from nereus.meta import MetadataStore
from nereus.meta.embedded import Engine, ManualClock


class Backend:
    """How the contract suite obtains clients and forces a session to expire."""

    name = "abstract"

    async def start(self) -> None: ...

    def client(self, **kwargs) -> MetadataStore:
        raise NotImplementedError

    async def expire_sessions(self, client: MetadataStore) -> None:
        """Make ``client``'s sessions expire as if it had hung, and wait for the cleanup."""
        raise NotImplementedError

    async def advance_time(self, seconds: float) -> bool:
        """Move the server clock if the backend allows it; False when it cannot."""
        return False

    async def stop(self) -> None: ...


class EmbeddedBackend(Backend):
    def __init__(self, data_dir: str | None, shards: int = 4):
        self.name = "embedded-disk" if data_dir else "embedded-memory"
        self.clock = ManualClock()
        self.engine = Engine(data_dir, shards=shards, clock=self.clock)

    def client(self, **kwargs) -> MetadataStore:
        return self.engine.client(**kwargs)

    async def expire_sessions(self, client: MetadataStore) -> None:
        client._pause_heartbeats()  # type: ignore[attr-defined]
        self.clock.advance(client.session_timeout + 1)  # type: ignore[attr-defined]
        await self.engine.expire_sessions()

    async def advance_time(self, seconds: float) -> bool:
        self.clock.advance(seconds)
        return True

    async def stop(self) -> None:
        await self.engine.close()


class OxiaBackend(Backend):
    name = "oxia"
    _names = itertools.count()
    _tmp = tempfile.TemporaryDirectory(prefix="nereus-oxia-contract-")

    def __init__(self) -> None:
        from tests.oxia.serverproc import shared_server

        self.server = shared_server(self._tmp.name)
        self.namespace = f"contract-{next(self._names)}"

    def client(self, **kwargs) -> MetadataStore:
        from nereus.meta.oxia.client import OxiaMetadataStore

        return OxiaMetadataStore(self.server.address, self.namespace, **kwargs)

    async def expire_sessions(self, client: MetadataStore) -> None:
        # A real server clock: stop heartbeating and wait out the timeout and a sweep.
        client._pause_heartbeats()  # type: ignore[attr-defined]
        await asyncio.sleep(client.session_timeout + 1.0)  # type: ignore[attr-defined]


BACKENDS = {
    "embedded-disk": lambda tmp_path: EmbeddedBackend(str(tmp_path / "meta")),
    "embedded-memory": lambda tmp_path: EmbeddedBackend(None),
    "oxia": lambda tmp_path: OxiaBackend(),
}


@pytest.fixture(params=sorted(BACKENDS))
async def backend(request, tmp_path):
    b = BACKENDS[request.param](tmp_path)
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


@pytest.fixture
async def store(backend):
    c = backend.client()
    try:
        yield c
    finally:
        await c.close()
