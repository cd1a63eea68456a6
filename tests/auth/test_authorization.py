"""Authorization of a real standalone (token authentication): superusers, tenant admins, namespace and
topic grants through Pulsar's REST paths, enforced on the official client's live connections."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request

import pulsar
import pytest

from nereus.auth.tokens import create_token
from nereus.codec.pulsar import pb, wrap
from tests.auth.rest import rest_as
from tests.pulsar_broker.rawclient import RawClient
from tests.standalone_process import Standalone

NEREUS = [sys.executable, "-m", "nereus.cli"]
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("authz")
    subprocess.run([*NEREUS, "tokens", "create-secret-key", "--output", str(root / "secret.key")], check=True,
                   capture_output=True, timeout=60)
    config = root / "standalone.conf"
    config.write_text(f"authenticationEnabled=true\nauthenticationProviders={TOKEN_PROVIDER}\n"
                      f"tokenSecretKey=file://{root / 'secret.key'}\n"
                      "authorizationEnabled=true\nsuperUserRoles=admin\nanonymousUserRole=anon\n"
                      "authorizationAllowWildcardsMatching=true\n")
    node = Standalone(root / "data", ["--compaction-interval", "0", "--config", str(config)])
    node.start()
    node.secret = (root / "secret.key").read_bytes()
    _rest(node, "admin", "PUT", "/admin/v2/tenants/acme", {"adminRoles": ["acme-admin"]})
    _rest(node, "admin", "PUT", "/admin/v2/namespaces/acme/app")
    yield node
    node.stop()


def _token(node, role: str) -> str:
    return create_token(role, secret_key=node.secret)


_rest = rest_as


def _client(node, role: str) -> pulsar.Client:
    return pulsar.Client(node.url, authentication=pulsar.AuthenticationToken(_token(node, role)),
                         operation_timeout_seconds=10)


def _ok(result) -> None:
    status, body = result
    assert status == 204, (status, body)


def _receive_all(consumer, count: int) -> list[bytes]:
    return [consumer.receive(timeout_millis=10000).data() for _ in range(count)]


def test_grants_apply_to_a_live_client_at_its_next_operation(server):
    topic = "persistent://acme/app/orders"
    _ok(_rest(server, "admin", "POST", "/admin/v2/namespaces/acme/app/permissions/writer", ["produce"]))
    client = _client(server, "writer")
    try:
        producer = client.create_producer(topic)
        producer.send(b"one")
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)

        # Granting consume lets the same connection subscribe.
        _ok(_rest(server, "admin", "POST", "/admin/v2/namespaces/acme/app/permissions/writer",
                  ["produce", "consume"]))
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        assert _receive_all(consumer, 1) == [b"one"]
        client.subscribe(re.compile("persistent://acme/app/ord.*"), "pattern").close()

        # Revoking refuses its next producer and subscription; nothing is written by the refused one.
        _ok(_rest(server, "admin", "DELETE", "/admin/v2/namespaces/acme/app/permissions/writer"))
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(topic, "other")
    finally:
        client.close()
    status, stats = _rest(server, "admin", "GET", "/admin/v2/persistent/acme/app/orders/stats")
    assert status == 200 and stats["msgInCounter"] == 1, stats


def test_a_role_without_grants_is_refused_and_nothing_is_written(server):
    topic = "persistent://acme/app/refused"
    _ok(_rest(server, "admin", "PUT", "/admin/v2/persistent/acme/app/refused"))
    client = _client(server, "stranger")
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(topic, "s")
        with pytest.raises(pulsar.AuthorizationError):
            client.create_reader(topic, pulsar.MessageId.earliest)
        # Listing the namespace's topics is refused too (the client reports that refusal as a LookupError).
        with pytest.raises((pulsar.AuthorizationError, pulsar.LookupError)):
            client.subscribe(re.compile("persistent://acme/app/.*"), "pattern")
    finally:
        client.close()
    status, stats = _rest(server, "admin", "GET", "/admin/v2/persistent/acme/app/refused/stats")
    assert status == 200 and stats["msgInCounter"] == 0 and not stats["subscriptions"], stats


def test_a_namespace_is_created_with_the_policies_of_its_body(server):
    """PUT with a ``Policies`` body creates the namespace with them: roles granted there are served at once."""
    only = "persistent://acme/with-policies/only"
    auth = {"namespace_auth": {"ns-role": ["consume", "produce"]},
            "destination_auth": {only: {"topic-role": ["consume"]}},
            "subscription_auth_roles": {"reserved": ["ns-role"]}}
    policies = {"auth_policies": auth, "replication_clusters": ["standalone"],
                "retention_policies": {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10},
                "deduplicationEnabled": True, "schema_compatibility_strategy": "BACKWARD",
                "bundles": {"numBundles": 4}, "message_ttl_in_seconds": 30,  # Pulsar's, not kept here: ignored
                "no_such_policy": {"x": 1}}  # unknown to Pulsar too: ignored as its reader does
    _ok(_rest(server, "admin", "PUT", "/admin/v2/namespaces/acme/with-policies", policies))
    status, stored = _rest(server, "admin", "GET", "/admin/v2/namespaces/acme/with-policies")
    assert status == 200 and stored["auth_policies"] == auth, stored
    assert (stored["replication_clusters"], stored["retention_policies"], stored["deduplicationEnabled"],
            stored["schema_compatibility_strategy"]) == (["standalone"], policies["retention_policies"], True,
                                                         "BACKWARD")
    client, other = _client(server, "ns-role"), _client(server, "topic-role")
    try:
        topic = "persistent://acme/with-policies/t"
        consumer = client.subscribe(topic, "reserved")
        client.create_producer(topic).send(b"granted at creation")
        assert _receive_all(consumer, 1) == [b"granted at creation"]
        other.subscribe(only, "s").close()
        with pytest.raises(pulsar.AuthorizationError):  # consume only
            other.create_producer(only)
        with pytest.raises(pulsar.AuthorizationError):  # a subscription name kept for ns-role
            other.subscribe(only, "reserved")
    finally:
        client.close()
        other.close()
    # A body that cannot be applied is refused with a clear error, and nothing is created.
    status, body = _rest(server, "admin", "PUT", "/admin/v2/namespaces/acme/bad-grant",
                         {"auth_policies": {"namespace_auth": {"r": ["write"]}}})
    assert status == 400 and "write" in body["reason"], body
    status, body = _rest(server, "admin", "PUT", "/admin/v2/namespaces/acme/bad-cluster",
                         {"replication_clusters": ["elsewhere"]})
    assert status == 403 and "elsewhere" in body["reason"], body
    for name in ("bad-grant", "bad-cluster"):
        assert _rest(server, "admin", "GET", f"/admin/v2/namespaces/acme/{name}")[0] == 404


MISSING = ("persistent://no-such-tenant/app/t", "persistent://acme/no-such-namespace/t")


def test_a_missing_tenant_or_namespace_is_topic_not_found_before_any_permission(server):
    """Existence is answered before permission, as Pulsar does: a wrong name is TopicNotFound for every role."""
    client = _client(server, "stranger")
    try:
        for topic in MISSING:
            with pytest.raises(pulsar.TopicNotFound):
                client.create_producer(topic)
            with pytest.raises(pulsar.TopicNotFound):
                client.subscribe(topic, "s")
        with pytest.raises(pulsar.AuthorizationError):  # in a namespace that exists the permission decides
            client.create_producer("persistent://acme/app/not-granted")
    finally:
        client.close()
    # Each command on its own (the client stops at the partitioned metadata): lookup, PRODUCER, SUBSCRIBE.
    raw = RawClient(server.pulsar_port)
    try:
        raw.connect()  # the anonymous role, granted nothing
        for i, topic in enumerate(MISSING):
            raw.send(wrap(pb.CommandLookupTopic(topic=topic, request_id=10 + i)))
            assert raw.expect("LOOKUP_RESPONSE").error == pb.TopicNotFound
            raw.send(wrap(pb.CommandProducer(topic=topic, producer_id=i, request_id=20 + i)))
            assert raw.expect("ERROR").error == pb.TopicNotFound
            raw.send(wrap(pb.CommandSubscribe(topic=topic, subscription="s", subType=pb.CommandSubscribe.Exclusive,
                                              consumer_id=i, request_id=30 + i)))
            assert raw.expect("ERROR").error == pb.TopicNotFound
    finally:
        raw.close()


def test_topic_level_grant(server):
    topic = "persistent://acme/app/metrics"
    _ok(_rest(server, "admin", "POST", "/admin/v2/persistent/acme/app/metrics/permissions/reader", ["consume"]))
    assert _rest(server, "admin", "GET", "/admin/v2/persistent/acme/app/metrics/permissions") == \
        (200, {"reader": ["consume"]})
    status, policies = _rest(server, "admin", "GET", "/admin/v2/namespaces/acme/app")
    assert policies["auth_policies"]["destination_auth"] == {topic: {"reader": ["consume"]}}
    producer_client = _client(server, "admin")
    client = _client(server, "reader")
    try:
        consumer = client.subscribe(topic, "s")
        producer_client.create_producer(topic).send(b"m")
        assert _receive_all(consumer, 1) == [b"m"]
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
        with pytest.raises(pulsar.AuthorizationError):  # the grant is for that topic only
            client.subscribe("persistent://acme/app/other", "s")
    finally:
        client.close()
        producer_client.close()
    _ok(_rest(server, "admin", "DELETE", "/admin/v2/persistent/acme/app/metrics/permissions/reader"))
    assert _rest(server, "admin", "GET", "/admin/v2/persistent/acme/app/metrics/permissions") == (200, {})
    status, body = _rest(server, "admin", "DELETE", "/admin/v2/persistent/acme/app/metrics/permissions/reader")
    assert status == 412, body


def test_superuser_and_tenant_admin_do_everything_in_the_tenant(server):
    for role in ("admin", "acme-admin"):
        topic = f"persistent://acme/app/all-{role}"
        client = _client(server, role)
        try:
            consumer = client.subscribe(topic, "s")
            client.create_producer(topic).send(role.encode())
            assert _receive_all(consumer, 1) == [role.encode()]
        finally:
            client.close()
    # The tenant admin administers its tenant's namespaces, not other tenants nor tenants themselves.
    _ok(_rest(server, "acme-admin", "PUT", "/admin/v2/namespaces/acme/by-admin"))
    _ok(_rest(server, "acme-admin", "POST", "/admin/v2/namespaces/acme/by-admin/permissions/app", ["consume"]))
    assert _rest(server, "acme-admin", "GET", "/admin/v2/namespaces/acme/by-admin/permissions") == \
        (200, {"app": ["consume"]})
    assert _rest(server, "acme-admin", "PUT", "/admin/v2/namespaces/public/mine")[0] == 401
    assert _rest(server, "acme-admin", "PUT", "/admin/v2/tenants/other", {})[0] == 401
    client = _client(server, "acme-admin")
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer("persistent://public/default/not-acme")
    finally:
        client.close()


def test_admin_rest_refuses_roles_without_permission(server):
    status, body = _rest(server, "nobody", "GET", "/admin/v2/tenants")
    assert status == 401 and "reason" in body
    assert _rest(server, "nobody", "PUT", "/admin/v2/namespaces/acme/intruder")[0] == 401
    assert _rest(server, "nobody", "POST", "/admin/v2/namespaces/acme/app/permissions/nobody", ["produce"])[0] == 401
    assert _rest(server, "nobody", "GET", "/admin/v2/namespaces/acme/app/permissions")[0] == 401
    assert _rest(server, "nobody", "GET", "/admin/v2/namespaces/acme/app")[0] == 401
    # A bad grant body is a clear 400.
    status, body = _rest(server, "admin", "POST", "/admin/v2/namespaces/acme/app/permissions/x", ["write"])
    assert status == 400 and "write" in body["reason"]
    # A role with produce on a topic may read its stats (Pulsar: lookup permission), not delete it.
    _ok(_rest(server, "admin", "PUT", "/admin/v2/persistent/acme/app/visible"))
    _ok(_rest(server, "admin", "POST", "/admin/v2/persistent/acme/app/visible/permissions/viewer", ["produce"]))
    assert _rest(server, "viewer", "GET", "/admin/v2/persistent/acme/app/visible/stats")[0] == 200
    assert _rest(server, "viewer", "DELETE", "/admin/v2/persistent/acme/app/visible")[0] == 401
    assert _rest(server, "admin", "GET", "/admin/v2/persistent/acme/app/visible/stats")[0] == 200


def _admin_cli(node, role: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*NEREUS, "admin", "--url", node.http, "--token", _token(node, role), *args],
                          capture_output=True, text=True, timeout=60)


def test_admin_cli_grants_and_revokes(server):
    done = _admin_cli(server, "acme-admin", "namespaces", "grant-permission", "acme/app", "--role", "cli-role",
                      "--actions", "produce,consume")
    assert done.returncode == 0, done.stderr
    listed = _admin_cli(server, "acme-admin", "--json", "namespaces", "permissions", "acme/app")
    assert json.loads(listed.stdout)["cli-role"] == ["consume", "produce"]
    done = _admin_cli(server, "acme-admin", "topics", "grant-permission", "persistent://acme/app/cli",
                      "--role", "topic-role", "--actions", "consume")
    assert done.returncode == 0, done.stderr
    listed = json.loads(_admin_cli(server, "acme-admin", "--json", "topics", "permissions",
                                   "persistent://acme/app/cli").stdout)
    assert listed["topic-role"] == ["consume"] and listed["cli-role"] == ["consume", "produce"]
    assert _admin_cli(server, "acme-admin", "topics", "revoke-permission", "persistent://acme/app/cli",
                      "--role", "topic-role").returncode == 0
    assert _admin_cli(server, "acme-admin", "namespaces", "revoke-permission", "acme/app",
                      "--role", "cli-role").returncode == 0
    assert "cli-role" not in json.loads(_admin_cli(server, "acme-admin", "--json", "namespaces", "permissions",
                                                   "acme/app").stdout)
    refused = _admin_cli(server, "nobody", "namespaces", "grant-permission", "acme/app", "--role", "x",
                         "--actions", "produce")
    assert refused.returncode != 0


def test_the_anonymous_role_gets_its_grants(server):
    topic = "persistent://acme/app/open"
    client = pulsar.Client(server.url, operation_timeout_seconds=10)  # no credentials: the anonymous role
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
        _ok(_rest(server, "admin", "POST", "/admin/v2/persistent/acme/app/open/permissions/anon", ["produce"]))
        client.create_producer(topic).send(b"anonymous")
    finally:
        client.close()
    with pytest.raises(urllib.error.HTTPError) as refused:  # the admin API without credentials: not a superuser
        urllib.request.urlopen(f"{server.http}/admin/v2/tenants", timeout=10)
    assert refused.value.code == 401


def test_a_method_no_provider_serves_is_the_anonymous_role(server):
    """As Pulsar's broker: CONNECT with an unknown method gets anonymousUserRole, then authorization decides."""
    topic = "persistent://acme/app/unknown-method"
    auth = pulsar.AuthenticationBasic("someone", "pw", "unknown")
    client = pulsar.Client(server.url, authentication=auth, operation_timeout_seconds=10)
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(topic, "s")
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
        _ok(_rest(server, "admin", "POST", "/admin/v2/persistent/acme/app/unknown-method/permissions/anon",
                  ["produce", "consume"]))
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"as anon")
        assert consumer.receive(timeout_millis=10000).data() == b"as anon"
    finally:
        client.close()


