"""Brokers reach each other's WAL replicas over mutual TLS (brokerClientTlsEnabled): writes replicated
to two brokers go through, and the WAL service refuses a client without a trusted certificate."""

from __future__ import annotations

import asyncio
import json
import ssl

import pulsar
import pytest

from nereus.broker.cluster.membership import BROKERS
from nereus.meta import MetadataError, connect
from nereus.wal import ReplicaUnavailable, WalReplicaClient
from tests.standalone_process import Standalone
from tests.waiting import wait_until


async def _wal_services(oxia_port: int) -> list[dict]:
    """The registered brokers' addresses; none while the metadata service does not answer yet (a
    loaded machine: its shard map comes late), so waiting on it asks again."""
    meta = connect(f"oxia://127.0.0.1:{oxia_port}")
    try:
        return [json.loads(rec.value)["address"] async for rec in meta.range_scan(BROKERS, BROKERS + "\uffff")]
    except MetadataError:
        return []
    finally:
        await meta.close()


async def _ping(address: str, context: ssl.SSLContext | None) -> bool:
    host, _, port = address.rpartition(":")
    client = WalReplicaClient(host, int(port), ssl=context, timeout=5)
    try:
        await client.ping()
        return True
    except ReplicaUnavailable:
        return False
    finally:
        await client.close()


def test_replicated_writes_go_over_mutual_tls_and_strangers_are_refused(tmp_path, pki):
    node = Standalone(tmp_path / "data", [
        "--compaction-interval", "0", "--brokers", "2",
        "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
        "--tls-trust-certs-file", str(pki.ca), "--broker-client-tls",
        "--broker-client-cert-file", str(pki.client_cert), "--broker-client-key-file", str(pki.client_key),
        "--wal-profile", "replicated", "--wal-ensemble", "2", "--wal-write-quorum", "2", "--wal-ack-quorum", "2"])
    node.start()
    try:
        services = wait_until(lambda: (s := asyncio.run(_wal_services(node.ports["oxia"])))
                              and len([a for a in s if a.get("wal_address")]) == 2 and s,
                              "both brokers registered with a WAL service", timeout=90)
        assert all(a["wal_tls"] for a in services)
        client = pulsar.Client(node.url, operation_timeout_seconds=30,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        try:
            producer = client.create_producer("persistent://public/default/wal-tls", batching_enabled=False)
            for i in range(20):  # each acknowledged once both brokers' WALs have it: over TLS
                producer.send(b"m%d" % i)
            reader = client.create_reader("persistent://public/default/wal-tls", pulsar.MessageId.earliest)
            assert [reader.read_next(30_000).data() for _ in range(20)] == [b"m%d" % i for i in range(20)]
        finally:
            client.close()

        address = services[0]["wal_address"]
        assert not asyncio.run(_ping(address, None))  # plaintext
        anonymous = ssl.create_default_context(cafile=str(pki.ca))
        anonymous.check_hostname = False
        assert not asyncio.run(_ping(address, anonymous))  # TLS without a client certificate
        trusted = ssl.create_default_context(cafile=str(pki.ca))
        trusted.check_hostname = False
        trusted.load_cert_chain(str(pki.client_cert), str(pki.client_key))
        assert asyncio.run(_ping(address, trusted))
    finally:
        node.kill()


def test_broker_client_tls_without_a_client_certificate_is_one_line(tmp_path, pki):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "nereus.cli", "standalone", "--data-dir", str(tmp_path / "d"),
                           "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
                           "--tls-trust-certs-file", str(pki.ca), "--broker-client-tls"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "brokerClientCertificateFilePath" in done.stderr and "Traceback" not in done.stderr


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
