"""Replication to a cluster that takes TLS connections and checks tokens and permissions.

West runs TLS listeners beside its plaintext ones, with token authentication and
authorization on; east's record of west names both of west's URLs with
``brokerClientTlsEnabled``, the CA to trust, and Pulsar's token plugin with the token of a
role west allows to produce in the namespace, and nothing more. A record with wrong
credentials keeps the replicator out; correcting the record lets it in, with no restart.
Where that role administers the tenant, a partitioned topic's replicators make the topic
in west through its HTTPS admin API.
"""

from __future__ import annotations

import urllib.error

import pulsar
import pytest

from nereus.auth.tokens import create_secret_key, create_token
from tests.ports import free_port
from tests.replication.geo import Cluster, admin, stats
from tests.waiting import wait_until

pytest.importorskip("cryptography")
from tests.tls.certs import make_pki  # noqa: E402  (after the skip: it needs cryptography)

NAMESPACE = "secure/ns"
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
REPLICATOR_ROLE = "east-replicator"


class Secured:
    """East (open) and west (TLS, tokens, authorization), and what east's record of west holds."""

    def __init__(self, east: Cluster, west: Cluster, secret: bytes, pki, tls_ports: dict[str, int]) -> None:
        self.east, self.west, self.secret, self.pki = east, west, secret, pki
        self.superuser = create_token("admin", secret_key=secret)
        self.pulsar_tls_url = f"pulsar+ssl://127.0.0.1:{tls_ports['pulsar']}"
        self.https_url = f"https://127.0.0.1:{tls_ports['https']}"

    def west_record(self, **changes) -> dict:
        """East's record of west: TLS with west's CA, the replicator role's token; ``changes`` on top."""
        token = create_token(REPLICATOR_ROLE, secret_key=self.secret)
        return {"serviceUrl": self.west.node.http, "serviceUrlTls": self.https_url,
                "brokerServiceUrl": self.west.node.url, "brokerServiceUrlTls": self.pulsar_tls_url,
                "brokerClientTlsEnabled": True, "brokerClientTrustCertsFilePath": str(self.pki.ca),
                "brokerClientAuthenticationPlugin": TOKEN_PLUGIN,
                "brokerClientAuthenticationParameters": f"token:{token}", **changes}

    def west_stats(self, topic: str) -> dict | None:
        """West's stats of ``topic``; None while west has no such topic."""
        try:
            return stats(self.west.node, topic, token=self.superuser)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def west_client(self) -> pulsar.Client:
        return pulsar.Client(self.pulsar_tls_url, tls_trust_certs_file_path=str(self.pki.ca),
                             authentication=pulsar.AuthenticationToken(self.superuser), operation_timeout_seconds=60)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    root = tmp_path_factory.mktemp("geo-tls")
    pki = make_pki(root / "pki")
    secret = create_secret_key()
    (root / "secret.key").write_bytes(secret)
    tls_ports = {"pulsar": free_port(), "https": free_port()}
    config = root / "west.conf"
    config.write_text(f"authenticationEnabled=true\nauthenticationProviders={TOKEN_PROVIDER}\n"
                      f"tokenSecretKey=file://{root / 'secret.key'}\n"
                      "authorizationEnabled=true\nsuperUserRoles=admin\n"
                      f"brokerServicePortTls={tls_ports['pulsar']}\nwebServicePortTls={tls_ports['https']}\n"
                      f"tlsCertificateFilePath={pki.server_cert}\ntlsKeyFilePath={pki.server_key}\n"
                      f"tlsTrustCertsFilePath={pki.ca}\n")
    east = Cluster("east", root)
    west = Cluster("west", root, extra=["--config", str(config)])
    try:
        east.start()
        west.start()
        made = Secured(east, west, secret, pki, tls_ports)
        admin(east.node, "PUT", "/clusters/west", made.west_record())
        admin(west.node, "PUT", "/clusters/east", {"serviceUrl": east.node.http, "brokerServiceUrl": east.node.url},
              token=made.superuser)
        tenant = {"adminRoles": [], "allowedClusters": ["east", "west"]}
        admin(east.node, "PUT", "/tenants/secure", tenant)
        admin(west.node, "PUT", "/tenants/secure", tenant, token=made.superuser)
        admin(east.node, "PUT", f"/namespaces/{NAMESPACE}")
        admin(west.node, "PUT", f"/namespaces/{NAMESPACE}", token=made.superuser)
        admin(east.node, "POST", f"/namespaces/{NAMESPACE}/replication", ["east", "west"])
        # The replicator's role may produce in west's namespace, and do nothing else there.
        admin(west.node, "POST", f"/namespaces/{NAMESPACE}/permissions/{REPLICATOR_ROLE}", ["produce"],
              token=made.superuser)
        yield made
    finally:
        east.stop()
        west.stop()