def test_kafka_clients_without_sasl_get_the_anonymous_role(server):
    from confluent_kafka import KafkaError, Producer

    topic = "kafka-anon"
    _ok(_rest(server, "admin", "PUT", f"/admin/v2/persistent/public/default/{topic}/partitions", 1))

    def produce() -> KafkaError | None:
        outcome = []
        producer = Producer({"bootstrap.servers": server.bootstrap, "message.timeout.ms": 10000})
        producer.produce(topic, b"plain", on_delivery=lambda err, _msg: outcome.append(err))
        producer.flush(20)
        assert outcome, "no delivery report"
        return outcome[0]

    refused = produce()
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _ok(_rest(server, "admin", "POST", f"/admin/v2/persistent/public/default/{topic}/permissions/anon", ["produce"]))
    assert produce() is None  # the PLAINTEXT listener's principal is anonymousUserRole
    status, stats = _rest(server, "admin", "GET", f"/admin/v2/persistent/public/default/{topic}/partitioned-stats")
    assert status == 200 and stats["msgInCounter"] == 1


def test_subscription_names_restricted_to_their_roles(server):
    topic = "persistent://acme/app/subs"
    for role in ("sub-a", "sub-b"):
        _ok(_rest(server, "acme-admin", "POST", f"/admin/v2/namespaces/acme/app/permissions/{role}", ["consume"]))
    done = _admin_cli(server, "acme-admin", "namespaces", "grant-subscription-permission", "acme/app",
                      "--subscription", "locked", "--roles", "sub-a")
    assert done.returncode == 0, done.stderr
    listed = _admin_cli(server, "acme-admin", "--json", "namespaces", "subscription-permission", "acme/app")
    assert json.loads(listed.stdout) == {"locked": ["sub-a"]}
    assert _rest(server, "acme-admin", "POST", "/admin/v2/namespaces/acme/app/permissions/subscription/x",
                 "sub-a")[0] == 400

    a, b = _client(server, "sub-a"), _client(server, "sub-b")
    try:
        with pytest.raises(pulsar.AuthorizationError):
            b.subscribe(topic, "locked")
        b.subscribe(topic, "free").close()
        a.subscribe(topic, "locked").close()
        done = _admin_cli(server, "acme-admin", "namespaces", "revoke-subscription-permission", "acme/app",
                          "--subscription", "locked", "--role", "sub-a")
        assert done.returncode == 0, done.stderr
        assert _rest(server, "acme-admin", "GET", "/admin/v2/namespaces/acme/app/permissions/subscription") == \
            (200, {})
        b.subscribe(topic, "locked").close()  # no roles left: the name is open to every consumer again
    finally:
        a.close()
        b.close()
    assert _rest(server, "acme-admin", "DELETE", "/admin/v2/namespaces/acme/app/permissions/locked/sub-a")[0] == 412


def test_wildcard_roles_in_grants(server):
    topic = "persistent://acme/app/wild"
    _ok(_rest(server, "acme-admin", "POST", "/admin/v2/namespaces/acme/app/permissions/team.*", ["produce"]))
    _ok(_rest(server, "acme-admin", "POST", "/admin/v2/persistent/acme/app/wild/permissions/*.ops", ["consume"]))
    _ok(_rest(server, "acme-admin", "POST", "/admin/v2/namespaces/acme/app/permissions/a.*.b", ["produce"]))
    for role, can_produce, can_consume in (("team.x", True, False), ("db.ops", False, True),
                                           ("a.x.b", False, False), ("teamx", False, False)):
        client = _client(server, role)
        try:
            if can_produce:
                client.create_producer(topic).send(role.encode())
            else:
                with pytest.raises(pulsar.AuthorizationError):
                    client.create_producer(topic)
            if can_consume:
                client.subscribe(topic, f"s-{role}").close()
            else:
                with pytest.raises(pulsar.AuthorizationError):
                    client.subscribe(topic, f"s-{role}")
        finally:
            client.close()
