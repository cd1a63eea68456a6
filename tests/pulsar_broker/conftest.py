"""Fixtures: a real `nereus standalone` process and official pulsar-client instances."""

from __future__ import annotations

import uuid

import pytest

from tests.standalone_fixtures import own_standalone, shared_standalone


@pytest.fixture(scope="session")
def pulsar():
    """The official ``pulsar-client`` package."""
    module = pytest.importorskip("pulsar")
    if not hasattr(module, "Client"):
        pytest.skip("'import pulsar' did not find pulsar-client: run pytest from the repo root")
    return module


standalone = shared_standalone("standalone", "broker")
fresh_standalone = own_standalone("fresh_standalone")


@pytest.fixture
def make_client(pulsar):
    clients = []

    def make(url: str, **kw):
        options = dict(operation_timeout_seconds=10, connection_timeout_ms=3000, io_threads=1,
                       message_listener_threads=1, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        options.update(kw)
        client = pulsar.Client(url, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        try:
            client.close()
        except Exception:
            pass


@pytest.fixture
def client(standalone, make_client):
    return make_client(standalone.url)


@pytest.fixture
def topic():
    return f"persistent://public/default/t-{uuid.uuid4().hex[:10]}"


def receive_all(consumer, count: int, timeout_ms: int = 10000) -> list:
    out = []
    for _ in range(count):
        out.append(consumer.receive(timeout_millis=timeout_ms))
    return out


def assert_no_more(consumer, pulsar, timeout_ms: int = 500) -> None:
    with pytest.raises(pulsar.Timeout):
        msg = consumer.receive(timeout_millis=timeout_ms)
        raise AssertionError(f"unexpected message {msg.data()!r}")
