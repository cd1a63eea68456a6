"""Fixtures: a real standalone process (shared per module), official clients, and ``nereus admin`` runners."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from click.testing import CliRunner

from nereus.cli import main
from tests.pulsar_broker import conftest as _broker

pulsar, standalone, make_client, client = _broker.pulsar, _broker.standalone, _broker.make_client, _broker.client


class Admin:
    """Runs ``nereus admin --url <standalone> ...`` in-process (the installed command's code path)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.runner = CliRunner()

    def run(self, *args: str, env: dict | None = None):
        return self.runner.invoke(main, ["admin", "--url", self.url, *args], env=env, catch_exceptions=False)

    def ok(self, *args: str) -> str:
        result = self.run(*args)
        assert result.exit_code == 0, f"{args} -> {result.exit_code}: {result.stdout} {result.stderr}"
        return result.stdout

    def json(self, *args: str):
        return json.loads(self.ok(*args, "--json"))


@pytest.fixture(scope="module")
def admin(standalone) -> Admin:
    return Admin(standalone.http)


@pytest.fixture
def namespace(admin) -> str:
    ns = f"public/cli-{uuid.uuid4().hex[:6]}"
    admin.ok("namespaces", "create", ns)
    return ns


def run_process(*args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """``python -m nereus.cli ...`` as a separate process, for exit codes and stderr as users see them."""
    return subprocess.run([sys.executable, "-m", "nereus.cli", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)
