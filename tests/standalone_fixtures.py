"""The standalone fixtures the test packages share, made by name (``conftest.py`` files use them)."""

from __future__ import annotations

import uuid

import pytest

from tests.standalone_process import Standalone, running


def shared_standalone(name: str, directory: str, extra_args: list[str] | None = None):
    """A fixture ``name``: one standalone per test module, in a temporary ``directory``
    (tests share it, using distinct topics and groups); it must stop cleanly."""
    @pytest.fixture(scope="module", name=name)
    def fixture(tmp_path_factory):
        with running(tmp_path_factory.mktemp(directory) / "data", extra_args) as server:
            yield server
    return fixture


def own_standalone(name: str):
    """A fixture ``name``: a standalone of the test's own, not started (restart and kill tests); killed after."""
    @pytest.fixture(name=name)
    def fixture(tmp_path):
        server = Standalone(tmp_path / "data")
        yield server
        server.kill()
    return fixture


def unique_name(name: str, prefix: str):
    """A fixture ``name``: a fresh ``{prefix}-{10 hex digits}`` for each test."""
    @pytest.fixture(name=name)
    def fixture() -> str:
        return f"{prefix}-{uuid.uuid4().hex[:10]}"
    return fixture
