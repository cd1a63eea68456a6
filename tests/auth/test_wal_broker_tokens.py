"""A cluster with token authentication and no mutual TLS: brokers reach each other's WAL replicas
with a superuser's token (brokerClientAuthenticationParameters), replicated writes go through,
and the WAL service refuses a client without a token or with a token of another role."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pulsar
import pytest

from nereus.auth.tokens import create_token
from nereus.wal import WalReplicaClient, WalUnauthorized
from tests.standalone_process import Standalone
from tests.tls.test_wal_tls import _wal_services
from tests.waiting import wait_until

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"


def _config(root, extra: str = "") -> str:
    subprocess.run([sys.executable, "-m", "nereus.cli", "tokens", "create-secret-key", "--output",
                    str(root / "secret.key")], check=True, capture_output=True, timeout=60)
    config = root / "standalone.conf"
    config.write_text(f"authenticationEnabled=true\nauthenticationProviders={TOKEN_PROVIDER}\n"
                      f"tokenSecretKey=file://{root / 'secret.key'}\nsuperUserRoles=admin,broker\n{extra}")
    return str(config)


async def _try(address: str, token: bytes | None) -> str:
    host, _, port = address.rpartition(":")
    client = WalReplicaClient(host, int(port), timeout=10, token=None if token is None else lambda: token)
    try:
        await client.blocks()
        return "served"
    except WalUnauthorized as exc:
        return f"refused: {exc}"
    finally:
        await client.close()


def test_replicated_writes_go_with_a_broker_token_and_strangers_are_refused(tmp_path):
    root = tmp_path
    config = _config(root)
    secret = (root / "secret.key").read_bytes()
    (root / "broker.jwt").write_text(create_token("broker", secret_key=secret))
    node = Standalone(root / "data", [
        "--compaction-interval", "0", "--brokers", "2", "--config", config,
        "--broker-client-auth-params", f"file://{root / 'broker.jwt'}",
        "--wal-profile", "replicated", "--wal-ensemble", "2", "--wal-write-quorum", "2", "--wal-ack-quorum", "2"])
    node.start()
    try:
        services = wait_until(lambda: (s := asyncio.run(_wal_services(node.ports["oxia"])))
                              and len([a for a in s if a.get("wal_address")]) == 2 and s,
                              "both brokers registered with a WAL service", timeout=90)
        client = pulsar.Client(node.url, operation_timeout_seconds=30,
                               authentication=pulsar.AuthenticationToken(create_token("admin", secret_key=secret)),
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        try:
            topic = "persistent://public/default/wal-tokens"
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(20):  # each acknowledged once both brokers' WALs have it: the other one with a token
                producer.send(b"m%d" % i)
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert [reader.read_next(30_000).data() for _ in range(20)] == [b"m%d" % i for i in range(20)]
        finally:
            client.close()

        address = services[0]["wal_address"]
        assert asyncio.run(_try(address, None)).startswith("refused")
        assert "not one of superUserRoles" in asyncio.run(_try(address, create_token("app", secret_key=secret).encode()))
        assert "refused" in asyncio.run(_try(address, b"not-a-jwt"))
        assert asyncio.run(_try(address, create_token("broker", secret_key=secret).encode())) == "served"
    finally:
        node.kill()


def test_replicated_with_authentication_and_no_broker_credentials_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "nereus.cli", "standalone", "--data-dir", str(tmp_path / "d"),
                           "--config", _config(tmp_path), "--wal-profile", "replicated"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "brokerClientAuthenticationParameters" in done.stderr and "Traceback" not in done.stderr


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
