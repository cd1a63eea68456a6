"""Fixtures: the standalone process and client fixtures of tests/pulsar_broker, plus a REST helper."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.pulsar_broker import conftest as _broker
from tests.waiting import wait_until

# The broker tests' fixtures, shared: a standalone per module, official clients, topic names.
pulsar, standalone, make_client, client, topic = (_broker.pulsar, _broker.standalone, _broker.make_client,
                                                  _broker.client, _broker.topic)


class Admin:
    """Plain-HTTP calls to ``/admin/v2``; every call returns ``(status, decoded JSON body or None)``."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/") + "/admin/v2"

    def call(self, method: str, path: str, body=None, raw: bytes | None = None):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                content = response.read()
                return response.status, (json.loads(content) if content else None)
        except urllib.error.HTTPError as exc:
            content = exc.read()
            return exc.code, (json.loads(content) if content else None)

    def get(self, path: str):
        return self.call("GET", path)

    def put(self, path: str, body=None):
        return self.call("PUT", path, body)

    def post(self, path: str, body=None):
        return self.call("POST", path, body)

    def delete(self, path: str):
        return self.call("DELETE", path)

    def ok(self, method: str, path: str, body=None):
        """The body of a call that must succeed (2xx)."""
        status, value = self.call(method, path, body)
        assert 200 <= status < 300, f"{method} {path} -> {status} {value}"
        return value


@pytest.fixture(scope="module")
def admin(standalone) -> Admin:
    return Admin(standalone.http)


def rest_path(name: str) -> str:
    """``persistent://t/ns/x`` -> ``/persistent/t/ns/x``."""
    return "/" + name.replace("://", "/", 1)


__all__ = ["Admin", "wait_until"]
