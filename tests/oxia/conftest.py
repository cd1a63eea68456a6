"""Fixtures of the Oxia-protocol tests: a shared ``nereus oxia`` process, namespaces."""

from __future__ import annotations

import itertools
import tempfile
import threading
import time
import types

import pytest
import xxhash

from tests.oxia.serverproc import shared_server

_names = itertools.count()
_tmp = tempfile.TemporaryDirectory(prefix="nereus-oxia-tests-")


@pytest.fixture
def server():
    return shared_server(_tmp.name)


@pytest.fixture
def namespace():
    """A fresh namespace per test, so tests sharing the server do not see each other."""
    return f"t{next(_names)}"


class _StrXxh:
    """oxia 0.2.1 hashes ``str`` keys with xxhash, whose 4.x releases want bytes."""

    @staticmethod
    def xxh64(key):
        return xxhash.xxh64(key.encode() if isinstance(key, str) else key)


class _Xxh3Router:
    """Routes as Oxia's XXHASH3 shard key router (the client itself uses xxh64)."""

    @staticmethod
    def xxh64(key):
        class _Digest:
            @staticmethod
            def intdigest() -> int:
                return xxhash.xxh3_64_intdigest(key.encode() if isinstance(key, str) else key)

        return _Digest


class _AfterTheBarrier(threading.Thread):
    """oxia 0.2.1's service discovery starts its thread before it makes the barrier the thread
    meets once the first shard map arrives: a map that comes back first kills the thread (no
    such attribute yet) and the client waits out its 30 s. This thread waits for the barrier."""

    def run(self) -> None:
        owner = getattr(self._target, "__self__", None)
        deadline = time.monotonic() + 30
        while owner is not None and not hasattr(owner, "_init_barrier") and time.monotonic() < deadline:
            time.sleep(0.001)
        super().run()


@pytest.fixture
def official(monkeypatch, server, namespace):
    """A factory of official ``oxia.Client``s on this test's namespace (closed after)."""
    import oxia
    import oxia.internal.service_discovery as sd

    monkeypatch.setattr(sd, "xxhash", _StrXxh)
    monkeypatch.setattr(sd, "threading", types.SimpleNamespace(**{**vars(threading), "Thread": _AfterTheBarrier}))
    made = []

    def make(**kwargs):
        c = oxia.Client(server.address, namespace=kwargs.pop("namespace", namespace), **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture
def xxh3_routing(monkeypatch):
    """Make the official client route keys with xxh3, as the server's shard map says."""
    import oxia.internal.service_discovery as sd

    monkeypatch.setattr(sd, "xxhash", _Xxh3Router)
