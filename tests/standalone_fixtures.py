"""The standalone fixtures the test packages share, made by name (``conftest.py`` files use them)."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from tests.standalone_process import Standalone, running

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
BASIC_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic"


def shared_standalone(name: str, directory: str, extra_args: list[str] | None = None):
    """A fixture ``name``: one standalone per test module, in a temporary ``directory``
    (tests share it, using distinct topics and groups); it must stop cleanly."""
    @pytest.fixture(scope="module", name=name)
    def fixture(tmp_path_factory):
        with running(tmp_path_factory.mktemp(directory) / "data", extra_args) as server:
            yield server
    return fixture


def token_auth_standalone(name: str, directory: str, *, htpasswd: str | None = None, super_users: str = "admin",
                          extra_config: str = ""):
    """A fixture ``name``: one standalone per test module with token authentication and
    authorization on (``super_users`` the superusers); its ``secret`` signs tokens of any role
    (``create_token(role, secret_key=node.secret)``). ``htpasswd``: basic authentication
    too, with these users (an htpasswd file's text); ``extra_config``: more lines of its file."""
    @pytest.fixture(scope="module", name=name)
    def fixture(tmp_path_factory):
        root = tmp_path_factory.mktemp(directory)
        subprocess.run([sys.executable, "-m", "nereus.cli", "tokens", "create-secret-key", "--output",
                        str(root / "secret.key")], check=True, capture_output=True, timeout=60)
        providers, basic = TOKEN_PROVIDER, ""
        if htpasswd is not None:
            (root / "htpasswd").write_text(htpasswd)
            providers += "," + BASIC_PROVIDER
            basic = f"basicAuthConf=file://{root / 'htpasswd'}\n"
        config = root / "standalone.conf"
        config.write_text(f"authenticationEnabled=true\nauthenticationProviders={providers}\n{basic}"
                          f"tokenSecretKey=file://{root / 'secret.key'}\n"
                          f"authorizationEnabled=true\nsuperUserRoles={super_users}\n{extra_config}")
        node = Standalone(root / "data", ["--compaction-interval", "0", "--config", str(config)])
        node.start()
        node.secret = (root / "secret.key").read_bytes()
        yield node
        node.stop()
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
