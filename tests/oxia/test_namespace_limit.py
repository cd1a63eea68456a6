"""The Oxia-protocol server creates a bounded number of namespaces on demand."""

from __future__ import annotations

import threading

import pytest

from nereus.meta.embedded import Engine
from nereus.meta.errors import NamespaceNotFound
from nereus.meta.oxia import start_oxia_server
from nereus.meta.oxia.client import OxiaMetadataStore

from .serverproc import ServerProcess


def _shard_threads() -> set[str]:
    """The engine's shard threads now alive (other threads of the process come and go)."""
    return {t.name for t in threading.enumerate() if t.name.startswith("meta-") and t.name != "meta-session-sweeper"}


async def _use(address: str, namespace: str) -> None:
    """Write and read back one key in ``namespace`` (raises what the server answers)."""
    client = OxiaMetadataStore(address, namespace, retry_timeout=1.0)
    try:
        await client.put("/k", namespace.encode())
        assert (await client.get("/k")).value == namespace.encode()
    finally:
        await client.close()


async def test_namespaces_beyond_the_limit_are_not_found_and_cost_no_threads(tmp_path):
    engine = Engine(str(tmp_path / "meta"), shards=2)
    server = await start_oxia_server(engine, port=0, namespaces=["configured"], max_namespaces=2)
    try:
        await _use(server.address, "default")
        await _use(server.address, "configured")  # exists from the start: not counted
        await _use(server.address, "new-1")
        await _use(server.address, "new-2")
        shards = _shard_threads()
        assert shards  # the admitted namespaces' shards
        for name in ("new-3", "new-4", "new-5"):
            with pytest.raises(NamespaceNotFound):
                await _use(server.address, name)
        assert _shard_threads() == shards  # no shard threads for refused names
        await _use(server.address, "new-1")  # admitted ones stay usable
    finally:
        await server.stop()
        await engine.close()

    # Namespaces created in an earlier run exist: they do not count against the limit.
    engine = Engine(str(tmp_path / "meta"), shards=2)
    server = await start_oxia_server(engine, port=0, max_namespaces=0)
    try:
        await _use(server.address, "new-2")
        await _use(server.address, "configured")
        with pytest.raises(NamespaceNotFound):
            await _use(server.address, "new-3")
    finally:
        await server.stop()
        await engine.close()


async def test_the_command_line_server_takes_max_namespaces(tmp_path):
    proc = ServerProcess(str(tmp_path / "meta"), shards=1, max_namespaces=1).start()
    try:
        await _use(proc.address, "default")
        await _use(proc.address, "one")
        with pytest.raises(NamespaceNotFound):
            await _use(proc.address, "two")
    finally:
        proc.stop()
