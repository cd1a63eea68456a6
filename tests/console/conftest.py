"""A real ``nereus standalone`` process for the console tests, and its JSON."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.standalone_process import Standalone


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    standalone = Standalone(tmp_path_factory.mktemp("console") / "data")
    standalone.start()
    yield standalone
    standalone.stop()


def get_json(node: Standalone, path: str) -> tuple[int, object]:
    """(status, JSON body) of a GET on the node's HTTP port; error statuses are returned, not raised."""
    try:
        with urllib.request.urlopen(node.http + path, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
