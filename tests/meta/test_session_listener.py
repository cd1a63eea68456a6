"""A metadata client tells its owner when one of its sessions is lost.

Both backends run on an embedded engine with a manual clock and no sweeper of its
own (the Oxia client through an in-process ``start_oxia_server``), so the server
expires a session only when a test says so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

import pytest

from nereus.meta import MetadataStore
from nereus.meta.embedded import Engine, ManualClock
from nereus.meta.embedded.store import CLOSE_SESSION
from nereus.meta.errors import SessionNotFound

TIMEOUT = 2.0  # session timeout of the clients under test (Oxia's least): heartbeats every 0.5 s


class Backend:
    def __init__(self, name: str):
        self.name = name
        self.clock = ManualClock()
        self.engine = Engine(None, shards=2, clock=self.clock, sweep_interval=3600)
        self.server = None

    async def start(self) -> None:
        if self.name == "oxia":
            from nereus.meta.oxia import start_oxia_server

            self.server = await start_oxia_server(self.engine, port=0)

    def client(self, **kwargs) -> MetadataStore:
        if self.name == "oxia":
            from nereus.meta.oxia.client import OxiaMetadataStore

            return OxiaMetadataStore(self.server.address, "default", **kwargs)
        return self.engine.client(**kwargs)

    async def freeze(self, seconds: float) -> None:
        """The client process stops for ``seconds`` (SIGSTOP, then SIGCONT)."""
        if self.name == "oxia":
            time.sleep(seconds)  # the whole event loop stands still; the server's clock does not move
        else:
            self.clock.advance(seconds)  # the client's clock jumps; the server sweeps by hand only

    async def server_closes(self, key: str, sid: int) -> None:
        """The server drops session ``sid`` (of the shard of ``key``) on its own."""
        shard = self.engine.namespace().shard_for(key)
        shard.sessions.closed(sid)
        await shard.call(CLOSE_SESSION, sid)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        await self.engine.close()


@pytest.fixture(params=["embedded", "oxia"])
async def backend(request):
    b = Backend(request.param)
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


async def wait_for(cond: Callable[[], Awaitable[bool] | bool], timeout: float = 4.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        res = cond()
        if not isinstance(res, bool):
            res = await res
        if res:
            return
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def gone(store: MetadataStore, key: str) -> bool:
    return await store.get(key) is None


async def test_server_side_expiry_is_reported_once_and_a_new_session_follows(backend):
    owner, other = backend.client(session_timeout=TIMEOUT), backend.client()
    calls: list[None] = []
    owner.add_session_listener(lambda: calls.append(None))
    try:
        old = (await owner.put("/reg/a", b"x", ephemeral=True, partition_key="p")).version.session_id
        owner._pause_heartbeats()  # type: ignore[attr-defined]
        backend.clock.advance(TIMEOUT + 1)
        await backend.engine.expire_sessions()
        assert await other.get("/reg/a", partition_key="p") is None
        assert calls == []  # nothing told the client yet
        try:
            await owner.put("/reg/a", b"x", ephemeral=True, partition_key="p")
        except SessionNotFound:
            pass  # the Oxia client learns it from this answer; the embedded one replaces the session first
        assert len(calls) == 1
        new = await owner.put("/reg/b", b"x", ephemeral=True, partition_key="p")  # same shard
        assert new.version.session_id != old
        rec = await other.get("/reg/b", partition_key="p")
        assert rec.version.session_id == new.version.session_id
        assert len(calls) == 1
        assert owner.sessions_healthy
    finally:
        await owner.close()
        await other.close()


async def test_heartbeat_answer_reports_a_session_the_server_dropped(backend, caplog):
    owner, other = backend.client(session_timeout=TIMEOUT), backend.client()
    calls: list[None] = []

    def broken() -> None:
        raise RuntimeError("listener bug")

    owner.add_session_listener(broken)  # logged; the next listener still runs
    owner.add_session_listener(lambda: calls.append(None))
    try:
        rec = await owner.put("/reg/a", b"x", ephemeral=True)
        assert owner.sessions_healthy
        await backend.server_closes("/reg/a", rec.version.session_id)
        await wait_for(lambda: len(calls) == 1)
        assert not owner.sessions_healthy
        assert any("listener bug" in r.exc_text for r in caplog.records if r.exc_text)
        new = await owner.put("/reg/a", b"x", ephemeral=True)
        assert new.version.session_id != rec.version.session_id
        assert owner.sessions_healthy
        assert len(calls) == 1
    finally:
        await owner.close()
        await other.close()


async def test_lease_runs_out_while_frozen(backend):
    owner, other = backend.client(session_timeout=TIMEOUT), backend.client()
    calls: list[bool] = []
    owner.add_session_listener(lambda: calls.append(owner.sessions_healthy))
    try:
        old = (await owner.put("/reg/a", b"x", ephemeral=True)).version.session_id
        await backend.freeze(TIMEOUT * 1.5)
        # The server still holds the session (its clock did not move, or it did not
        # sweep): only the client's own lease can tell, at its first heartbeat tick.
        assert not owner.sessions_healthy
        await wait_for(lambda: len(calls) == 1, timeout=TIMEOUT)
        assert calls == [False]
        # The client closed the old session itself: its record goes now.
        await wait_for(lambda: gone(other, "/reg/a"))
        new = await owner.put("/reg/a", b"x", ephemeral=True)
        assert new.version.session_id != old
        assert len(calls) == 1
    finally:
        await owner.close()
        await other.close()


async def test_closed_client_never_calls_listeners(backend, caplog):
    owner, other = backend.client(session_timeout=TIMEOUT), backend.client()
    calls: list[None] = []
    owner.add_session_listener(lambda: calls.append(None))
    try:
        await owner.put("/reg/a", b"x", ephemeral=True)
        await backend.freeze(TIMEOUT * 1.5)  # the lease ran out, and nobody looked yet
        await owner.close()  # closing the sessions is no loss
        assert await gone(other, "/reg/a")
        with caplog.at_level(logging.DEBUG):
            await asyncio.sleep(TIMEOUT / 2)  # a few heartbeat ticks, had any survived the close
        assert calls == []
        assert not any("lost" in r.getMessage() for r in caplog.records)
    finally:
        await owner.close()
        await other.close()