def replication_to_west(secured: Secured, topic: str) -> dict | None:
    return stats(secured.east.node, topic)["replication"].get("west")


def publish(secured: Secured, topic: str, messages: list[bytes]) -> None:
    client = pulsar.Client(secured.east.node.url)
    try:
        producer = client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
        for i, data in enumerate(messages):
            producer.send_async(data, None, properties={"i": str(i)})
        producer.flush()
    finally:
        client.close()


def read_in_west(secured: Secured, topic: str, count: int) -> list[bytes]:
    client = secured.west_client()
    try:
        consumer = client.subscribe(topic, "audit", initial_position=pulsar.InitialPosition.Earliest)
        got = []
        while len(got) < count:
            message = consumer.receive(timeout_millis=60_000)
            consumer.acknowledge(message)
            got.append(message.data())
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=1000)
        return got
    finally:
        client.close()


def test_replication_goes_over_tls_with_the_token_of_a_role_allowed_to_produce(secured):
    topic = f"persistent://{NAMESPACE}/over-tls"
    sent = [f"tls-{i}".encode() for i in range(200)]
    publish(secured, topic, sent)
    replication = wait_until(lambda: (r := replication_to_west(secured, topic)) and r["connected"]
                             and r["replicationBacklog"] == 0 and r, "east's replicator to west caught up")
    assert replication["outboundConnection"] == secured.pulsar_tls_url  # not the plaintext URL beside it
    assert read_in_west(secured, topic, len(sent)) == sent
    assert secured.west_stats(topic)["msgInCounter"] == len(sent)


def test_wrong_credentials_keep_the_replicator_out_until_the_record_is_corrected(secured, tmp_path):
    topic = f"persistent://{NAMESPACE}/corrected"
    stranger = make_pki(tmp_path / "stranger-pki", "stranger")
    forged = create_token(REPLICATOR_ROLE, secret_key=create_secret_key())
    wrong = {  # what east's record says -> words of the error the replicator meets with it
        "a token signed with another key": (
            {"brokerClientAuthenticationParameters": f"token:{forged}"},
            "unable to authenticate"),
        "the token of a role with no permission there": (
            {"brokerClientAuthenticationParameters": f"token:{create_token('stranger', secret_key=secured.secret)}"},
            "not authorized"),
        "a CA that did not sign west's certificate": (
            {"brokerClientTrustCertsFilePath": str(stranger.ca)}, "certificate verify failed"),
    }
    sent = [f"fixed-{i}".encode() for i in range(100)]
    try:
        first = True
        for what, (changes, word) in wrong.items():
            admin(secured.east.node, "POST", "/clusters/west", secured.west_record(**changes))
            if first:  # the topic (and its replicator) starts with the first wrong record in place
                publish(secured, topic, sent)
                first = False
            refused = wait_until(lambda: (r := replication_to_west(secured, topic)) and r["error"]
                                 and word in r["error"].lower() and r, f"the replicator refused with {what}")
            assert refused["connected"] is False, what
            assert refused["replicationBacklog"] == len(sent), what
            assert not (secured.west_stats(topic) or {}).get("msgInCounter"), what  # nothing arrived
    finally:
        admin(secured.east.node, "POST", "/clusters/west", secured.west_record())
    wait_until(lambda: (r := replication_to_west(secured, topic)) and r["connected"] and r["replicationBacklog"] == 0,
               "east's replicator to west caught up with the corrected record")
    assert read_in_west(secured, topic, len(sent)) == sent
    assert secured.west_stats(topic)["msgInCounter"] == len(sent)


def test_a_partitioned_topic_is_made_in_the_secured_cluster_over_https_with_the_token(secured):
    # Making a topic takes more than producing: in this tenant of west the replicator's role is an admin.
    west, token = secured.west.node, secured.superuser
    tenant = {"adminRoles": [REPLICATOR_ROLE], "allowedClusters": ["east", "west"]}
    admin(secured.east.node, "PUT", "/tenants/managed", tenant)
    admin(west, "PUT", "/tenants/managed", tenant, token=token)
    for node, as_role in ((secured.east.node, None), (west, token)):
        admin(node, "PUT", "/namespaces/managed/ns", token=as_role)
        admin(node, "POST", "/namespaces/managed/ns/replication", ["east", "west"], token=as_role)
    admin(secured.east.node, "PUT", "/persistent/managed/ns/parted/partitions", 3)
    topic = "persistent://managed/ns/parted"
    sent = [f"part-{i}".encode() for i in range(60)]
    publish(secured, topic, sent)
    wait_until(lambda: admin(west, "GET", "/persistent/managed/ns/parted/partitions", token=token)["partitions"] == 3,
               "the partitioned topic made in west")
    got = read_in_west(secured, topic, len(sent))
    assert sorted(got) == sorted(sent)
